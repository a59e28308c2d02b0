# %% hidden exercise=admit_pairs points=1 name=a_reply_that_exactly_fits_is_admitted_one_more_token_is_refused
# hint: the kept prompt (at most max_prompt_tokens) plus the longer reply may equal max_length; one token more cuts the reply and refuses the pair.
def pair(pair_id, prompt, chosen=3, rejected=3, texts=("41", "40")):
    return {"id": pair_id, "prompt_tokens": prompt, "chosen_tokens": chosen, "rejected_tokens": rejected,
            "chosen": texts[0], "rejected": texts[1]}

fits = admit_pairs([pair("a", 60, chosen=4), pair("b", 50, rejected=14), pair("c", 90, chosen=8)], 56, 64, 1.0, 1)
assert fits["admitted"] == ["a", "b", "c"] and fits["refused"] == [], fits
assert fits["prompt_truncated"] == ["a", "c"], "a and c keep 56 prompt tokens; 56 + 8 = 64 still fits"
over = admit_pairs([pair("a", 60, chosen=9), pair("b", 50, rejected=15), pair("c", 20, chosen=9)], 56, 64, 1.0, 1)
assert over["admitted"] == ["c"] and over["refused"] == [{"id": "a", "reasons": ["response_truncated"]},
                                                         {"id": "b", "reasons": ["response_truncated"]}], over
assert over["prompt_truncated"] == [] and over["prompt_truncation_rate"] == 0.0

# %% hidden exercise=admit_pairs points=1 name=the_two_rates_have_their_own_denominators
# hint: prompt truncation counts the admitted pairs whose prompt was cut, over the admitted pairs; response truncation counts the pairs refused for a cut reply, over every pair that arrived.
def pair(pair_id, prompt, chosen=2, texts=("7", "6")):
    return {"id": pair_id, "prompt_tokens": prompt, "chosen_tokens": chosen, "rejected_tokens": 2,
            "chosen": texts[0], "rejected": texts[1]}

pairs = [pair("p1", 80), pair("p2", 10), pair("p3", 30, chosen=40), pair("p4", 10, texts=("7", "7")),
         pair("p5", 12), pair("p6", 70, chosen=30)]
result = admit_pairs(pairs, 32, 40, 0.5, 1)
assert result["admitted"] == ["p1", "p2", "p5"] and result["prompt_truncated"] == ["p1"], result
assert abs(result["prompt_truncation_rate"] - 1 / 3) < 1e-12
assert abs(result["response_truncation_rate"] - 2 / 6) < 1e-12, "two of the six pairs that arrived had a cut reply"
none = admit_pairs([pair("x", 10, texts=("7", " 7"))], 32, 40, 0.5, 1)
assert none["admitted"] == [] and none["prompt_truncation_rate"] is None and none["decision"] == "reject"
assert none["response_truncation_rate"] == 0.0

# %% hidden exercise=admit_pairs points=1 name=reasons_are_complete_and_identical_means_the_same_words
# hint: a refused pair lists response_truncated before identical_responses when both hold; identical means equal after str.split() (tabs, newlines, repeated spaces do not count; case and punctuation do).
def pair(pair_id, chosen_text, rejected_text, chosen=2):
    return {"id": pair_id, "prompt_tokens": 10, "chosen_tokens": chosen, "rejected_tokens": 2,
            "chosen": chosen_text, "rejected": rejected_text}

result = admit_pairs([pair("both", "8", "8", chosen=40), pair("tabs", "The  answer\t8", " The answer\n8 "),
                      pair("case", "The answer 8", "the answer 8"), pair("dot", "8.", "8"),
                      pair("crlf", "8\r\n", "8")], 16, 32, 1.0, 1)
assert result["refused"] == [{"id": "both", "reasons": ["response_truncated", "identical_responses"]},
                             {"id": "tabs", "reasons": ["identical_responses"]},
                             {"id": "crlf", "reasons": ["identical_responses"]}], result["refused"]
assert result["admitted"] == ["case", "dot"]

# %% hidden exercise=admit_pairs points=1 name=the_decision_reject_tune_accept_and_its_edges
# hint: reject when fewer than min_pairs are admitted (whatever the truncation), else tune when the prompt truncation rate is above the limit (equal is fine), else accept.
def pair(pair_id, prompt):
    return {"id": pair_id, "prompt_tokens": prompt, "chosen_tokens": 2, "rejected_tokens": 2, "chosen": "5",
            "rejected": "4"}

four = [pair("a", 100), pair("b", 10), pair("c", 10), pair("d", 10)]
assert admit_pairs(four, 20, 30, 0.25, 4)["decision"] == "accept", "one in four cut equals the 25 % limit"
assert admit_pairs(four, 20, 30, 0.2, 4)["decision"] == "tune"
assert admit_pairs(four, 20, 30, 0.2, 5)["decision"] == "reject", "four admitted are fewer than five"
assert admit_pairs(four, 20, 30, 0, 1)["decision"] == "tune"
assert admit_pairs(four[1:], 20, 30, 0, 3)["decision"] == "accept"

