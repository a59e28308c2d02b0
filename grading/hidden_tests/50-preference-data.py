# %% hidden exercise=validate_preference_pairs points=1 name=each_issue_code_on_its_own
# hint: each of the six codes has its own condition; a pair with one defect gets exactly that one code.
def pair(pair_id, prompt, chosen, rejected, rejected_prompt=None, tie=False):
    return {"id": pair_id, "chosen": {"prompt": prompt, "response": chosen},
            "rejected": {"prompt": prompt if rejected_prompt is None else rejected_prompt, "response": rejected},
            "tie": tie}

pairs = [pair("ok", "Compute 7 * 8.", "56", "54"),
         pair("join", "Compute 7 * 8.", "56", "2", rejected_prompt="Compute 7 - 5."),
         pair("no_chosen", "Compute 9 + 9.", "", "17"),
         pair("no_rejected", "Compute 9 + 9.", "18", "\t"),
         pair("same", "Compute 9 - 1.", "8", "8"),
         pair("copy", "Compute 7 * 8.", "56", "54"),
         pair("even", "Compute 9 - 1.", "8", "eight", tie=True)]
report = validate_preference_pairs(pairs)
assert report["issues"] == {"ok": [], "join": ["prompt_mismatch"], "no_chosen": ["empty_chosen"],
                            "no_rejected": ["empty_rejected"], "same": ["same_response"], "copy": ["duplicate"],
                            "even": ["tie"]}
assert report["duplicate_of"] == {"copy": "ok"}
assert [kept["id"] for kept in report["kept"]] == ["ok"]

# %% hidden exercise=validate_preference_pairs points=1 name=every_issue_reported_in_the_fixed_order
# hint: do not stop at the first issue: a pair can be a join error, have empty answers, repeat an earlier pair and be a tie at once, and the codes keep the documented order.
first = {"id": "a", "chosen": {"prompt": "Q one", "response": " "}, "rejected": {"prompt": "Q two", "response": ""},
         "tie": True}
second = {"id": "b", "chosen": {"prompt": "q  ONE", "response": "\n"}, "rejected": {"prompt": "q two ", "response": ""},
          "tie": True}
report = validate_preference_pairs([first, second])
assert report["issues"]["a"] == ["prompt_mismatch", "empty_chosen", "empty_rejected", "tie"]
assert report["issues"]["b"] == ["prompt_mismatch", "empty_chosen", "empty_rejected", "duplicate", "tie"]
assert report["counts"] == {"prompt_mismatch": 2, "empty_chosen": 2, "empty_rejected": 2, "same_response": 0,
                            "duplicate": 1, "tie": 2}
assert report["kept"] == [] and report["duplicate_of"] == {"b": "a"}

# %% hidden exercise=validate_preference_pairs points=1 name=comparisons_use_the_normalised_text
# hint: NFKC (full-width digits become ASCII), casefold, and whitespace runs joined by one space decide sameness and duplicates; spaces inside a text still count.
def pair(pair_id, prompt, chosen, rejected, rejected_prompt=None):
    return {"id": pair_id, "chosen": {"prompt": prompt, "response": chosen},
            "rejected": {"prompt": prompt if rejected_prompt is None else rejected_prompt, "response": rejected},
            "tie": False}

pairs = [pair("base", "Compute 12 + 30.", "42", "43"),
         pair("width", "Ｃompute １２ + ３０.", "４２", "43"),
         pair("case", "COMPUTE 12\t+   30.\n", "42", " 43 "),
         pair("strasse", "Straße", "Maße", "MASSE"),
         pair("spaced", "Compute 12 + 30.", "42", "4 2"),
         pair("glued", "Compute 12+30.", "42", "43", rejected_prompt="Compute 12 + 30.")]
report = validate_preference_pairs(pairs)
assert report["issues"]["width"] == ["duplicate"] and report["issues"]["case"] == ["duplicate"]
assert report["duplicate_of"] == {"width": "base", "case": "base"}
assert report["issues"]["strasse"] == ["same_response"], "casefold: ß and ss compare equal"
assert report["issues"]["spaced"] == [], "'4 2' is not '42': only runs of whitespace collapse"
assert report["issues"]["glued"] == ["prompt_mismatch"]

# %% hidden exercise=validate_preference_pairs points=1 name=the_first_copy_anchors_every_later_duplicate
# hint: the first pair of a content is never a duplicate, even when it has other issues, and every later copy points at that first id.
def pair(pair_id, chosen, tie):
    return {"id": pair_id, "chosen": {"prompt": "Name a prime.", "response": chosen},
            "rejected": {"prompt": "Name a prime.", "response": "4"}, "tie": tie}

report = validate_preference_pairs([pair("x1", "7", True), pair("x2", "7", False), pair("x3", " 7", False),
                                    pair("y1", "5", False)])
assert report["issues"] == {"x1": ["tie"], "x2": ["duplicate"], "x3": ["duplicate"], "y1": []}
assert report["duplicate_of"] == {"x2": "x1", "x3": "x1"}
assert report["counts"]["duplicate"] == 2

# %% hidden exercise=validate_preference_pairs points=1 name=same_response_needs_two_non_empty_answers
# hint: two empty answers are two empty answers, not a same-response pair.
empty = {"id": "e", "chosen": {"prompt": "p", "response": "  "}, "rejected": {"prompt": "p", "response": "\u3000"},
         "tie": False}
same = {"id": "s", "chosen": {"prompt": "p", "response": "ok"}, "rejected": {"prompt": "p", "response": "OK "},
        "tie": False}
report = validate_preference_pairs([empty, same])
assert report["issues"] == {"e": ["empty_chosen", "empty_rejected"], "s": ["same_response"]}

