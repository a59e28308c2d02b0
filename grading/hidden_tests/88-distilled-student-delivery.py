# %% hidden exercise=comparability points=1 name=identity_findings_come_first
# hint: the same weights for teacher and student, then another tokenizer family, come before any stage finding.
teacher = {"model_id": "t", "tokenizer_sha256": "k1", "weights_sha256": "w1"}
student = {"model_id": "s", "tokenizer_sha256": "k2", "weights_sha256": "w1", "extra": 3}
stages = {name: {"start_sha256": "w1", "eval_sha256": "e", "decoding": {"temperature": 0.0}} for name in ("G2", "G0", "G1")}
assert comparability(teacher, student, stages) == {"comparable": False, "findings": ["teacher_is_student", "tokenizer_family"]}
fine = comparability(dict(teacher, weights_sha256="w9"), dict(student, tokenizer_sha256="k1"), stages)
assert fine == {"comparable": True, "findings": []}

# %% hidden exercise=comparability points=1 name=every_stage_starts_from_the_student
# hint: start:<S> for every stage (G0 included) whose start_sha256 is not the student's weights_sha256, in the order G0, G1, G2.
teacher = {"model_id": "t", "tokenizer_sha256": "k", "weights_sha256": "wt"}
student = {"model_id": "s", "tokenizer_sha256": "k", "weights_sha256": "ws"}
stages = {"G0": {"start_sha256": "wx", "eval_sha256": "e", "decoding": {}},
          "G1": {"start_sha256": "ws", "eval_sha256": "e", "decoding": {}},
          "G2": {"start_sha256": "wt", "eval_sha256": "e", "decoding": {}}}
assert comparability(teacher, student, stages)["findings"] == ["start:G0", "start:G2"]
stages["G0"] = dict(stages["G0"], start_sha256="ws")
assert comparability(teacher, student, stages)["findings"] == ["start:G2"]

# %% hidden exercise=comparability points=1 name=decoding_compares_value_and_type
# hint: G1 and G2 against G0: the same keys, and the same value of the same type inside lists and dicts (0 is not 0.0, True is not 1, a list is not a tuple); an evaluation finding comes before the decoding one of the same stage.
teacher = {"model_id": "t", "tokenizer_sha256": "k", "weights_sha256": "wt"}
student = {"model_id": "s", "tokenizer_sha256": "k", "weights_sha256": "ws"}
g0 = {"start_sha256": "ws", "eval_sha256": "dev", "decoding": {"temperature": 0.0, "stop": ["<end>"], "greedy": True}}
stages = {"G0": g0,
          "G1": dict(g0, decoding={"temperature": 0.0, "stop": ("<end>",), "greedy": True}),
          "G2": dict(g0, eval_sha256="other", decoding={"temperature": 0.0, "stop": ["<end>"], "greedy": 1})}
assert comparability(teacher, student, stages)["findings"] == ["decoding:G1", "evaluation:G2", "decoding:G2"]
stages["G1"] = dict(g0, decoding={"temperature": 0.0, "stop": ["<end>"], "greedy": True, "top_k": 1})
stages["G2"] = dict(g0, decoding={"greedy": True, "stop": ["<end>"], "temperature": 0.0})
assert comparability(teacher, student, stages)["findings"] == ["decoding:G1"], "an extra key differs; key order does not"

# %% hidden exercise=comparability points=1 name=wrong_comparability_calls_raise_and_good_calls_do_not
# hint: both models hold the three non-empty str fields; stages has exactly G0, G1, G2, each with non-empty str hashes and a decoding dict with str keys.
teacher = {"model_id": "t", "tokenizer_sha256": "k", "weights_sha256": "wt"}
student = {"model_id": "s", "tokenizer_sha256": "k", "weights_sha256": "ws"}
stage = {"start_sha256": "ws", "eval_sha256": "e", "decoding": {"t": 0}}
stages = {"G0": stage, "G1": dict(stage), "G2": dict(stage)}
assert comparability(teacher, student, stages)["comparable"] is True
assert comparability(teacher, student, dict(stages, G2=dict(stage, eval_sha256="x")))["comparable"] is False
bad_calls = [(None, student, stages), (teacher, dict(student, model_id=""), stages),
             (dict(teacher, tokenizer_sha256=3), student, stages), ({"model_id": "t", "weights_sha256": "w"}, student, stages),
             (teacher, student, None), (teacher, student, {"G0": stage, "G1": stage}),
             (teacher, student, dict(stages, G3=stage)), (teacher, student, dict(stages, G1=None)),
             (teacher, student, dict(stages, G2=dict(stage, start_sha256=""))),
             (teacher, student, dict(stages, G1=dict(stage, eval_sha256=None))),
             (teacher, student, dict(stages, G0=dict(stage, decoding=None))),
             (teacher, student, dict(stages, G2=dict(stage, decoding={1: 0}))),
             (teacher, student, [("G0", stage), ("G1", stage), ("G2", stage)])]