# %% hidden exercise=admit_pairs points=1 name=wrong_admission_calls_raise_and_good_calls_do_not
# hint: limits are ints >= 1 (never bools) with the prompt limit below max_length; the rate limit is a finite number in [0, 1]; pairs is a non-empty list or tuple of dicts with unique non-empty str ids, int token counts >= 1 and str replies.
good = {"id": "a", "prompt_tokens": 10, "chosen_tokens": 2, "rejected_tokens": 2, "chosen": "5", "rejected": "4"}
assert admit_pairs((good,), 20, 30, 0.5, 1)["admitted"] == ["a"]
assert admit_pairs([good], 20, 30, 1, 2)["decision"] == "reject"
nan = float("nan")
bad_calls = [
    ([good], True, 30, 0.5, 1), ([good], 20, 30.0, 0.5, 1), ([good], 20, 30, 0.5, 0), ([good], 0, 30, 0.5, 1),
    ([good], 30, 30, 0.5, 1), ([good], 40, 30, 0.5, 1), ([good], 20, 30, nan, 1), ([good], 20, 30, -0.1, 1),
    ([good], 20, 30, 1.5, 1), ([good], 20, 30, True, 1), ([good], 20, 30, "0.5", 1), ([], 20, 30, 0.5, 1),
    ({"a": good}, 20, 30, 0.5, 1), ([good, dict(good)], 20, 30, 0.5, 1), ([dict(good, id="")], 20, 30, 0.5, 1),
    ([dict(good, id=3)], 20, 30, 0.5, 1), ([dict(good, prompt_tokens=0)], 20, 30, 0.5, 1),
    ([dict(good, chosen_tokens=True)], 20, 30, 0.5, 1), ([dict(good, rejected_tokens=2.0)], 20, 30, 0.5, 1),
    ([dict(good, chosen=None)], 20, 30, 0.5, 1), ([dict(good, rejected=4)], 20, 30, 0.5, 1), (["a"], 20, 30, 0.5, 1),
    ([good, dict(good, id="b", prompt_tokens=None)], 20, 30, 0.5, 1),
]
for index, arguments in enumerate(bad_calls):
    try:
        admit_pairs(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {index} was accepted")

# %% hidden exercise=admit_pairs points=2 name=agrees_with_reference_on_generated_pairs
# hint: any pairs and limits, valid or with one defect at the first, an inner or the last pair: the same admission, or the same ValueError.
from tools.course.grader.clauses import each_of, is_bool, not_finite

LIMITS = (16, 24)
bad_counts = [0, -1, True, 2.0, None, "3"]
defects = ([("valid", n) for n in range(40)]
           + [("count", field, bad, at) for field in ("prompt_tokens", "chosen_tokens", "rejected_tokens")
              for bad in bad_counts for at in ("first", "inner", "last")]
           + [("text", field, bad) for field in ("chosen", "rejected") for bad in (None, 5, b"5")]
           + [("id", bad, at) for bad in ("", 7, None, "duplicate") for at in ("first", "last")]
           + [("not_a_dict", at) for at in ("first", "inner", "last")]
           + [("rate", bad) for bad in (float("nan"), float("inf"), -0.01, 1.01, True, None)]
           + [("limit", name, bad) for name in ("max_prompt_tokens", "max_length", "min_pairs")
              for bad in (0, True, 3.0, None)]
           + [("limit_order", n) for n in (24, 30)] + [("pairs", bad) for bad in ((), "pairs", None)])
TEXTS = ["5", "4", " 5", "5\t", "5\r\n", "Five", "5.", "The answer is 5", "the answer is 5", "ｆ5"]

def one_defect(defect, rng):
    prompt_limit, length = LIMITS
    n = rng.randint(3, 7)
    pairs = []
    for index in range(n):
        chosen = rng.choice(TEXTS)
        rejected = rng.choice([chosen, chosen + " ", rng.choice(TEXTS)]) if rng.random() < 0.4 else rng.choice(TEXTS)
        prompt = rng.choice([rng.randint(1, prompt_limit), prompt_limit, prompt_limit + 1, rng.randint(1, 40)])
        room = length - min(prompt, prompt_limit)
        pairs.append({"id": f"p{index}", "prompt_tokens": prompt,
                      "chosen_tokens": rng.choice([1, room, room + 1, rng.randint(1, room)]),
                      "rejected_tokens": rng.choice([1, room, room + 1, rng.randint(1, max(room - 1, 1))]),
                      "chosen": chosen, "rejected": rejected})
    rate = rng.choice([0, 0.0, 0.2, 0.25, 1 / 3, 0.5, 1, 1.0])
    minimum = rng.choice([1, 1, 2, rng.randint(1, n), n + 1])
    limits = {"max_prompt_tokens": prompt_limit, "max_length": length, "min_pairs": minimum}
    at = {"first": 0, "inner": rng.randrange(1, n - 1), "last": n - 1}
    kind = defect[0]
    if kind == "count":
        pairs[at[defect[3]]][defect[1]] = defect[2]
    elif kind == "text":
        pairs[rng.randrange(n)][defect[1]] = defect[2]
    elif kind == "id":
        position = at[defect[2]]
        pairs[position]["id"] = pairs[1 - position if position == 0 else 0]["id"] if defect[1] == "duplicate" else defect[1]
    elif kind == "not_a_dict":
        pairs[at[defect[1]]] = rng.choice([["p", 3], "p", None])
    elif kind == "rate":
        rate = defect[1]
    elif kind == "limit":
        limits[defect[1]] = defect[2]
    elif kind == "limit_order":
        limits["max_prompt_tokens"] = defect[1]
    elif kind == "pairs":
        pairs = defect[1]
    if kind == "valid" and rng.random() < 0.3:
        pairs = tuple(pairs)
    return pairs, limits["max_prompt_tokens"], limits["max_length"], rate, limits["min_pairs"]

def admitted(*call):
    return reference("admit_pairs")(*call)

def fits_exactly(pairs, prompt_limit, length, *rest):
    return admitted(pairs, prompt_limit, length, *rest) is not None and any(
        min(p["prompt_tokens"], prompt_limit) + max(p["chosen_tokens"], p["rejected_tokens"]) == length for p in pairs)

reference.agrees("admit_pairs", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a reply that exactly fits": fits_exactly,
    "a reply one token over": lambda pairs, *rest: "response_truncated" in str(admitted(pairs, *rest)["refused"]),
    "a cut prompt whose replies still fit": lambda pairs, *rest: bool(admitted(pairs, *rest)["prompt_truncated"]),
    "replies equal but for whitespace": lambda pairs, *rest: admitted(pairs, *rest) and any(
        p["chosen"] != p["rejected"] and p["chosen"].split() == p["rejected"].split() for p in pairs),
    "replies that differ in case or punctuation only": lambda pairs, *rest: admitted(pairs, *rest) and any(
        p["chosen"].strip(".").casefold() == p["rejected"].strip(".").casefold() and p["chosen"] != p["rejected"]
        and p["chosen"].split() != p["rejected"].split() for p in pairs),
    "a pair refused for both reasons": lambda pairs, *rest: any(
        len(r["reasons"]) == 2 for r in admitted(pairs, *rest)["refused"]),
    "nothing admitted": lambda pairs, *rest: admitted(pairs, *rest)["admitted"] == [],
    "decision tune": lambda *call: admitted(*call)["decision"] == "tune",
    "decision reject with pairs admitted": lambda *call: admitted(*call)["decision"] == "reject"
        and admitted(*call)["admitted"] != [],
    "decision accept": lambda *call: admitted(*call)["decision"] == "accept",
    "prompt truncation exactly at the limit": lambda pairs, p, n, rate, m: admitted(pairs, p, n, rate, m)[
        "prompt_truncation_rate"] == rate and rate > 0,
    "pairs as a tuple": lambda pairs, *rest: isinstance(pairs, tuple) and bool(admitted(pairs, *rest)),
    "a token count that is a bool": lambda pairs, *rest: isinstance(pairs, list) and any(
        isinstance(p, dict) and any(is_bool(p.get(k)) for k in ("prompt_tokens", "chosen_tokens", "rejected_tokens"))
        for p in pairs),
    "a token count of 0 at the last pair": lambda pairs, *rest: isinstance(pairs, list) and isinstance(pairs[-1], dict)
        and 0 in [pairs[-1].get(k) for k in ("prompt_tokens", "chosen_tokens", "rejected_tokens")],
    "a float token count": lambda pairs, *rest: isinstance(pairs, list) and any(
        isinstance(p, dict) and any(type(p.get(k)) is float for k in ("prompt_tokens", "chosen_tokens", "rejected_tokens"))
        for p in pairs),
    "a reply that is not a str": lambda pairs, *rest: isinstance(pairs, list) and any(
        isinstance(p, dict) and not all(isinstance(p.get(k), str) for k in ("chosen", "rejected")) for p in pairs),
    "a duplicate id": lambda pairs, *rest: isinstance(pairs, list) and all(isinstance(p, dict) for p in pairs) and len(
        {p.get("id") for p in pairs}) < len(pairs),
    "a pair that is not a dict": lambda pairs, *rest: isinstance(pairs, list) and any(not isinstance(p, dict) for p in pairs),
    "a rate limit that is not finite": lambda pairs, p, n, rate, m: not_finite(rate),
    "a rate limit that is a bool": lambda pairs, p, n, rate, m: is_bool(rate),
    "a rate limit outside [0, 1]": lambda pairs, p, n, rate, m: isinstance(rate, float) and (rate < 0 or rate > 1),
    "a limit that is a bool": lambda pairs, p, n, rate, m: any(is_bool(v) for v in (p, n, m)),
    "a prompt limit not below max_length": lambda pairs, p, n, rate, m: isinstance(p, int) and p >= n,
    "min_pairs of 0": lambda pairs, p, n, rate, m: m == 0 and not is_bool(m),
    "empty pairs": lambda pairs, *rest: pairs == (),
})