# %% hidden exercise=validate_preference_pairs points=1 name=kept_pairs_keep_the_original_text
# hint: normalisation is for comparing only; a kept pair carries the chosen prompt and both responses exactly as delivered, in input order.
pairs = [{"id": "k2", "chosen": {"prompt": "  Add ２ and 2 ", "response": " 4\n"},
          "rejected": {"prompt": "add 2 and 2", "response": "Five"}, "tie": False},
         {"id": "k1", "chosen": {"prompt": "Say hi", "response": "hi"},
          "rejected": {"prompt": "Say hi", "response": "bye"}, "tie": False}]
report = validate_preference_pairs(tuple(pairs))
assert report["kept"] == [{"id": "k2", "prompt": "  Add ２ and 2 ", "chosen": " 4\n", "rejected": "Five"},
                          {"id": "k1", "prompt": "Say hi", "chosen": "hi", "rejected": "bye"}]
assert report["counts"] == dict.fromkeys(["prompt_mismatch", "empty_chosen", "empty_rejected", "same_response",
                                          "duplicate", "tie"], 0)
assert validate_preference_pairs([]) == {"issues": {}, "duplicate_of": {}, "kept": [], "counts": report["counts"]}

# %% hidden exercise=validate_preference_pairs points=1 name=malformed_pairs_raise
# hint: check the list, every pair's keys, its id (unique, not blank), both answers (exactly prompt and response, both str) and tie (a bool) before judging anything.
good = {"id": "g", "chosen": {"prompt": "p", "response": "a"}, "rejected": {"prompt": "p", "response": "b"}, "tie": False}
assert validate_preference_pairs([good])["issues"] == {"g": []}
bad_inputs = [
    None, "pairs", good, [good, dict(good)], [dict(good, id=" ")], [dict(good, id=3)], [dict(good, tie=1)],
    [dict(good, tie=None)], [{k: v for k, v in good.items() if k != "tie"}], [dict(good, note="x")],
    [dict(good, chosen={"prompt": "p"})], [dict(good, rejected={"prompt": "p", "response": 5})],
    [dict(good, chosen=["p", "a"])], [dict(good, chosen={"prompt": "p", "response": "a", "score": 1})],
    [good, "not a pair"],
]
for bad in bad_inputs:
    try:
        validate_preference_pairs(bad)
    except ValueError:
        continue
    raise AssertionError(f"an invalid input was accepted: {bad!r}")

# %% hidden exercise=split_by_prompt points=1 name=equal_and_reformatted_prompts_share_a_group
# hint: prompts that are equal after normalisation, or differ only in punctuation and spacing, have the same word set and must stay together.
pairs = [{"id": "a", "prompt": "Compute 23 + 19."}, {"id": "b", "prompt": "compute 23+19 ?"},
         {"id": "c", "prompt": "Compute ２３ + １９."}, {"id": "d", "prompt": "Compute 31 + 9."}]
result = split_by_prompt(pairs, eval_fraction=0.5, near_duplicate=1)
assert [group["ids"] for group in result["groups"]] == [["a", "b", "c"], ["d"]]

# %% hidden exercise=split_by_prompt points=1 name=near_duplicate_threshold_is_inclusive
# hint: a Jaccard similarity exactly at the threshold makes two prompts near-duplicates; compare the ratio itself with the threshold.
pairs = [{"id": "x", "prompt": "alpha beta gamma delta"}, {"id": "y", "prompt": "alpha beta gamma delta epsilon"}]
together = split_by_prompt(pairs, eval_fraction=0.5, near_duplicate=0.8)
assert [group["ids"] for group in together["groups"]] == [["x", "y"]]
apart = split_by_prompt(pairs, eval_fraction=0.5, near_duplicate=0.81)
assert [group["ids"] for group in apart["groups"]] == [["x"], ["y"]]
thirds = [{"id": "u", "prompt": "one two"}, {"id": "v", "prompt": "one three"}]
assert len(split_by_prompt(thirds, near_duplicate=1 / 3)["groups"]) == 1

# %% hidden exercise=split_by_prompt points=1 name=near_duplicates_merge_transitively
# hint: a ~ b and b ~ c put a, b and c in one group even when a and c are not near-duplicates, whatever order they come in.
a = {"id": "a", "prompt": "w1 w2 w3 w4 w5 w6 w7 w8"}
b = {"id": "b", "prompt": "w1 w2 w3 w4 w5 w6 w7 w8 w9"}
c = {"id": "c", "prompt": "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"}
other = {"id": "o", "prompt": "something else entirely"}
for order in ([a, b, c, other], [a, other, c, b], [c, a, b, other]):
    result = split_by_prompt(order, eval_fraction=0.5, near_duplicate=0.85)
    groups = [sorted(group["ids"]) for group in result["groups"]]
    assert sorted(groups) == [["a", "b", "c"], ["o"]], f"{[item['id'] for item in order]}: {groups}"

# %% hidden exercise=split_by_prompt points=1 name=group_key_is_the_smallest_normalised_prompt
# hint: the key is the smallest normalised prompt of the group in plain str order, not the first prompt and not the raw text.
pairs = [{"id": "p1", "prompt": "Zeta task one two three four five six"},
         {"id": "p2", "prompt": "  ZETA TASK one two three four five six seven"},
         {"id": "p3", "prompt": "Beta"}]
result = split_by_prompt(pairs, eval_fraction=0.5, near_duplicate=0.85)
assert [group["key"] for group in result["groups"]] == ["zeta task one two three four five six", "beta"]