for position, arguments in enumerate(bad_calls):
    try:
        comparability(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {position} was accepted")

# %% hidden exercise=comparability points=2 name=agrees_with_reference_on_generated_pairs
# hint: any pair and stages, valid or with one defect: the same findings in the same order, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = [("valid", n) for n in range(40)] + [(kind, 0) for kind in (
    "teacher_none", "teacher_blank", "student_int_field", "student_missing", "stages_none", "stages_missing",
    "stages_extra", "stage_none", "start_blank", "eval_int", "decoding_none", "decoding_int_key")]
decodings = [{"temperature": 0.0, "max_new_tokens": 6}, {"temperature": 0, "max_new_tokens": 6},
             {"temperature": 0.0, "max_new_tokens": 6.0}, {"temperature": False, "max_new_tokens": 6},
             {"max_new_tokens": 6, "temperature": 0.0}, {"temperature": 0.0}, {"temperature": 0.0, "stop": ["e"]},
             {"temperature": 0.0, "stop": ("e",)}]


def one_pair(defect, rng):
    kind, n = defect
    clean = kind == "valid" and n < 8  # a fully comparable pair, its stages in a random order
    student = {"model_id": "s", "tokenizer_sha256": "k" if clean else rng.choice(["k", "k", "k2"]), "weights_sha256": "ws"}
    teacher = {"model_id": "t", "tokenizer_sha256": "k", "weights_sha256": "wt" if clean else rng.choice(["wt", "wt", "wt", "ws"])}
    base = rng.choice(decodings[:1] + decodings[6:7])
    stages = {}
    for name in rng.sample(["G0", "G1", "G2"], 3):
        stages[name] = {"start_sha256": "ws" if clean else rng.choice(["ws", "ws", "ws", "wt", "wx"]),
                        "eval_sha256": "dev" if clean else rng.choice(["dev", "dev", "dev", "easy"]),
                        "decoding": dict(base) if clean or rng.random() < 0.5 else dict(rng.choice(decodings))}
    if kind == "teacher_none":
        teacher = None
    elif kind == "teacher_blank":
        teacher["weights_sha256"] = ""
    elif kind == "student_int_field":
        student["tokenizer_sha256"] = 7
    elif kind == "student_missing":
        del student["model_id"]
    elif kind == "stages_none":
        stages = None
    elif kind == "stages_missing":
        del stages[rng.choice(["G0", "G1", "G2"])]
    elif kind == "stages_extra":
        stages["G3"] = dict(stages["G0"])
    elif kind == "stage_none":
        stages[rng.choice(["G0", "G1", "G2"])] = None
    elif kind == "start_blank":
        stages[rng.choice(["G0", "G1", "G2"])]["start_sha256"] = ""
    elif kind == "eval_int":
        stages[rng.choice(["G0", "G1", "G2"])]["eval_sha256"] = 5
    elif kind == "decoding_none":
        stages[rng.choice(["G0", "G1", "G2"])]["decoding"] = None
    elif kind == "decoding_int_key":
        stages[rng.choice(["G0", "G1", "G2"])]["decoding"] = {0: 0.0}
    return teacher, student, stages


def found(*call):
    """The reference's findings (raises on an invalid call, so a valid clause never counts one)."""
    return reference("comparability")(*call)["findings"]


def fine_models(teacher, student):
    return all(isinstance(m, dict) and all(isinstance(m.get(k), str) and m.get(k) for k in
                                           ("model_id", "tokenizer_sha256", "weights_sha256")) for m in (teacher, student))