# %% hidden exercise=independent_evaluation points=1 name=a_position_judge_is_inconsistent_not_correct
# hint: a pair counts as correct only when the chosen reply has the strictly higher log-ratio in both orders; a judge that always prefers the first slot is right in one order and wrong in the other.
def judged(pair_id, order, first, second):
    return {"pair_id": pair_id, "prompt": f"Compute {pair_id}.", "order": order, "policy_first": first,
            "policy_second": second, "reference_first": -3.0, "reference_second": -3.0}

first_wins = [judged(f"p{i}", order, -1.0, -2.0) for i in range(6) for order in ("chosen_first", "rejected_first")]
result = independent_evaluation(first_wins, [])
assert (result["correct"], result["wrong"], result["inconsistent"], result["pair_accuracy"]) == (0, 0, 6, 0.0), result
assert result["beats_chance"] is False
tie = [judged("t", "chosen_first", -1.0, -1.0), judged("t", "rejected_first", -2.0, -1.0)]
assert independent_evaluation(tie, [])["inconsistent"] == 1, "a tie in one order is not a win"

# %% hidden exercise=independent_evaluation points=1 name=the_wilson_interval_and_chance
# hint: the 95 % Wilson interval with z = WILSON_Z over the judged pairs; beats_chance only when its low end is above 0.5 (not the accuracy itself).
def judged(pair_id, order, chosen, rejected):
    first, second = (chosen, rejected) if order == "chosen_first" else (rejected, chosen)
    return {"pair_id": pair_id, "prompt": pair_id, "order": order, "policy_first": first, "policy_second": second,
            "reference_first": 0.0, "reference_second": 0.0}