# %% hidden exercise=split_by_prompt points=1 name=each_group_follows_the_hash_of_its_key
# hint: bucket = int(sha256(key).hexdigest()[:8], 16); eval when bucket < eval_fraction * 2**32, so the same group lands on the same side in any data set.
import hashlib as _hashlib
prompts = [f"question number {k}" for k in range(12)]
pairs = [{"id": f"q{k}", "prompt": prompt} for k, prompt in enumerate(prompts)]
for fraction in (0.1, 0.25, 0.5, 0.9):
    result = split_by_prompt([dict(pair) for pair in pairs], eval_fraction=fraction, near_duplicate=1)
    expected = [f"q{k}" for k, prompt in enumerate(prompts)
                if int(_hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8], 16) < fraction * 2 ** 32]
    assert result["eval"] == expected, fraction
    assert result["train"] == [pair["id"] for pair in pairs if pair["id"] not in expected]
    assert [group["split"] for group in result["groups"]] == ["eval" if f"q{k}" in expected else "train"
                                                              for k in range(12)]
alone = split_by_prompt(pairs[:5], eval_fraction=0.5, near_duplicate=1)
assert alone["eval"] == [pair_id for pair_id in split_by_prompt(pairs, eval_fraction=0.5, near_duplicate=1)["eval"]
                         if pair_id in {"q0", "q1", "q2", "q3", "q4"}], "adding data must not move old groups"

# %% hidden exercise=split_by_prompt points=1 name=orders_empty_input_and_ignored_keys
# hint: groups are ordered by their first pair, ids inside by input order; other keys of a pair are ignored; no pairs give empty lists.
pairs = ({"id": "r", "prompt": "red apple pie", "chosen": "x"}, {"id": "g", "prompt": "green tea"},
         {"id": "r2", "prompt": "Red  apple PIE!", "rejected": 1})
result = split_by_prompt(pairs, eval_fraction=0.5, near_duplicate=0.9)
assert [group["ids"] for group in result["groups"]] == [["r", "r2"], ["g"]]
assert sorted(result["train"] + result["eval"]) == ["g", "r", "r2"]
assert result["train"] == [i for i in ("r", "g", "r2") if i in result["train"]]
assert split_by_prompt([]) == {"train": [], "eval": [], "groups": []}