reference.agrees("comparability", each_of(defects, one_pair, variants=4), cases=4 * len(defects), clauses={
    "teacher is student": lambda *call: "teacher_is_student" in found(*call),
    "another tokenizer family": lambda *call: "tokenizer_family" in found(*call),
    "G0 started elsewhere": lambda *call: "start:G0" in found(*call),
    "G1 started elsewhere": lambda *call: "start:G1" in found(*call),
    "G2 started elsewhere": lambda *call: "start:G2" in found(*call),
    "another evaluation set": lambda *call: any(f.startswith("evaluation:") for f in found(*call)),
    "decoding equal to Python but of another type": lambda t, s, stages: found(t, s, stages) is not None and any(
        stages[n]["decoding"] == stages["G0"]["decoding"] and f"decoding:{n}" in found(t, s, stages) for n in ("G1", "G2")),
    "decoding with the keys in another order (the same)": lambda t, s, stages: found(t, s, stages) is not None and any(
        list(stages[n]["decoding"]) != list(stages["G0"]["decoding"]) and f"decoding:{n}" not in found(t, s, stages)
        for n in ("G1", "G2")),
    "stages given in another order": lambda t, s, stages: found(t, s, stages) is not None and list(stages) != ["G0", "G1", "G2"],
    "everything comparable": lambda *call: found(*call) == [],
    "teacher None": lambda t, s, stages: t is None,
    "a blank model field": lambda t, s, stages: isinstance(t, dict) and t.get("weights_sha256") == "",
    "a model field that is not a str": lambda t, s, stages: isinstance(s, dict) and s.get("tokenizer_sha256") == 7,
    "a model field missing": lambda t, s, stages: isinstance(s, dict) and "model_id" not in s,
    "stages None": lambda t, s, stages: fine_models(t, s) and stages is None,
    "a stage missing": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and len(stages) == 2,
    "an extra stage": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and "G3" in stages,
    "a stage None": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and None in stages.values(),
    "a blank start hash": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and any(
        isinstance(v, dict) and v.get("start_sha256") == "" for v in stages.values()),
    "an int evaluation hash": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and any(
        isinstance(v, dict) and v.get("eval_sha256") == 5 for v in stages.values()),
    "decoding None": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and any(
        isinstance(v, dict) and "decoding" in v and v["decoding"] is None for v in stages.values()),
    "decoding with an int key": lambda t, s, stages: fine_models(t, s) and isinstance(stages, dict) and any(
        isinstance(v, dict) and v.get("decoding") == {0: 0.0} for v in stages.values()),
})

# %% hidden exercise=deployment_gates points=1 name=measures_follow_the_formulas
# hint: gain = (candidate correct - baseline correct) / n; retention over the baseline's correct problems only; format over the candidate's replies; latency = candidate / teacher; each gate keeps its threshold as given.
limits = {"min_gain": -0.5, "min_retention": 0.0, "min_format": 0.0, "max_latency_ratio": 4.0}
baseline = {"correct": [True, False, True, False, True], "formatted": [False] * 5, "latency_s": 3.0}
candidate = {"correct": [False, True, True, True, False], "formatted": [True, True, False, True, True], "latency_s": 0.75}
result = deployment_gates(baseline, candidate, 0.5, limits)
assert [(g["name"], g["threshold"], g["measured"]) for g in result["gates"]] == [
    ("quality_gain", -0.5, 0.0), ("retention", 0.0, 1 / 3), ("format", 0.0, 0.8), ("latency", 4.0, 1.5)]
assert result["qualifies"] is True
worse = deployment_gates(baseline, dict(candidate, correct=[False] * 5), 0.5, limits)
assert worse["gates"][0]["measured"] == -0.6 and worse["gates"][0]["passed"] is False and worse["qualifies"] is False

# %% hidden exercise=deployment_gates points=1 name=thresholds_are_inclusive
# hint: a gain, retention or format share equal to its minimum passes; a latency ratio equal to its maximum passes.
limits = {"min_gain": 0.25, "min_retention": 0.5, "min_format": 0.75, "max_latency_ratio": 0.5}
baseline = {"correct": [True, True, False, False], "formatted": [True] * 4, "latency_s": 1.0}
candidate = {"correct": [True, False, True, True], "formatted": [True, True, True, False], "latency_s": 0.25}
assert [g["passed"] for g in deployment_gates(baseline, candidate, 0.5, limits)["gates"]] == [True] * 4
just_over = dict(candidate, latency_s=0.2500001)
assert [g["passed"] for g in deployment_gates(baseline, just_over, 0.5, limits)["gates"]] == [True, True, True, False]

# %% hidden exercise=deployment_gates points=1 name=retention_without_known_problems
# hint: when the baseline answered nothing correctly, retention is measured as None and passes; the other gates still decide.
limits = {"min_gain": 0.0, "min_retention": 1.0, "min_format": 1.0, "max_latency_ratio": 1.0}
baseline = {"correct": [False, False], "formatted": [True, True], "latency_s": 1.0}
candidate = {"correct": [True, False], "formatted": [True, False], "latency_s": 1.0}
result = deployment_gates(baseline, candidate, 2.0, limits)
assert result["gates"][1] == {"name": "retention", "threshold": 1.0, "measured": None, "passed": True}
assert [g["passed"] for g in result["gates"]] == [True, True, False, True] and result["qualifies"] is False
known = deployment_gates(dict(baseline, correct=[False, True]), candidate, 2.0, limits)
assert known["gates"][1]["measured"] == 0.0 and known["gates"][1]["passed"] is False