def pairs(right, wrong):
    made = [judged(f"r{i}", o, 1.0, 0.0) for i in range(right) for o in ("chosen_first", "rejected_first")]
    return made + [judged(f"w{i}", o, 0.0, 1.0) for i in range(wrong) for o in ("chosen_first", "rejected_first")]

nine = independent_evaluation(pairs(9, 3), [])
low, high = nine["interval"]
assert nine["pair_accuracy"] == 0.75 and abs(low - 0.46769) < 1e-4 and abs(high - 0.91107) < 1e-4, nine["interval"]
assert nine["beats_chance"] is False, "0.75 on 12 pairs: the interval still reaches below 0.5"
many = independent_evaluation(pairs(30, 10), [])
assert abs(many["interval"][0] - 0.59808) < 1e-4 and many["beats_chance"] is True
none_right = independent_evaluation(pairs(0, 4), [])
assert none_right["pair_accuracy"] == 0.0 and abs(none_right["interval"][0]) < 1e-9 and none_right["wrong"] == 4

# %% hidden exercise=independent_evaluation points=1 name=leaked_pairs_are_listed_and_never_judged
# hint: a pair whose prompt is among the training prompts is listed (sorted) as leaked and counts nowhere else, not in the log-ratio means either; with every pair leaked, accuracy, interval and means are None.
def judged(pair_id, prompt, order, chosen, rejected):
    first, second = (chosen, rejected) if order == "chosen_first" else (rejected, chosen)
    return {"pair_id": pair_id, "prompt": prompt, "order": order, "policy_first": first, "policy_second": second,
            "reference_first": -1.0, "reference_second": -1.0}

items = [judged(pid, prompt, o, c, r) for pid, prompt, c, r in
         [("z9", "seen b", -9.0, 0.0), ("a1", "new", 0.0, -2.0), ("m5", "seen a", -9.0, 0.0)]
         for o in ("rejected_first", "chosen_first")]
result = independent_evaluation(items, ["seen a", "seen b", "other"])
assert result["leaked"] == ["m5", "z9"] and result["pairs"] == 1 and result["correct"] == 1, result
assert abs(result["chosen_logratio"] - 1.0) < 1e-12 and abs(result["rejected_logratio"] + 1.0) < 1e-12
every = independent_evaluation(items, ("seen a", "seen b", "new"))
assert every["pairs"] == 0 and every["pair_accuracy"] is None and every["interval"] is None
assert every["beats_chance"] is False and every["chosen_logratio"] is None and every["rejected_logratio"] is None

# %% hidden exercise=independent_evaluation points=1 name=wrong_evaluation_calls_raise_and_good_calls_do_not
# hint: a non-empty list or tuple of judgement dicts, every pair in both orders with one prompt, four finite log-probabilities (never bools), and a list or tuple of str prompts.
def judged(pair_id="p", order="chosen_first", **changes):
    return {"pair_id": pair_id, "prompt": "x", "order": order, "policy_first": -1.0, "policy_second": -2.0,
            "reference_first": -1.5, "reference_second": -1.5, **changes}

good = [judged(), judged(order="rejected_first", policy_first=-2.0, policy_second=-1.0)]
assert independent_evaluation(tuple(good), ("y",))["correct"] == 1
assert independent_evaluation(good, ["x"])["leaked"] == ["p"]
nan = float("nan")
bad_calls = [([], []), (None, []), (good, None), (good, "x"), (good, [1]), (good, {"x": 1}),
             (good + [judged()], []), (good[:1], []), ([good[0], judged(order="rejected_first", prompt="y")], []),
             ([judged(order="both"), good[1]], []), ([judged(pair_id=""), judged(pair_id="", order="rejected_first")], []),
             ([judged(pair_id=3), judged(pair_id=3, order="rejected_first")], []), ([good[0], 7], []),
             ([judged(policy_first=nan), good[1]], []), ([good[0], dict(good[1], reference_second=float("inf"))], []),
             ([judged(reference_first=True), good[1]], []), ([good[0], dict(good[1], policy_second="1")], []),
             ([judged(prompt=None), dict(good[1], prompt=None)], [])]