# %% hidden exercise=split_by_prompt points=1 name=malformed_pairs_and_parameters_raise
# hint: check the list, each pair's id (unique, not blank) and prompt (a str with a word), and both parameters (finite, in range, not bools) before grouping.
good = [{"id": "a", "prompt": "one"}, {"id": "b", "prompt": "two"}]
assert len(split_by_prompt(good, eval_fraction=0.5, near_duplicate=1)["groups"]) == 2
bad_calls = [
    lambda: split_by_prompt(None), lambda: split_by_prompt("ab"), lambda: split_by_prompt([good[0], "b"]),
    lambda: split_by_prompt([{"id": "a"}]), lambda: split_by_prompt([{"prompt": "one"}]),
    lambda: split_by_prompt([good[0], dict(good[1], id="a")]), lambda: split_by_prompt([{"id": " ", "prompt": "x"}]),
    lambda: split_by_prompt([{"id": 1, "prompt": "x"}]), lambda: split_by_prompt([{"id": "a", "prompt": 5}]),
    lambda: split_by_prompt([{"id": "a", "prompt": " ?? "}]),
    lambda: split_by_prompt(good, eval_fraction=0), lambda: split_by_prompt(good, eval_fraction=1),
    lambda: split_by_prompt(good, eval_fraction=True), lambda: split_by_prompt(good, eval_fraction=float("nan")),
    lambda: split_by_prompt(good, eval_fraction="0.2"), lambda: split_by_prompt(good, near_duplicate=0),
    lambda: split_by_prompt(good, near_duplicate=1.01), lambda: split_by_prompt(good, near_duplicate=False),
    lambda: split_by_prompt(good, near_duplicate=float("inf")),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=pairwise_win_rate points=1 name=outcomes_come_from_both_orders
# hint: only first/second is a win and second/first a loss; tie/tie is a tie; any verdict that follows the position, or a tie in one order only, is inconsistent.
verdicts = ["first", "second", "tie"]
judgements = [{"id": f"{a}-{b}", "candidate_first": a, "candidate_second": b} for a in verdicts for b in verdicts]
ids = [item["id"] for item in judgements]
result = pairwise_win_rate(judgements)
assert result["outcomes"] == {"first-first": "inconsistent", "first-second": "win", "first-tie": "inconsistent",
                              "second-first": "loss", "second-second": "inconsistent", "second-tie": "inconsistent",
                              "tie-first": "inconsistent", "tie-second": "inconsistent", "tie-tie": "tie"}
assert result["counts"] == {"win": 1, "loss": 1, "tie": 1, "inconsistent": 6}
assert list(result["outcomes"]) == ids

# %% hidden exercise=pairwise_win_rate points=1 name=ties_and_inconsistent_verdicts_stay_out_of_the_rate
# hint: the rate is wins / (wins + losses); ties and inconsistent verdicts change neither the numerator nor the denominator.
base = [{"id": f"w{k}", "candidate_first": "first", "candidate_second": "second"} for k in range(3)]
base += [{"id": "l0", "candidate_first": "second", "candidate_second": "first"}]
padded = base + [{"id": f"t{k}", "candidate_first": "tie", "candidate_second": "tie"} for k in range(5)]
padded += [{"id": f"i{k}", "candidate_first": "first", "candidate_second": "first"} for k in range(7)]
plain, noisy = pairwise_win_rate(base), pairwise_win_rate(padded)
assert plain["win_rate"] == noisy["win_rate"] == 0.75 and plain["consistent"] == noisy["consistent"] == 4
assert plain["interval"] == noisy["interval"]
assert type(noisy["win_rate"]) is float and type(noisy["consistent"]) is int

# %% hidden exercise=pairwise_win_rate points=1 name=wilson_interval_at_the_given_confidence
# hint: z = NormalDist().inv_cdf(0.5 + confidence / 2); the Wilson centre and half-width as the docstring writes them (not p +- z * sqrt(p(1-p)/n)).
import math as _math
def wins_losses(wins, losses):
    return ([{"id": f"w{k}", "candidate_first": "first", "candidate_second": "second"} for k in range(wins)]
            + [{"id": f"l{k}", "candidate_first": "second", "candidate_second": "first"} for k in range(losses)])

low, high = pairwise_win_rate(wins_losses(7, 3), confidence=0.95)["interval"]
assert _math.isclose(low, 0.396778, abs_tol=1e-6) and _math.isclose(high, 0.892209, abs_tol=1e-6)
low, high = pairwise_win_rate(wins_losses(7, 3), confidence=0.8)["interval"]
assert _math.isclose(low, 0.497372, abs_tol=1e-6) and _math.isclose(high, 0.846201, abs_tol=1e-6)
low, high = pairwise_win_rate(wins_losses(30, 70), confidence=0.99)["interval"]
assert _math.isclose(low, 0.197461, abs_tol=1e-6) and _math.isclose(high, 0.427428, abs_tol=1e-6)

# %% hidden exercise=pairwise_win_rate points=1 name=interval_is_clamped_to_zero_and_one
# hint: clamp the interval to [0, 1] with max(0.0, ...) and min(1.0, ...): all wins give high == 1.0 and all losses low == 0.0, both floats.
def wins_losses(wins, losses):
    return ([{"id": f"w{k}", "candidate_first": "first", "candidate_second": "second"} for k in range(wins)]
            + [{"id": f"l{k}", "candidate_first": "second", "candidate_second": "first"} for k in range(losses)])

for wins, losses in ((5, 0), (1, 0), (40, 0)):
    high = pairwise_win_rate(wins_losses(wins, losses))["interval"][1]
    assert high <= 1.0 and type(high) is float
for wins, losses in ((0, 5), (0, 1), (0, 33)):
    low = pairwise_win_rate(wins_losses(wins, losses))["interval"][0]
    assert low >= 0.0 and type(low) is float and abs(low) < 1e-12

# %% hidden exercise=pairwise_win_rate points=1 name=the_decision_reads_the_interval_not_the_point
# hint: candidate_better needs the lower bound above 0.5 and baseline_better the upper bound below 0.5; a rate far from 0.5 on few verdicts is still undecided.
def wins_losses(wins, losses):
    return ([{"id": f"w{k}", "candidate_first": "first", "candidate_second": "second"} for k in range(wins)]
            + [{"id": f"l{k}", "candidate_first": "second", "candidate_second": "first"} for k in range(losses)])

assert pairwise_win_rate(wins_losses(6, 4))["decision"] == "undecided"
assert pairwise_win_rate(wins_losses(4, 1))["decision"] == "undecided"
assert pairwise_win_rate(wins_losses(1, 4))["decision"] == "undecided"
assert pairwise_win_rate(wins_losses(60, 40), confidence=0.9)["decision"] == "candidate_better"
assert pairwise_win_rate(wins_losses(60, 40), confidence=0.99)["decision"] == "undecided"
assert pairwise_win_rate(wins_losses(3, 27))["decision"] == "baseline_better"
assert pairwise_win_rate(wins_losses(10, 10))["decision"] == "undecided"

# %% hidden exercise=pairwise_win_rate points=1 name=no_consistent_verdict_reports_none
# hint: with no wins and no losses there is no rate: win_rate and interval are None and the decision is undecided.
only_noise = [{"id": "t", "candidate_first": "tie", "candidate_second": "tie"},
              {"id": "p", "candidate_first": "second", "candidate_second": "second"}]
result = pairwise_win_rate(only_noise)
assert result["win_rate"] is None and result["interval"] is None and result["decision"] == "undecided"
assert result["consistent"] == 0 and result["counts"] == {"win": 0, "loss": 0, "tie": 1, "inconsistent": 1}
assert pairwise_win_rate(()) == {"outcomes": {}, "counts": {"win": 0, "loss": 0, "tie": 0, "inconsistent": 0},
                                 "consistent": 0, "win_rate": None, "interval": None, "decision": "undecided"}

# %% hidden exercise=pairwise_win_rate points=1 name=malformed_judgements_raise
# hint: check the list, each judgement's keys, its id (unique, not blank), both verdicts and the confidence before counting anything.
good = {"id": "a", "candidate_first": "first", "candidate_second": "second"}
assert pairwise_win_rate([good])["counts"]["win"] == 1
bad_calls = [
    lambda: pairwise_win_rate(None), lambda: pairwise_win_rate(good), lambda: pairwise_win_rate([good, "x"]),
    lambda: pairwise_win_rate([good, dict(good)]), lambda: pairwise_win_rate([dict(good, id="")]),
    lambda: pairwise_win_rate([dict(good, id=None)]), lambda: pairwise_win_rate([dict(good, candidate_first="First")]),
    lambda: pairwise_win_rate([dict(good, candidate_second="A")]), lambda: pairwise_win_rate([dict(good, extra=1)]),
    lambda: pairwise_win_rate([{"id": "a", "candidate_first": "first"}]),
    lambda: pairwise_win_rate([dict(good, candidate_first=None)]),
    lambda: pairwise_win_rate([good], confidence=1), lambda: pairwise_win_rate([good], confidence=0),
    lambda: pairwise_win_rate([good], confidence=True), lambda: pairwise_win_rate([good], confidence=float("nan")),
    lambda: pairwise_win_rate([good], confidence="0.95"),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=validate_preference_pairs points=2 name=agrees_with_reference_on_generated_valid_pairs
# hint: any well-formed pairs (reformatted copies, full-width digits, empty and equal answers, ties, join errors): the same report with the same types.
import unicodedata as _unicodedata

from hypothesis import strategies as st

prompts = st.sampled_from(["Compute 2 + 2.", "compute 2 + 2. ", "Ｃompute ２ + 2.", "Compute 2+2.", "Name a prime.", "", "ß"])
responses = st.sampled_from(["4", " 4", "４", "5", "", "  \n", "four", "FOUR", "ss", "ß"])

@st.composite
def valid_pairs(draw):
    count = draw(st.integers(0, 6))
    ids = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "A", "ａ"]), min_size=count,
                        max_size=count, unique=True))
    pairs = []
    for pair_id in ids:
        if pairs and draw(st.integers(0, 3)) == 0:
            pairs.append(dict(draw(st.sampled_from(pairs)), id=pair_id))
            continue
        prompt = draw(prompts)
        pairs.append({"id": pair_id, "chosen": {"prompt": prompt, "response": draw(responses)},
                      "rejected": {"prompt": draw(st.one_of(st.just(prompt), prompts)), "response": draw(responses)},
                      "tie": draw(st.booleans())})
    return (pairs if draw(st.booleans()) else tuple(pairs),)