# %% hidden exercise=deployment_gates points=1 name=wrong_deployment_gates_calls_raise_and_good_calls_do_not
# hint: bools only in the lists (not 0 / 1), one length everywhere, latencies finite and > 0 (not bools), exactly the four thresholds in their ranges.
limits = {"min_gain": 0.0, "min_retention": 0.5, "min_format": 0.5, "max_latency_ratio": 1.0}
baseline = {"correct": [True, False], "formatted": [True, True], "latency_s": 1.0}
candidate = {"correct": [True, True], "formatted": [True, True], "latency_s": 0.5}
assert deployment_gates(baseline, candidate, 1.0, limits)["qualifies"] is True
assert deployment_gates(baseline, dict(candidate, latency_s=2.0), 1.0, limits)["qualifies"] is False
nan = float("nan")
bad_calls = [(None, candidate, 1.0, limits), (baseline, dict(candidate, correct=[1, 1]), 1.0, limits),
             (baseline, dict(candidate, formatted=[True, None]), 1.0, limits), (baseline, dict(candidate, correct=[]), 1.0, limits),
             (baseline, dict(candidate, correct=[True]), 1.0, limits),
             (dict(baseline, correct=[True, False, True], formatted=[True] * 3), candidate, 1.0, limits),
             (baseline, dict(candidate, latency_s=0.0), 1.0, limits), (dict(baseline, latency_s=True), candidate, 1.0, limits),
             (baseline, dict(candidate, latency_s=nan), 1.0, limits), (baseline, candidate, -1.0, limits),
             (baseline, candidate, True, limits), (baseline, candidate, float("inf"), limits),
             (baseline, candidate, 1.0, {k: v for k, v in limits.items() if k != "min_format"}),
             (baseline, candidate, 1.0, dict(limits, extra=1.0)), (baseline, candidate, 1.0, dict(limits, min_gain=1.5)),
             (baseline, candidate, 1.0, dict(limits, min_retention=-0.1)), (baseline, candidate, 1.0, dict(limits, min_format=True)),
             (baseline, candidate, 1.0, dict(limits, max_latency_ratio=0.0)), (baseline, candidate, 1.0, dict(limits, min_gain=nan)),
             (baseline, candidate, 1.0, None), (baseline, (True, True), 1.0, limits)]
for position, arguments in enumerate(bad_calls):
    try:
        deployment_gates(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {position} was accepted")

# %% hidden exercise=deployment_gates points=2 name=agrees_with_reference_on_generated_candidates
# hint: any outcomes, latencies and thresholds, valid or with one defect: the same gates and measures, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = [("valid", n) for n in range(50)] + [("boundary", n) for n in range(8)] + [(kind, 0) for kind in (
    "int_outcome", "none_outcome", "empty", "lengths", "formatted_length", "latency_zero", "latency_bool",
    "latency_nan", "teacher_negative", "teacher_bool", "teacher_inf", "threshold_missing", "threshold_extra",
    "gain_out_of_range", "retention_negative", "format_bool", "ratio_zero", "threshold_nan", "baseline_none")]