for index, arguments in enumerate(bad_calls):
    try:
        independent_evaluation(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {index} was accepted")

# %% hidden exercise=independent_evaluation points=2 name=agrees_with_reference_on_generated_judgements
# hint: any judgements, valid or with one defect at the first, an inner or the last judgement: the same evaluation, or the same ValueError.
from tools.course.grader.clauses import each_of, is_bool, not_finite

FIELDS = ("policy_first", "policy_second", "reference_first", "reference_second")
defects = ([("valid", n) for n in range(40)]
           + [("number", field, bad, at) for field in FIELDS for bad in (float("nan"), float("inf"), True)
              for at in ("first", "inner", "last")]
           + [("order", bad) for bad in ("both", None, "CHOSEN_FIRST")] + [("missing_order", at) for at in ("first", "last")]
           + [("twice", at) for at in ("first", "last")] + [("prompt_differs", n) for n in range(2)]
           + [("pair_id", bad) for bad in ("", None, 4)] + [("judgements", bad) for bad in ((), None, "j")]
           + [("train_prompts", bad) for bad in (None, "prompt", [None], {"a": 1})] + [("not_a_dict", n) for n in range(2)])

def one_defect(defect, rng):
    n = rng.randint(2, 6)
    prompts = [rng.choice(["Compute 1 + 2.", "Compute 1 + 2. ", "compute 1 + 2.", "Compute 3 + 4.\n", "Add\t5 and 6."])
               + f" #{i}" * rng.randint(0, 1) for i in range(n)]
    items = []
    for i in range(n):
        chosen_policy = rng.choice([-1.0, -2.5, -0.1 + 0.2, -3.0, rng.uniform(-6, 0)])
        rejected_policy = rng.choice([chosen_policy, -2.5, -1.0, rng.uniform(-6, 0)])
        chosen_ref, rejected_ref = rng.choice([(-2.0, -2.0), (-1.0, -3.0), (rng.uniform(-6, 0), rng.uniform(-6, 0))])
        for order in rng.sample(["chosen_first", "rejected_first"], 2):
            drift = rng.choice([0.0, 0.0, rng.uniform(-1.5, 1.5)])  # an order-dependent judge
            c, r = chosen_policy + (drift if order == "chosen_first" else 0.0), rejected_policy
            first, second = ((c, chosen_ref), (r, rejected_ref)) if order == "chosen_first" else ((r, rejected_ref), (c, chosen_ref))
            items.append({"pair_id": f"pair-{i}", "prompt": prompts[i], "order": order, "policy_first": first[0],
                          "policy_second": second[0], "reference_first": first[1], "reference_second": second[1]})
    rng.shuffle(items)
    train = rng.sample(prompts, rng.randint(0, n)) + rng.sample(["Compute 1 + 2.", "unrelated"], rng.randint(0, 2))
    train = rng.choice([list, tuple])(train)
    at = {"first": 0, "inner": rng.randrange(1, len(items) - 1), "last": len(items) - 1}
    kind = defect[0]
    if kind == "number":
        items[at[defect[3]]][defect[1]] = defect[2]
    elif kind == "order":
        items[rng.randrange(len(items))]["order"] = defect[1]
    elif kind == "missing_order":
        del items[at[defect[1]]]
    elif kind == "twice":
        items.append(dict(items[at[defect[1]]]))
    elif kind == "prompt_differs":
        items[rng.randrange(len(items))]["prompt"] += " (edited)"
    elif kind == "pair_id":
        victim = items[rng.randrange(len(items))]["pair_id"]
        for item in items:
            if item["pair_id"] == victim:
                item["pair_id"] = defect[1]
    elif kind == "judgements":
        items = defect[1]
    elif kind == "train_prompts":
        train = defect[1]
    elif kind == "not_a_dict":
        items[rng.randrange(len(items))] = rng.choice([None, ["pair-0"], "pair-0"])
    if kind == "valid" and rng.random() < 0.3:
        items = tuple(items)
    return items, train

def evaluated(*call):
    return reference("independent_evaluation")(*call)

reference.agrees("independent_evaluation", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "an order-dependent verdict": lambda *call: evaluated(*call)["inconsistent"] > 0,
    "a pair wrong in both orders": lambda *call: evaluated(*call)["wrong"] > 0,
    "a pair right in both orders": lambda *call: evaluated(*call)["correct"] > 0,
    "a leaked pair": lambda *call: bool(evaluated(*call)["leaked"]),
    "every pair leaked": lambda *call: evaluated(*call)["pairs"] == 0,
    "a prompt that differs from a training prompt by whitespace or case only": lambda items, train: evaluated(
        items, train) and any(p != t and p.split() == t.split() or p.casefold() == t.casefold() and p != t
                              for p in {i["prompt"] for i in items} for t in train),
    "beats chance": lambda *call: evaluated(*call)["beats_chance"] is True,
    "a tie in one order": lambda items, train: evaluated(items, train) and any(
        i["policy_first"] - i["reference_first"] == i["policy_second"] - i["reference_second"] for i in items),
    "judgements as a tuple": lambda items, train: isinstance(items, tuple) and bool(evaluated(items, train)),
    "training prompts as a tuple": lambda items, train: isinstance(train, tuple) and bool(evaluated(items, train)),
    "a log-probability that is not finite, not at the last judgement": lambda items, train: isinstance(items, list)
        and any(isinstance(i, dict) and any(not_finite(i.get(f)) for f in FIELDS) for i in items[:-1]),
    "a log-probability that is not finite at the last judgement": lambda items, train: isinstance(items, list)
        and isinstance(items[-1], dict) and any(not_finite(items[-1].get(f)) for f in FIELDS),
    "a log-probability that is a bool": lambda items, train: isinstance(items, list) and any(
        isinstance(i, dict) and any(is_bool(i.get(f)) for f in FIELDS) for i in items),
    "an order judged twice": lambda items, train: isinstance(items, list) and len(
        {(i.get("pair_id"), i.get("order")) for i in items if isinstance(i, dict)}) < len(items),
    "a pair missing an order": lambda items, train: isinstance(items, list) and len(items) % 2 == 1 and all(
        isinstance(i, dict) for i in items) and len({(i.get("pair_id"), i.get("order")) for i in items}) == len(items),
    "the two orders with different prompts": lambda items, train: isinstance(items, list) and any(
        isinstance(i, dict) and i.get("prompt", "").endswith("(edited)") for i in items),
    "an unknown order": lambda items, train: isinstance(items, list) and any(
        isinstance(i, dict) and i.get("order") not in ("chosen_first", "rejected_first") for i in items),
    "training prompts that are not a list or tuple of str": lambda items, train: not isinstance(
        train, (list, tuple)) or any(not isinstance(t, str) for t in train),
    "an empty pair id": lambda items, train: isinstance(items, list) and any(
        isinstance(i, dict) and i.get("pair_id") == "" for i in items),
})

