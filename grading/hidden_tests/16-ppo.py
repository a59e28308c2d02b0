# TEMPLATE: replace these hidden tests with the ones of your exercises (>= 12, each contract clause by name).
# %% hidden exercise=pass_share points=1 name=refuses_ints_for_outcomes
# hint: an outcome is a bool; 0 and 1 are not outcomes.
for bad in ([1, 0], [True, 1], [], "TF", None):
    try:
        pass_share(bad)
    except ValueError:
        continue
    raise AssertionError(f"{bad!r} accepted")

# %% hidden exercise=pass_share points=1 name=returns_a_float_share
# hint: the share is a float even when it is 0 or 1.
assert type(pass_share([True, True])) is float and pass_share([True, True]) == 1.0

# %% hidden exercise=pass_share points=1 name=agrees_with_reference_on_generated_groups
# hint: any list, valid or not: the same share, or the same error.
from hypothesis import strategies as st
items = st.one_of(st.booleans(), st.integers(0, 1), st.none())
reference.agrees("pass_share", st.tuples(st.lists(items, max_size=6)), cases=80)

# %% hidden exercise=pass_share points=1 name=counts_every_outcome
# hint: the denominator is every outcome of the group.
assert pass_share([True] + [False] * 3) == 0.25

# %% hidden exercise=rank_groups points=1 name=ties_by_name
# hint: equal shares are ordered by name.
assert rank_groups({"z": 0.5, "m": 0.5, "a": 0.5}) == ["a", "m", "z"]

# %% hidden exercise=rank_groups points=1 name=refuses_bad_shares
# hint: check every name and every share.
for bad in ({"a": 1.5}, {"a": float("nan")}, {"": 0.5}, {"a": True}, [("a", 0.5)]):
    try:
        rank_groups(bad)
    except ValueError:
        continue
    raise AssertionError(f"{bad!r} accepted")

# %% hidden exercise=rank_groups points=1 name=agrees_with_reference_on_generated_shares
# hint: any dict, valid or not: the same order, or the same error.
from hypothesis import strategies as st
shares = st.dictionaries(st.sampled_from(["a", "b", "c", ""]), st.one_of(st.floats(-1, 2), st.booleans()), max_size=4)
reference.agrees("rank_groups", st.tuples(shares), cases=80)

# %% hidden exercise=rank_groups points=1 name=empty_is_an_empty_ranking
# hint: no group, no ranking.
assert rank_groups({}) == []

# %% hidden exercise=gate points=1 name=minimum_is_inclusive
# hint: a share equal to the minimum is admitted.
assert gate({"a": 0.5}, 0.5)["admitted"] == ["a"]

# %% hidden exercise=gate points=1 name=refuses_a_bad_minimum
# hint: the minimum is a finite number in [0, 1].
for bad in (-0.1, 1.1, float("nan"), True):
    try:
        gate({"a": 0.5}, bad)
    except ValueError:
        continue
    raise AssertionError(f"{bad!r} accepted")

# %% hidden exercise=gate points=1 name=admitted_in_rank_order
# hint: admitted groups come in rank_groups order.
assert gate({"b": 0.6, "a": 0.9, "c": 0.6}, 0.6)["admitted"] == ["a", "b", "c"]

# %% hidden exercise=gate points=1 name=agrees_with_reference_on_generated_gates
# hint: any shares and minimum: the same decision, or the same error.
from hypothesis import strategies as st
shares = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.floats(0, 1), max_size=3)
reference.agrees("gate", st.tuples(shares, st.one_of(st.floats(-0.5, 1.5), st.booleans())), cases=80)