def one_candidate(defect, rng):
    kind, n = defect
    count = rng.randint(1, 8)
    baseline = {"correct": [rng.random() < 0.5 for _ in range(count)],
                "formatted": [rng.random() < 0.8 for _ in range(count)], "latency_s": rng.choice([0.5, 1.0, 0.25])}
    candidate = {"correct": [rng.random() < 0.6 for _ in range(count)],
                 "formatted": [rng.random() < 0.9 for _ in range(count)], "latency_s": rng.choice([0.25, 0.375, 0.5, 0.75])}
    teacher = rng.choice([0.5, 1.0, 0.75])
    thresholds = {"min_gain": rng.choice([-1.0, 0.0, 0.05, 0.25, 1.0, -0.25]), "min_retention": rng.choice([0.0, 0.5, 0.9, 1.0]),
                  "min_format": rng.choice([0.0, 0.5, 0.95, 1.0]), "max_latency_ratio": rng.choice([0.5, 0.75, 1.0, 2.0])}
    if kind == "boundary":  # every measure exactly on its threshold
        candidate["correct"] = list(baseline["correct"])
        candidate["latency_s"] = 0.5
        teacher = 1.0
        known = sum(baseline["correct"])
        thresholds = {"min_gain": 0.0, "min_retention": 1.0 if known else 0.5,
                      "min_format": sum(candidate["formatted"]) / count, "max_latency_ratio": 0.5}
    elif kind == "int_outcome":
        candidate["correct"][rng.randrange(count)] = 1
    elif kind == "none_outcome":
        baseline["formatted"][rng.randrange(count)] = None
    elif kind == "empty":
        candidate["correct"], candidate["formatted"] = [], []
    elif kind == "lengths":
        candidate["correct"].append(True)
        candidate["formatted"].append(True)
    elif kind == "formatted_length":
        baseline["formatted"] = baseline["formatted"] + [True]
    elif kind == "latency_zero":
        candidate["latency_s"] = 0.0
    elif kind == "latency_bool":
        baseline["latency_s"] = True
    elif kind == "latency_nan":
        candidate["latency_s"] = float("nan")
    elif kind == "teacher_negative":
        teacher = -0.5
    elif kind == "teacher_bool":
        teacher = True
    elif kind == "teacher_inf":
        teacher = float("inf")
    elif kind == "threshold_missing":
        del thresholds[rng.choice(sorted(thresholds))]
    elif kind == "threshold_extra":
        thresholds["min_speedup"] = 1.0
    elif kind == "gain_out_of_range":
        thresholds["min_gain"] = rng.choice([1.5, -1.5])
    elif kind == "retention_negative":
        thresholds["min_retention"] = -0.1
    elif kind == "format_bool":
        thresholds["min_format"] = True
    elif kind == "ratio_zero":
        thresholds["max_latency_ratio"] = 0.0
    elif kind == "threshold_nan":
        thresholds[rng.choice(sorted(thresholds))] = float("nan")
    elif kind == "baseline_none":
        baseline = None
    return baseline, candidate, teacher, thresholds


def gated(*call):
    """The reference's gates (raises on an invalid call, so a valid clause never counts one)."""
    return {g["name"]: g for g in reference("deployment_gates")(*call)["gates"]}


def outcomes_fine(baseline, candidate, teacher):
    return all(isinstance(o, dict) and o["latency_s"] is not True and o["latency_s"] > 0 and o["correct"]
               and len(o["correct"]) == len(o["formatted"]) == len(baseline["correct"])
               and all(type(v) is bool for v in o["correct"] + o["formatted"]) for o in (baseline, candidate)) \
        and type(teacher) is float and 0 < teacher < float("inf") and candidate["latency_s"] == candidate["latency_s"]


reference.agrees("deployment_gates", each_of(defects, one_candidate, variants=3), cases=3 * len(defects), clauses={
    "quality gain fails": lambda *call: gated(*call)["quality_gain"]["passed"] is False,
    "quality gain exactly at the minimum": lambda *call: gated(*call)["quality_gain"]["measured"] == call[3]["min_gain"],
    "retention fails": lambda *call: gated(*call)["retention"]["passed"] is False,
    "retention None (nothing known)": lambda *call: gated(*call)["retention"]["measured"] is None,
    "retention exactly at the minimum": lambda *call: gated(*call)["retention"]["measured"] == call[3]["min_retention"],
    "format fails": lambda *call: gated(*call)["format"]["passed"] is False,
    "format exactly at the minimum": lambda *call: gated(*call)["format"]["measured"] == call[3]["min_format"],
    "latency fails": lambda *call: gated(*call)["latency"]["passed"] is False,
    "latency exactly at the maximum": lambda *call: gated(*call)["latency"]["measured"] == call[3]["max_latency_ratio"],
    "every gate passes": lambda *call: all(g["passed"] for g in gated(*call).values()),
    "an int outcome": lambda b, c, t, th: isinstance(c, dict) and any(type(v) is int for v in c["correct"]),
    "a None outcome": lambda b, c, t, th: isinstance(b, dict) and None in b["formatted"],
    "no outcome": lambda b, c, t, th: isinstance(c, dict) and c["correct"] == [],
    "outcomes of different lengths": lambda b, c, t, th: isinstance(b, dict) and len(c["correct"]) == len(c["formatted"]) \
        != len(b["correct"]) and len(b["correct"]) == len(b["formatted"]),
    "formatted longer than correct": lambda b, c, t, th: isinstance(b, dict) and len(b["formatted"]) != len(b["correct"]),
    "a zero latency": lambda b, c, t, th: isinstance(c, dict) and c["latency_s"] == 0.0,
    "a bool latency": lambda b, c, t, th: isinstance(b, dict) and b["latency_s"] is True,
    "a nan latency": lambda b, c, t, th: isinstance(c, dict) and c["latency_s"] != c["latency_s"],
    "a negative teacher latency": lambda b, c, t, th: t == -0.5,
    "a bool teacher latency": lambda b, c, t, th: t is True,
    "an infinite teacher latency": lambda b, c, t, th: t == float("inf"),
    "a threshold missing": lambda b, c, t, th: outcomes_fine(b, c, t) and len(th) == 3,
    "an extra threshold": lambda b, c, t, th: outcomes_fine(b, c, t) and "min_speedup" in th,
    "min_gain outside [-1, 1]": lambda b, c, t, th: outcomes_fine(b, c, t) and abs(th["min_gain"]) == 1.5,
    "a negative min_retention": lambda b, c, t, th: outcomes_fine(b, c, t) and th["min_retention"] == -0.1,
    "a bool min_format": lambda b, c, t, th: outcomes_fine(b, c, t) and th["min_format"] is True,
    "a zero max_latency_ratio": lambda b, c, t, th: outcomes_fine(b, c, t) and th["max_latency_ratio"] == 0.0,
    "a nan threshold": lambda b, c, t, th: outcomes_fine(b, c, t) and len(th) == 4 and any(v != v for v in th.values()),
    "baseline None": lambda b, c, t, th: b is None,
})

