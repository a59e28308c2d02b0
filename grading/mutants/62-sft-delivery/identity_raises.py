# mutant: identity_raises
# exercise: upstream_identity
# mistake: raises on every input.
def upstream_identity(selected, used, unordered=()):
    raise ValueError("cannot compare")