def norm(text):
    return " ".join(_unicodedata.normalize("NFKC", text).casefold().split())


def contents(pairs):
    return [tuple(norm(pair[side][key]) for side, key in (("chosen", "prompt"), ("rejected", "prompt"),
                                                           ("chosen", "response"), ("rejected", "response")))
            for pair in pairs]


def clean(pairs):
    seen, found = set(), False
    for pair, content in zip(pairs, contents(pairs)):
        found = found or (content[0] == content[1] and content[2] and content[3] and content[2] != content[3]
                          and content not in seen and not pair["tie"])
        seen.add(content)
    return found


reference.agrees("validate_preference_pairs", valid_pairs(), cases=150, clauses={
    "pairs is a tuple": lambda pairs: isinstance(pairs, tuple),
    "no pairs": lambda pairs: len(pairs) == 0,
    "a clean pair kept": clean,
    "prompts that differ after normalisation": lambda pairs: any(c[0] != c[1] for c in contents(pairs)),
    "prompts equal only after normalisation": lambda pairs: any(
        p["chosen"]["prompt"] != p["rejected"]["prompt"] and c[0] == c[1] for p, c in zip(pairs, contents(pairs))),
    "an empty chosen response": lambda pairs: any(not c[2] for c in contents(pairs)),
    "a whitespace-only response": lambda pairs: any(
        p[side]["response"] and not p[side]["response"].strip() for p in pairs for side in ("chosen", "rejected")),
    "an empty rejected response": lambda pairs: any(not c[3] for c in contents(pairs)),
    "the same non-empty response": lambda pairs: any(c[2] and c[2] == c[3] for c in contents(pairs)),
    "responses equal only after NFKC or case folding": lambda pairs: any(
        c[2] and c[2] == c[3] and p["chosen"]["response"].strip() != p["rejected"]["response"].strip()
        for p, c in zip(pairs, contents(pairs))),
    "a duplicate of an earlier pair": lambda pairs: len(set(contents(pairs))) < len(pairs),
    "a duplicate that is also a tie": lambda pairs: any(
        c in contents(pairs)[:i] and pairs[i]["tie"] for i, c in enumerate(contents(pairs))),
    "a tie": lambda pairs: any(p["tie"] for p in pairs),
    "ids that differ only in case or width": lambda pairs: len({norm(p["id"]) for p in pairs}) < len(pairs),
})

# %% hidden exercise=validate_preference_pairs points=2 name=agrees_with_reference_on_generated_malformed_pairs
# hint: valid pairs, or one malformed thing anywhere (a missing or extra key, a blank or repeated id, an answer that is not a prompt/response dict of str, 0/1 for tie): the same report, or the same ValueError.
from tools.course.grader.clauses import dicts, each_of, is_blank, is_bool

defects = ([("valid", n) for n in range(30)]
           + [("pairs", bad) for bad in [None, "ab", 3, {"id": "a"}]]
           + [("pair", bad) for bad in [None, "pair", ["a"], 1]]
           + [("id", bad) for bad in ["", " ", "\t\n", "\u3000", 3, None, True, ("a",)]]
           + [("dup_id", None)]
           + [("drop", key) for key in ["id", "chosen", "rejected", "tie"]] + [("extra", "score"), ("extra", "note")]
           + [("answer", bad) for bad in [None, "4", ["p", "4"], {"prompt": "p"}, {"response": "4"},
                                          {"prompt": "p", "response": 4}, {"prompt": None, "response": "4"},
                                          {"prompt": "p", "response": "4", "extra": "x"}]]
           + [("tie", bad) for bad in [0, 1, None, "False", 1.0]])

def one_defect(defect, rng):
    """Three valid pairs (a tuple or a list), or with exactly this defect."""
    kind, bad = defect
    pairs = [{"id": name, "chosen": {"prompt": "p", "response": rng.choice(["a", "b", " A"])},
              "rejected": {"prompt": rng.choice(["p", "P ", "q"]), "response": rng.choice(["b", "", "a"])},
              "tie": rng.random() < 0.3} for name in ("a", "b", "c")]
    where = rng.randrange(3)
    if kind == "valid":
        return (pairs if rng.random() < 0.5 else tuple(pairs),)
    if kind == "pairs":
        return (bad,)
    if kind == "pair":
        pairs.insert(where, bad)
    elif kind == "id":
        pairs[where]["id"] = bad
    elif kind == "dup_id":
        pairs[where]["id"] = pairs[(where + 1) % 3]["id"]
    elif kind == "drop":
        del pairs[where][bad]
    elif kind == "extra":
        pairs[where][bad] = 1
    elif kind == "answer":
        pairs[where][rng.choice(["chosen", "rejected"])] = bad
    else:
        pairs[where]["tie"] = bad
    return (pairs,)

KEYS = {"id", "chosen", "rejected", "tie"}


def answers(pairs):
    return [pair[side] for pair in dicts(pairs) for side in ("chosen", "rejected") if side in pair]