# %% hidden exercise=adoption_decision points=1 name=each_gate_alone_and_its_decision
# hint: data_admitted, pairs_beat_chance and base_skill_kept reject; task_gain, memory_within_budget and serving_cost_unchanged send the candidate back to tune; the reasons are the failed gates in gate order.
admitted, chance = {"decision": "accept"}, {"beats_chance": True, "interval": [0.9, 0.99]}
gain, kept = {"mean": 0.05, "lower": 0.02, "upper": 0.08}, {"mean": 0.0, "lower": -0.02, "upper": 0.02}
fine = {"peak_memory_bytes": 10, "memory_budget_bytes": 10, "adapter_bytes": 7, "baseline_adapter_bytes": 7}
assert adoption_decision(admitted, chance, gain, kept, fine, 0.05)["decision"] == "accept"
cases = [
    ({"decision": "tune"}, chance, gain, kept, fine, "reject", ["data_admitted"]),
    (admitted, {"beats_chance": False, "interval": [0.4, 0.9]}, gain, kept, fine, "reject", ["pairs_beat_chance"]),
    (admitted, chance, {"mean": 0.05, "lower": 0.0, "upper": 0.1}, kept, fine, "tune", ["task_gain"]),
    (admitted, chance, gain, {"mean": -0.06, "lower": -0.08, "upper": -0.04}, fine, "reject", ["base_skill_kept"]),
    (admitted, chance, gain, kept, dict(fine, peak_memory_bytes=11), "tune", ["memory_within_budget"]),
    (admitted, chance, gain, kept, dict(fine, adapter_bytes=8), "tune", ["serving_cost_unchanged"]),
    ({"decision": "reject"}, chance, {"mean": -0.1, "lower": -0.2, "upper": 0.0}, kept, dict(fine, adapter_bytes=9),
     "reject", ["data_admitted", "task_gain", "serving_cost_unchanged"]),
]
for index, (a, e, g, s, r, decision, reasons) in enumerate(cases):
    result = adoption_decision(a, e, g, s, r, 0.05)
    assert (result["decision"], result["reasons"]) == (decision, reasons), (index, result["decision"], result["reasons"])
    assert result["next_action"] == NEXT_ACTIONS[decision]

# %% hidden exercise=adoption_decision points=1 name=gates_carry_threshold_measured_and_passed
# hint: six gates in a fixed order, each {name, threshold, measured, passed}: the admission's decision, the evaluation's interval (None when missing), the gain's lower end, the skill's mean against -tolerance, the peak against the budget, the adapter size against 62's.
result = adoption_decision({"decision": "accept"}, {"beats_chance": False}, {"mean": 0.1, "lower": -0.01, "upper": 0.2},
                           {"mean": -0.03, "lower": -0.09, "upper": 0.03},
                           {"peak_memory_bytes": 0, "memory_budget_bytes": 1, "adapter_bytes": 3,
                            "baseline_adapter_bytes": 4}, 0.03)
assert result["gates"] == [
    {"name": "data_admitted", "threshold": "accept", "measured": "accept", "passed": True},
    {"name": "pairs_beat_chance", "threshold": "interval lower end > 0.5", "measured": None, "passed": False},
    {"name": "task_gain", "threshold": "interval lower end > 0", "measured": -0.01, "passed": False},
    {"name": "base_skill_kept", "threshold": -0.03, "measured": -0.03, "passed": True},
    {"name": "memory_within_budget", "threshold": 1, "measured": 0, "passed": True},
    {"name": "serving_cost_unchanged", "threshold": 4, "measured": 3, "passed": True},
], result["gates"]
assert result["decision"] == "reject" and result["reasons"] == ["pairs_beat_chance", "task_gain"]