# %% hidden exercise=terminal_decision points=1 name=not_comparable_rejects_before_anything
# hint: a finding makes the decision reject with no qualifying seed, even when every seed passed every gate; its reasons come before the seeds'.
def gates(*failed):
    rows = [{"name": n, "passed": n not in failed} for n in ("quality_gain", "retention", "format", "latency")]
    return {"gates": rows, "qualifies": not failed}
result = terminal_decision({"comparable": False, "findings": ["start:G1", "decoding:G2"]}, {2: gates(), 1: gates("format")})
assert result == {"decision": "reject", "reasons": ["incomparable:start:G1", "incomparable:decoding:G2", "seed_1:format"],
                  "qualifying_seeds": [], "open_final_heldout": False, "write_handoff": False,
                  "next_action": NEXT_ACTIONS["reject"]}
assert terminal_decision({"comparable": True, "findings": []}, {2: gates(), 1: gates()})["decision"] == "accept"

# %% hidden exercise=terminal_decision points=1 name=accept_needs_every_seed
# hint: accept only when every seed qualifies; one failing seed makes it tune while another seed gains; only accept opens the final held-out set and writes the handoff.
def gates(*failed):
    rows = [{"name": n, "passed": n not in failed} for n in ("quality_gain", "retention", "format", "latency")]
    return {"gates": rows, "qualifies": not failed}
valid = {"comparable": True, "findings": []}
accepted = terminal_decision(valid, {7: gates()})
assert accepted == {"decision": "accept", "reasons": [], "qualifying_seeds": [7], "open_final_heldout": True,
                    "write_handoff": True, "next_action": NEXT_ACTIONS["accept"]}
tuned = terminal_decision(valid, {1: gates(), 2: gates(), 3: gates("latency")})
assert tuned["decision"] == "tune" and tuned["qualifying_seeds"] == [1, 2]
assert tuned["open_final_heldout"] is False and tuned["write_handoff"] is False

# %% hidden exercise=terminal_decision points=1 name=no_gain_anywhere_rejects
# hint: reject when no seed passed quality_gain, whatever else passed; a single seed with a gain (even failing other gates) makes it tune.
def gates(*failed):
    rows = [{"name": n, "passed": n not in failed} for n in ("quality_gain", "retention", "format", "latency")]
    return {"gates": rows, "qualifies": not failed}
valid = {"comparable": True, "findings": []}
rejected = terminal_decision(valid, {1: gates("quality_gain"), 2: gates("quality_gain")})
assert rejected["decision"] == "reject" and rejected["reasons"] == ["seed_1:quality_gain", "seed_2:quality_gain"]
assert rejected["next_action"] == NEXT_ACTIONS["reject"] and rejected["open_final_heldout"] is False
one_gain = terminal_decision(valid, {1: gates("quality_gain"), 2: gates("retention", "format", "latency")})
assert one_gain["decision"] == "tune" and one_gain["qualifying_seeds"] == []