reference.agrees("validate_preference_pairs", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "pairs is not a list or tuple": lambda pairs: not isinstance(pairs, (list, tuple)),
    "a pair that is not a dict": lambda pairs: isinstance(pairs, (list, tuple)) and any(
        not isinstance(pair, dict) for pair in pairs),
    "a pair without one of the four keys": lambda pairs: any(KEYS - set(pair) for pair in dicts(pairs)),
    "a pair with an extra key": lambda pairs: any(set(pair) - KEYS for pair in dicts(pairs)),
    "a blank id": lambda pairs: any(is_blank(pair.get("id")) for pair in dicts(pairs)),
    "an id that is not a str": lambda pairs: any("id" in pair and not isinstance(pair["id"], str)
                                                 for pair in dicts(pairs)),
    "a repeated id": lambda pairs: len([p["id"] for p in dicts(pairs) if isinstance(p.get("id"), str)]) > len(
        {p["id"] for p in dicts(pairs) if isinstance(p.get("id"), str)}),
    "an answer that is not a dict": lambda pairs: any(not isinstance(a, dict) for a in answers(pairs)),
    "an answer without exactly prompt and response": lambda pairs: any(
        isinstance(a, dict) and set(a) != {"prompt", "response"} for a in answers(pairs)),
    "an answer text that is not a str": lambda pairs: any(
        isinstance(a, dict) and set(a) == {"prompt", "response"} and not all(isinstance(v, str) for v in a.values())
        for a in answers(pairs)),
    "a tie 0 or 1": lambda pairs: any(p.get("tie") in (0, 1) and not is_bool(p.get("tie")) for p in dicts(pairs)),
    "a tie that is not a bool or a number": lambda pairs: any(
        "tie" in p and not isinstance(p["tie"], (bool, int, float)) for p in dicts(pairs)),
})

# %% hidden exercise=split_by_prompt points=2 name=agrees_with_reference_on_generated_valid_splits
# hint: any well-formed pairs (reformatted and paraphrased prompts, chains of near-duplicates, thresholds exactly at a similarity): the same groups, keys and splits.
import re as _re
import unicodedata as _unicodedata

from hypothesis import strategies as st

words = ["compute", "add", "23", "19", "18", "please", "the", "sum", "Ｃompute", "ADD"]

@st.composite
def valid_splits(draw):
    count = draw(st.integers(0, 7))
    pairs = []
    for index in range(count):
        chosen = draw(st.lists(st.sampled_from(words), min_size=1, max_size=5))
        separator = draw(st.sampled_from([" ", "  ", " + ", "\t", ", "]))
        pairs.append({"id": f"p{index}", "prompt": separator.join(chosen) + draw(st.sampled_from(["", ".", " ?"]))})
    fraction = draw(st.sampled_from([0.25, 0.5, 0.75, 0.1, 0.9]))
    threshold = draw(st.sampled_from([0.85, 0.8, 0.75, 2 / 3, 0.5, 1, 1.0, 0.6]))
    return (pairs if draw(st.booleans()) else tuple(pairs), fraction, threshold)


def word_sets(pairs):
    return [set(_re.findall(r"\w+", " ".join(_unicodedata.normalize("NFKC", p["prompt"]).casefold().split())))
            for p in pairs]


def similarities(pairs):
    sets = word_sets(pairs)
    return {(i, j): len(sets[i] & sets[j]) / len(sets[i] | sets[j])
            for i in range(len(sets)) for j in range(len(sets)) if i != j}


def chained(pairs, fraction, threshold):
    near = {key for key, value in similarities(pairs).items() if value >= threshold}
    return any((i, j) in near and (j, k) in near and (i, k) not in near
               for i in range(len(pairs)) for j in range(len(pairs)) for k in range(len(pairs)) if i != k)


reference.agrees("split_by_prompt", valid_splits(), cases=150, clauses={
    "pairs is a tuple": lambda pairs, fraction, threshold: isinstance(pairs, tuple),
    "no pairs": lambda pairs, fraction, threshold: len(pairs) == 0,
    "prompts with the same word set written differently": lambda pairs, fraction, threshold: any(
        a == b and pairs[i]["prompt"] != pairs[j]["prompt"]
        for i, a in enumerate(word_sets(pairs)) for j, b in enumerate(word_sets(pairs)) if i < j),
    "a similarity exactly at the threshold": lambda pairs, fraction, threshold: any(
        value == threshold for value in similarities(pairs).values()),
    "a similarity just below the threshold": lambda pairs, fraction, threshold: any(
        threshold - 0.2 < value < threshold for value in similarities(pairs).values()),
    "near-duplicates chained through a third prompt": chained,
    "a threshold of 1 given as an int": lambda pairs, fraction, threshold: type(threshold) is int,
    "a group in each split": lambda pairs, fraction, threshold: len(pairs) >= 4 and fraction == 0.5,
})

# %% hidden exercise=split_by_prompt points=2 name=agrees_with_reference_on_generated_malformed_splits
# hint: valid pairs, or one malformed thing anywhere (a blank or repeated id, a prompt without a word, a fraction of 0 or 1, a bool or NaN threshold): the same split, or the same ValueError.
from tools.course.grader.clauses import below, dicts, each_of, is_blank, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(30)]
           + [("pairs", bad) for bad in [None, "ab", 3, {"id": "a", "prompt": "x"}]]
           + [("pair", bad) for bad in [None, "x", ["a", "x"]]]
           + [("id", bad) for bad in ["", " ", "\u3000", 7, None, False]] + [("dup_id", None)]
           + [("drop", key) for key in ["id", "prompt"]]
           + [("prompt", bad) for bad in ["", "  ", "?!", "+ - .", None, 3, ["x"]]]
           + [("eval_fraction", bad) for bad in [0, 0.0, 1, 1.0, -0.5, 1.5, True, False, None, "0.5", float("nan"),
                                                 float("inf")]]
           + [("near_duplicate", bad) for bad in [0, 0.0, -1, 1.0000001, 2, True, False, None, "1", float("nan")]])

