# mutant: identity_constant
# exercise: upstream_identity
# mistake: always says the configuration matches.
def upstream_identity(selected, used, unordered=()):
    return {"matches": True, "mismatches": []}