# %% hidden exercise=terminal_decision points=1 name=reasons_by_seed_then_gate_order
# hint: seeds ascending (as numbers, not as text), and within a seed the gates in the fixed order, whatever order the dict and the gate lists arrive in.
def gates(*failed):
    rows = [{"name": n, "passed": n not in failed} for n in ("quality_gain", "retention", "format", "latency")]
    return {"gates": rows, "qualifies": not failed}
valid = {"comparable": True, "findings": []}
result = terminal_decision(valid, {10: gates("latency", "retention"), 9: gates("format"), 2: gates()})
assert result["reasons"] == ["seed_9:format", "seed_10:retention", "seed_10:latency"]
assert result["qualifying_seeds"] == [2] and result["decision"] == "tune"

# %% hidden exercise=terminal_decision points=1 name=wrong_terminal_decision_calls_raise_and_good_calls_do_not
# hint: comparable is consistent (comparable exactly when there is no finding, findings non-empty strs); seed_gates is a non-empty dict of int seeds (not bools), each a consistent deployment_gates result with the four gates in order.
def gates(*failed):
    rows = [{"name": n, "passed": n not in failed} for n in ("quality_gain", "retention", "format", "latency")]
    return {"gates": rows, "qualifies": not failed}
valid = {"comparable": True, "findings": []}
assert terminal_decision(valid, {1: gates()})["decision"] == "accept"
assert terminal_decision(valid, {1: gates("format")})["decision"] == "tune"
swapped = gates()
swapped["gates"] = swapped["gates"][::-1]
bad_calls = [(None, {1: gates()}), ({"comparable": True, "findings": ["x"]}, {1: gates()}),
             ({"comparable": False, "findings": []}, {1: gates()}), ({"comparable": 1, "findings": []}, {1: gates()}),
             ({"comparable": False, "findings": [""]}, {1: gates()}), ({"comparable": False, "findings": "x"}, {1: gates()}),
             (valid, {}), (valid, None), (valid, {True: gates()}), (valid, {"1": gates()}), (valid, {1: None}),
             (valid, {1: swapped}), (valid, {1: {"gates": gates()["gates"][:3], "qualifies": True}}),
             (valid, {1: {"gates": gates()["gates"], "qualifies": False}}),
             (valid, {1: {"gates": [dict(g, passed=1) for g in gates()["gates"]], "qualifies": True}}),
             (valid, [(1, gates())])]