def one_defect(defect, rng):
    """Three valid pairs and parameters, or with exactly this defect."""
    kind, bad = defect
    pairs = [{"id": "a", "prompt": rng.choice(["add 2 and 2", "ADD 2 and 2."])}, {"id": "b", "prompt": "add 2 and 3"},
             {"id": "c", "prompt": rng.choice(["sum", "add 2"]), "note": "ignored"}]
    arguments = {"eval_fraction": rng.choice([0.5, 0.25, 0.75]), "near_duplicate": rng.choice([0.85, 0.5, 1])}
    where = rng.randrange(3)
    if kind == "valid" and rng.random() < 0.5:
        pairs = tuple(pairs)
    elif kind == "pairs":
        pairs = bad
    elif kind == "pair":
        pairs.insert(where, bad)
    elif kind == "id":
        pairs[where]["id"] = bad
    elif kind == "dup_id":
        pairs[where]["id"] = pairs[(where + 1) % 3]["id"]
    elif kind == "drop":
        del pairs[where][bad]
    elif kind == "prompt":
        pairs[where]["prompt"] = bad
    elif kind != "valid":
        arguments[kind] = bad
    return (pairs,), arguments


def str_ids(pairs):
    return [p["id"] for p in dicts(pairs) if isinstance(p.get("id"), str)]


def parameter_clauses(name, top):
    value = lambda pairs, eval_fraction, near_duplicate: {"eval_fraction": eval_fraction,  # noqa: E731
                                                         "near_duplicate": near_duplicate}[name]
    return {
        f"{name} a bool": lambda *a, **k: is_bool(value(*a, **k)),
        f"{name} not a number": lambda *a, **k: not_a_number(value(*a, **k)),
        f"{name} not finite": lambda *a, **k: not_finite(value(*a, **k)),
        f"{name} <= 0": lambda *a, **k: not is_bool(value(*a, **k)) and below(value(*a, **k), 0, or_equal=True),
        f"{name} above its top": lambda *a, **k: not is_bool(value(*a, **k)) and isinstance(value(*a, **k), (int, float))
            and top(value(*a, **k)),
    }


reference.agrees("split_by_prompt", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "pairs is not a list or tuple": lambda pairs, **k: not isinstance(pairs, (list, tuple)),
    "pairs is a tuple": lambda pairs, **k: isinstance(pairs, tuple),
    "a pair that is not a dict": lambda pairs, **k: isinstance(pairs, (list, tuple)) and any(
        not isinstance(p, dict) for p in pairs),
    "a pair without id or prompt": lambda pairs, **k: any("id" not in p or "prompt" not in p for p in dicts(pairs)),
    "a pair with an ignored extra key": lambda pairs, **k: any(set(p) - {"id", "prompt"} for p in dicts(pairs)),
    "a blank id": lambda pairs, **k: any(is_blank(p.get("id")) for p in dicts(pairs)),
    "an id that is not a str": lambda pairs, **k: any("id" in p and not isinstance(p["id"], str) for p in dicts(pairs)),
    "a repeated id": lambda pairs, **k: len(str_ids(pairs)) > len(set(str_ids(pairs))),
    "a prompt that is not a str": lambda pairs, **k: any(
        "prompt" in p and not isinstance(p["prompt"], str) for p in dicts(pairs)),
    "a prompt with no word": lambda pairs, **k: any(
        isinstance(p.get("prompt"), str) and not _re.findall(r"\w+", p["prompt"]) for p in dicts(pairs)),
    **parameter_clauses("eval_fraction", lambda value: value >= 1 and not not_finite(value)),
    **parameter_clauses("near_duplicate", lambda value: value > 1 and not not_finite(value)),
    "near_duplicate exactly 1": lambda pairs, eval_fraction, near_duplicate: near_duplicate == 1
        and not is_bool(near_duplicate),
})

# %% hidden exercise=pairwise_win_rate points=2 name=agrees_with_reference_on_generated_valid_judgements
# hint: any well-formed judgements at any confidence (all ties, all wins, position-following verdicts, few and many verdicts): the same outcomes, counts, rate, interval and decision.
import math as _math
import statistics as _statistics

from hypothesis import strategies as st

verdict = st.sampled_from(["first", "second", "tie"])
consistent = st.sampled_from([("first", "second"), ("second", "first")])

@st.composite
def valid_judgements(draw):
    count = draw(st.integers(0, 40))
    lean = draw(st.sampled_from([("first", "second"), ("second", "first"), None]))
    judgements = []
    for index in range(count):
        first, second = draw(st.one_of(consistent, consistent, st.tuples(verdict, verdict),
                                       st.just(lean or ("tie", "tie"))))
        judgements.append({"id": f"j{index}", "candidate_first": first, "candidate_second": second})
    confidence = draw(st.sampled_from([0.95, 0.9, 0.8, 0.99, 0.5, 0.683]))
    return (judgements if draw(st.booleans()) else tuple(judgements), confidence)


@st.composite
def unscored_judgements(draw):
    """Only ties and position-following verdicts: nothing consistent to rate."""
    orders = draw(st.lists(st.sampled_from([("tie", "tie"), ("first", "first"), ("second", "second"),
                                            ("tie", "second")]), min_size=1, max_size=6))
    return ([{"id": f"u{index}", "candidate_first": first, "candidate_second": second}
             for index, (first, second) in enumerate(orders)], 0.95)


def tally(judgements):
    pairs = [(j["candidate_first"], j["candidate_second"]) for j in judgements]
    return pairs.count(("first", "second")), pairs.count(("second", "first"))


def interval(judgements, confidence):
    wins, losses = tally(judgements)
    n = wins + losses
    if not n:
        return None
    p, z = wins / n, _statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * _math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