# %% hidden exercise=adoption_decision points=1 name=an_unmeasured_peak_never_passes
# hint: peak_memory_bytes None means the memory was not measured: the gate fails (measured None), and the candidate goes back to tune.
resources = {"peak_memory_bytes": None, "memory_budget_bytes": 2 ** 30, "adapter_bytes": 5, "baseline_adapter_bytes": 5}
result = adoption_decision({"decision": "accept"}, {"beats_chance": True, "interval": [0.6, 0.8]},
                           {"mean": 0.1, "lower": 0.05, "upper": 0.15}, {"mean": 0.0, "lower": 0.0, "upper": 0.0},
                           resources, 0)
assert result["decision"] == "tune" and result["reasons"] == ["memory_within_budget"]
assert result["gates"][4] == {"name": "memory_within_budget", "threshold": 2 ** 30, "measured": None, "passed": False}
measured = adoption_decision({"decision": "accept"}, {"beats_chance": True, "interval": [0.6, 0.8]},
                             {"mean": 0.1, "lower": 0.05, "upper": 0.15}, {"mean": 0.0, "lower": 0.0, "upper": 0.0},
                             dict(resources, peak_memory_bytes=2 ** 30), 0)
assert measured["decision"] == "accept"

# %% hidden exercise=adoption_decision points=1 name=wrong_decision_calls_raise_and_good_calls_do_not
# hint: an admission with an accept / tune / reject decision, an evaluation with a bool beats_chance, two effects with finite lower <= mean <= upper, resources with a None-or-int peak and int sizes >= 1, a finite tolerance >= 0.
nan = float("nan")
a, e = {"decision": "accept"}, {"beats_chance": True, "interval": [0.7, 0.9]}
g, s = {"mean": 0.1, "lower": 0.05, "upper": 0.15}, {"mean": 0.0, "lower": -0.01, "upper": 0.01}
r = {"peak_memory_bytes": 3, "memory_budget_bytes": 4, "adapter_bytes": 2, "baseline_adapter_bytes": 2}
assert adoption_decision(a, e, g, s, r, 0.05)["decision"] == "accept"
assert adoption_decision(a, e, g, s, r, 0)["decision"] == "accept"
bad_calls = [({"decision": "adopt"}, e, g, s, r, 0.05), (None, e, g, s, r, 0.05), (a, {"beats_chance": 1}, g, s, r, 0.05),
             (a, {}, g, s, r, 0.05), (a, e, {"mean": 0.1, "lower": 0.2, "upper": 0.3}, s, r, 0.05),
             (a, e, g, {"mean": 0.0, "lower": -0.01, "upper": -0.02}, r, 0.05),
             (a, e, {"mean": nan, "lower": 0.0, "upper": 0.1}, s, r, 0.05), (a, e, g, dict(s, upper=float("inf")), r, 0.05),
             (a, e, dict(g, lower=True), s, r, 0.05), (a, e, g, {"mean": 0.0}, r, 0.05), (a, e, g, s, r, -0.01),
             (a, e, g, s, r, nan), (a, e, g, s, r, True), (a, e, g, s, dict(r, peak_memory_bytes=-1), 0.05),
             (a, e, g, s, dict(r, peak_memory_bytes=3.0), 0.05), (a, e, g, s, dict(r, memory_budget_bytes=0), 0.05),
             (a, e, g, s, dict(r, adapter_bytes=True), 0.05), (a, e, g, s, dict(r, baseline_adapter_bytes=None), 0.05),
             (a, e, g, s, None, 0.05)]