for position, arguments in enumerate(bad_calls):
    try:
        terminal_decision(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {position} was accepted")

# %% hidden exercise=terminal_decision points=2 name=agrees_with_reference_on_generated_decisions
# hint: any comparability result and seeds' gates, valid or with one defect: the same decision, reasons, seeds and flags, or the same ValueError.
from tools.course.grader.clauses import each_of

NAMES = ("quality_gain", "retention", "format", "latency")
defects = [("valid", n) for n in range(50)] + [(kind, 0) for kind in (
    "all_pass", "no_gain", "incomparable_all_pass", "comparable_none", "inconsistent_true", "inconsistent_false",
    "blank_finding", "empty_seeds", "bool_seed", "str_seed", "result_none", "gates_reordered", "gate_missing",
    "passed_int", "qualifies_wrong", "qualifies_missing")]


def one_decision(defect, rng):
    kind, _ = defect
    seeds = rng.sample([1, 2, 3, 5, 10, 11], rng.randint(1, 4))
    findings = rng.sample(["tokenizer_family", "start:G1", "evaluation:G2"], rng.choice([0, 0, 0, 1, 2]))
    comparable = {"comparable": not findings, "findings": findings}
    seed_gates = {}
    for seed in seeds:
        rows = [{"name": n, "passed": rng.random() < 0.7} for n in NAMES]
        seed_gates[seed] = {"gates": rows, "qualifies": all(r["passed"] for r in rows)}
    if kind in ("all_pass", "incomparable_all_pass", "no_gain"):
        for result in seed_gates.values():
            for row in result["gates"]:
                row["passed"] = kind != "no_gain" or row["name"] != "quality_gain"
            result["qualifies"] = kind != "no_gain"
        comparable = {"comparable": kind != "incomparable_all_pass",
                      "findings": ["tokenizer_family"] if kind == "incomparable_all_pass" else []}
    elif kind == "comparable_none":
        comparable = None
    elif kind == "inconsistent_true":
        comparable = {"comparable": True, "findings": ["start:G0"]}
    elif kind == "inconsistent_false":
        comparable = {"comparable": False, "findings": []}
    elif kind == "blank_finding":
        comparable = {"comparable": False, "findings": [""]}
    elif kind == "empty_seeds":
        seed_gates = {}
    elif kind == "bool_seed":
        seed_gates[True] = seed_gates.pop(seeds[0])
    elif kind == "str_seed":
        seed_gates[str(seeds[0])] = seed_gates.pop(seeds[0])
    elif kind == "result_none":
        seed_gates[seeds[-1]] = None
    elif kind == "gates_reordered":
        seed_gates[seeds[0]]["gates"] = seed_gates[seeds[0]]["gates"][::-1]
    elif kind == "gate_missing":
        seed_gates[seeds[0]]["gates"] = seed_gates[seeds[0]]["gates"][:rng.choice([1, 2, 3])]
    elif kind == "passed_int":
        row = seed_gates[seeds[0]]["gates"][rng.randrange(4)]
        row["passed"] = int(row["passed"])
    elif kind == "qualifies_wrong":
        seed_gates[seeds[0]]["qualifies"] = not seed_gates[seeds[0]]["qualifies"]
    elif kind == "qualifies_missing":
        del seed_gates[seeds[0]]["qualifies"]
    return comparable, seed_gates


def decided(*call):
    """The reference's result (raises on an invalid call, so a valid clause never counts one)."""
    return reference("terminal_decision")(*call)


def fine_comparable(comparable):
    return isinstance(comparable, dict) and comparable.get("comparable") in (True, False) \
        and comparable["comparable"] != bool(comparable["findings"]) and "" not in comparable["findings"]


reference.agrees("terminal_decision", each_of(defects, one_decision, variants=4), cases=4 * len(defects), clauses={
    "accept": lambda *call: decided(*call)["decision"] == "accept",
    "tune": lambda *call: decided(*call)["decision"] == "tune",
    "reject for no gain anywhere": lambda c, g: decided(c, g)["decision"] == "reject" and c["comparable"],
    "reject for a comparison that is not valid": lambda c, g: decided(c, g)["decision"] == "reject" and not c["comparable"],
    "not comparable although every seed qualifies": lambda c, g: decided(c, g) and not c["comparable"] and all(
        r["qualifies"] for r in g.values()),
    "tune with some qualifying seed": lambda *call: decided(*call)["decision"] == "tune" and decided(*call)["qualifying_seeds"],
    "seeds not in ascending order": lambda c, g: decided(c, g) and list(g) != sorted(g) and len(decided(c, g)["reasons"]) > 1,
    "a seed of 10 beside a seed of 2 or 3 (numeric order)": lambda c, g: decided(c, g) and 10 in g and (2 in g or 3 in g),
    "comparable None": lambda c, g: c is None,
    "comparable with findings": lambda c, g: c == {"comparable": True, "findings": ["start:G0"]},
    "not comparable without findings": lambda c, g: c == {"comparable": False, "findings": []},
    "a blank finding": lambda c, g: isinstance(c, dict) and c.get("findings") == [""],
    "no seed": lambda c, g: fine_comparable(c) and g == {},
    "a bool seed": lambda c, g: fine_comparable(c) and True in [k for k in g if k is True],
    "a str seed": lambda c, g: fine_comparable(c) and any(isinstance(k, str) for k in g),
    "a result None": lambda c, g: fine_comparable(c) and None in g.values(),
    "gates in another order": lambda c, g: fine_comparable(c) and all(type(k) is int for k in g) and any(
        isinstance(r, dict) and [x["name"] for x in r["gates"]] == list(NAMES)[::-1] for r in g.values()),
    "a gate missing": lambda c, g: fine_comparable(c) and all(type(k) is int for k in g) and any(
        isinstance(r, dict) and len(r["gates"]) < 4 for r in g.values()),
    "a passed that is an int": lambda c, g: fine_comparable(c) and all(type(k) is int for k in g) and any(
        isinstance(r, dict) and any(type(x["passed"]) is int for x in r["gates"]) for r in g.values()),
    "qualifies that contradicts the gates": lambda c, g: fine_comparable(c) and all(type(k) is int for k in g) and any(
        isinstance(r, dict) and "qualifies" in r and [x["name"] for x in r["gates"]] == list(NAMES)
        and all(type(x["passed"]) is bool for x in r["gates"])
        and r["qualifies"] != all(x["passed"] for x in r["gates"]) for r in g.values()),
    "qualifies missing": lambda c, g: fine_comparable(c) and any(isinstance(r, dict) and "qualifies" not in r
                                                                  for r in g.values()),
})