reference.agrees("pairwise_win_rate", st.one_of(valid_judgements(), unscored_judgements()), cases=150, clauses={
    "judgements is a tuple": lambda judgements, confidence: isinstance(judgements, tuple),
    "no judgements": lambda judgements, confidence: len(judgements) == 0,
    "judgements but no consistent verdict": lambda judgements, confidence: judgements and sum(tally(judgements)) == 0,
    "a verdict that follows the position": lambda judgements, confidence: any(
        j["candidate_first"] == j["candidate_second"] != "tie" for j in judgements),
    "a tie in one order only": lambda judgements, confidence: any(
        (j["candidate_first"] == "tie") != (j["candidate_second"] == "tie") for j in judgements),
    "a tie in both orders": lambda judgements, confidence: any(
        j["candidate_first"] == j["candidate_second"] == "tie" for j in judgements),
    "every consistent verdict a win": lambda judgements, confidence: tally(judgements)[0] and not tally(judgements)[1],
    "every consistent verdict a loss": lambda judgements, confidence: tally(judgements)[1] and not tally(judgements)[0],
    "the decision candidate_better": lambda judgements, confidence: (interval(judgements, confidence) or (0, 0))[0] > 0.5,
    "the decision baseline_better": lambda judgements, confidence: (interval(judgements, confidence) or (1, 1))[1] < 0.5,
    "a win rate above 0.5 whose interval still holds 0.5": lambda judgements, confidence: interval(
        judgements, confidence) is not None and tally(judgements)[0] > tally(judgements)[1] and interval(
        judgements, confidence)[0] <= 0.5,
})

# %% hidden exercise=pairwise_win_rate points=2 name=agrees_with_reference_on_generated_malformed_judgements
# hint: valid judgements, or one malformed thing anywhere (a verdict spelt another way, a missing or extra key, a blank or repeated id, a confidence of 0 or 1, a bool or NaN): the same result, or the same ValueError.
from tools.course.grader.clauses import below, dicts, each_of, is_blank, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(30)]
           + [("judgements", bad) for bad in [None, "first", 3, {"id": "a"}]]
           + [("item", bad) for bad in [None, "first", ["a", "first", "second"], 2]]
           + [("id", bad) for bad in ["", " ", "\t", 4, None, True]] + [("dup_id", None)]
           + [("drop", key) for key in ["id", "candidate_first", "candidate_second"]] + [("extra", "judge")]
           + [("verdict", bad) for bad in ["First", "FIRST", "1st", "a", "", None, 1, True, "tie "]]
           + [("confidence", bad) for bad in [0, 1, 0.0, 1.0, -0.1, 95, True, False, None, "0.95", float("nan"),
                                              float("inf")]])

def one_defect(defect, rng):
    """Three valid judgements and a confidence, or with exactly this defect."""
    kind, bad = defect
    judgements = [{"id": name, "candidate_first": rng.choice(["first", "second", "tie"]),
                   "candidate_second": rng.choice(["first", "second", "tie"])} for name in ("a", "b", "c")]
    confidence = rng.choice([0.95, 0.5, 0.9])
    where = rng.randrange(3)
    if kind == "valid" and rng.random() < 0.5:
        judgements = tuple(judgements)
    elif kind == "judgements":
        judgements = bad
    elif kind == "item":
        judgements.insert(where, bad)
    elif kind == "id":
        judgements[where]["id"] = bad
    elif kind == "dup_id":
        judgements[where]["id"] = judgements[(where + 1) % 3]["id"]
    elif kind == "drop":
        del judgements[where][bad]
    elif kind == "extra":
        judgements[where][bad] = "x"
    elif kind == "verdict":
        judgements[where][rng.choice(["candidate_first", "candidate_second"])] = bad
    elif kind == "confidence":
        confidence = bad
    return (judgements, confidence)


JUDGEMENT_KEYS = {"id", "candidate_first", "candidate_second"}


def verdicts(judgements):
    return [j[key] for j in dicts(judgements) for key in ("candidate_first", "candidate_second") if key in j]


def str_ids(judgements):
    return [j["id"] for j in dicts(judgements) if isinstance(j.get("id"), str)]


reference.agrees("pairwise_win_rate", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "judgements is not a list or tuple": lambda judgements, confidence: not isinstance(judgements, (list, tuple)),
    "a judgement that is not a dict": lambda judgements, confidence: isinstance(judgements, (list, tuple)) and any(
        not isinstance(j, dict) for j in judgements),
    "a judgement without one of the three keys": lambda judgements, confidence: any(
        JUDGEMENT_KEYS - set(j) for j in dicts(judgements)),
    "a judgement with an extra key": lambda judgements, confidence: any(
        set(j) - JUDGEMENT_KEYS for j in dicts(judgements)),
    "a blank id": lambda judgements, confidence: any(is_blank(j.get("id")) for j in dicts(judgements)),
    "an id that is not a str": lambda judgements, confidence: any(
        "id" in j and not isinstance(j["id"], str) for j in dicts(judgements)),
    "a repeated id": lambda judgements, confidence: len(str_ids(judgements)) > len(set(str_ids(judgements))),
    "a verdict spelt another way": lambda judgements, confidence: any(
        isinstance(v, str) and v not in ("first", "second", "tie") for v in verdicts(judgements)),
    "a verdict that is not a str": lambda judgements, confidence: any(not isinstance(v, str) for v in verdicts(judgements)),
    "confidence a bool": lambda judgements, confidence: is_bool(confidence),
    "confidence not a number": lambda judgements, confidence: not_a_number(confidence),
    "confidence not finite": lambda judgements, confidence: not_finite(confidence),
    "confidence <= 0": lambda judgements, confidence: not is_bool(confidence) and below(confidence, 0, or_equal=True),
    "confidence >= 1": lambda judgements, confidence: not is_bool(confidence) and isinstance(confidence, (int, float))
        and confidence >= 1 and not not_finite(confidence),
})