for index, arguments in enumerate(bad_calls):
    try:
        adoption_decision(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {index} was accepted")

# %% hidden exercise=adoption_decision points=2 name=agrees_with_reference_on_generated_candidates
# hint: any admission, evaluation, effects, resources and tolerance, valid or with one defect: the same decision, gates and reasons, or the same ValueError.
from tools.course.grader.clauses import each_of, is_bool, not_finite

defects = ([("valid", n) for n in range(60)]
           + [("effect", which, key, bad) for which in ("task", "skill") for key in ("lower", "mean", "upper")
              for bad in (float("nan"), float("inf"), True, None)]
           + [("effect_order", which, n) for which in ("task", "skill") for n in range(2)]
           + [("resource", key, bad) for key in ("peak_memory_bytes", "memory_budget_bytes", "adapter_bytes",
                                                 "baseline_adapter_bytes") for bad in (-1, 0, 2.0, True, "5")]
           + [("tolerance", bad) for bad in (-0.01, float("nan"), float("inf"), True, None)]
           + [("admission", bad) for bad in ("adopt", None, "ACCEPT")] + [("beats_chance", bad) for bad in (1, None, "yes")])

def one_defect(defect, rng):
    tolerance = rng.choice([0, 0.0, 0.05, 0.1, 0.1 + 0.2 - 0.3])

    def effect(centre_choices):
        mean = rng.choice(centre_choices)
        half = rng.choice([0.0, 0.01, 0.05, rng.uniform(0, 0.2)])
        return {"mean": mean, "lower": mean - half, "upper": mean + half, "n": 3}

    task = effect([0.0, 0.03, -0.03, 0.1, rng.uniform(-0.2, 0.2)])
    if rng.random() < 0.15:
        task = {"mean": 0.02, "lower": 0.0, "upper": 0.04}
    skill = effect([0.0, -tolerance, -0.04, -0.06, -0.12, rng.uniform(-0.15, 0.05)])
    if rng.random() < 0.15:
        skill = {"mean": -tolerance, "lower": -tolerance - 0.01, "upper": -tolerance + 0.01}
    budget = rng.choice([100, 2 ** 20])
    resources = {"peak_memory_bytes": rng.choice([None, budget, budget - 1, budget + 1, 0]),
                 "memory_budget_bytes": budget, "adapter_bytes": rng.choice([50, 51, 49]),
                 "baseline_adapter_bytes": 50}
    admission = {"decision": rng.choice(["accept", "accept", "tune", "reject"]), "admitted": ["a"]}
    low = rng.choice([0.4, 0.5, 0.51, 0.9])
    evaluation = rng.choice([{"beats_chance": low > 0.5, "interval": [low, min(low + 0.2, 1.0)], "pairs": 40},
                             {"beats_chance": False, "interval": None}])
    kind = defect[0]
    if kind == "effect":
        (task if defect[1] == "task" else skill)[defect[2]] = defect[3]
    elif kind == "effect_order":
        target = task if defect[1] == "task" else skill
        target["lower"], target["upper"] = target["mean"] + 0.05, target["mean"] + 0.1
        if defect[2]:
            target["lower"], target["upper"] = target["mean"] - 0.1, target["mean"] - 0.05
    elif kind == "resource":
        if defect[1] == "peak_memory_bytes" and defect[2] == 0:
            resources[defect[1]] = -5
        else:
            resources[defect[1]] = defect[2]
    elif kind == "tolerance":
        tolerance = defect[1]
    elif kind == "admission":
        admission["decision"] = defect[1]
    elif kind == "beats_chance":
        evaluation["beats_chance"] = defect[1]
    return admission, evaluation, task, skill, resources, tolerance

def decided(*call):
    return reference("adoption_decision")(*call)

reference.agrees("adoption_decision", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "accept": lambda *call: decided(*call)["decision"] == "accept",
    "tune": lambda *call: decided(*call)["decision"] == "tune",
    "reject with a tune gate failing too": lambda *call: decided(*call)["decision"] == "reject" and bool(
        {"task_gain", "memory_within_budget", "serving_cost_unchanged"} & set(decided(*call)["reasons"])),
    "reject for the regression alone": lambda *call: decided(*call)["reasons"] == ["base_skill_kept"],
    "a skill change exactly at -tolerance": lambda a, e, t, s, r, tol: decided(a, e, t, s, r, tol) and s["mean"] == -tol,
    "a task gain whose lower end is exactly 0": lambda a, e, t, s, r, tol: decided(a, e, t, s, r, tol) and t["lower"] == 0,
    "a peak exactly at the budget": lambda a, e, t, s, r, tol: decided(a, e, t, s, r, tol) and r[
        "peak_memory_bytes"] == r["memory_budget_bytes"],
    "an unmeasured peak": lambda a, e, t, s, r, tol: decided(a, e, t, s, r, tol) and r["peak_memory_bytes"] is None,
    "a larger adapter": lambda a, e, t, s, r, tol: "serving_cost_unchanged" in decided(a, e, t, s, r, tol)["reasons"],
    "an evaluation without an interval": lambda a, e, *rest: decided(a, e, *rest) and e.get("interval") is None,
    "an effect value that is not finite": lambda a, e, t, s, *rest: any(
        not_finite(v) for v in (t.get("lower"), t.get("mean"), t.get("upper"), s.get("lower"), s.get("mean"), s.get("upper"))),
    "an effect value that is a bool": lambda a, e, t, s, *rest: any(is_bool(v) for v in list(t.values()) + list(s.values())),
    "an effect out of order": lambda a, e, t, s, *rest: all(
        isinstance(v, float) for v in (t["lower"], t["mean"], t["upper"], s["lower"], s["mean"], s["upper"])) and not (
        t["lower"] <= t["mean"] <= t["upper"] and s["lower"] <= s["mean"] <= s["upper"]),
    "a resource that is a bool": lambda a, e, t, s, r, tol: any(is_bool(v) for v in r.values()),
    "a float resource": lambda a, e, t, s, r, tol: any(type(v) is float for v in r.values()),
    "a negative peak": lambda a, e, t, s, r, tol: isinstance(r["peak_memory_bytes"], int) and not is_bool(
        r["peak_memory_bytes"]) and r["peak_memory_bytes"] < 0,
    "a zero size or budget": lambda a, e, t, s, r, tol: 0 in [r[k] for k in ("memory_budget_bytes", "adapter_bytes",
                                                                              "baseline_adapter_bytes")],
    "a tolerance that is not finite or negative": lambda *call: not_finite(call[-1]) or (
        isinstance(call[-1], float) and call[-1] < 0),
    "a tolerance that is a bool": lambda *call: is_bool(call[-1]),
    "an unknown admission decision": lambda a, *rest: a["decision"] not in ("accept", "tune", "reject"),
    "beats_chance not a bool": lambda a, e, *rest: not isinstance(e["beats_chance"], bool),
})
