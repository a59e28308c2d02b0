# %% hidden exercise=stamp_generation points=1 name=content_hash_ignores_ids_key_order_and_extra_fields
# hint: the content hash covers only what the model learns from; it must not change with the sample's id, its other fields or the order of its keys.
def _canonical_sha(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")).hexdigest()
_template = "Compute {a} {symbol} {b}. Reply with the integer result only."
_one = stamp_generation([{"sample_id": "r1/mul-3", "prompt": "Compute 21 * 4. Reply with the integer result only.",
                          "response": "84", "task_id": "mul-3"}], "gen", _template, 3, "v1")
_two = stamp_generation([{"task_id": "other", "response": "84", "sample_id": "r2/zzz",
                          "prompt": "Compute 21 * 4. Reply with the integer result only."}], "gen", _template, 3, "v1")
assert _one["samples"][0]["content_sha256"] == _two["samples"][0]["content_sha256"]
assert _one["samples"][0]["content_sha256"] == _canonical_sha(
    {"prompt": "Compute 21 * 4. Reply with the integer result only.", "response": "84"})
assert _one["samples"][0]["task_id"] == "mul-3" and _two["samples"][0]["task_id"] == "other"
_three = stamp_generation([{"sample_id": "r3", "prompt": "Compute 21 * 4. Reply with the integer result only.",
                            "response": "85"}], "gen", _template, 3, "v1")
assert _three["samples"][0]["content_sha256"] != _one["samples"][0]["content_sha256"]

# %% hidden exercise=stamp_generation points=1 name=non_ascii_content_is_hashed_as_utf8
# hint: the canonical JSON keeps non-ASCII characters as they are (UTF-8), it does not escape them; the docstring gives the exact json.dumps arguments.
_prompt = "计算 12 + 30，只回复整数。"
_result = stamp_generation([{"sample_id": "zh-0", "prompt": _prompt, "response": "42"}],
                           "gen", "计算 {a} {symbol} {b}，只回复整数。", 0, "v1")
_expected = hashlib.sha256(json.dumps({"prompt": _prompt, "response": "42"}, sort_keys=True, separators=(",", ":"),
                                      ensure_ascii=False).encode("utf-8")).hexdigest()
assert _result["samples"][0]["content_sha256"] == _expected
assert _result["generation"]["template_sha256"] == hashlib.sha256("计算 {a} {symbol} {b}，只回复整数。".encode("utf-8")).hexdigest()

# %% hidden exercise=stamp_generation points=1 name=every_identity_field_changes_the_generation_id
# hint: the generation id must change when any one of generator, template, seed or version changes, and only the id, never a content hash.
_samples = [{"sample_id": "x", "prompt": "Compute 3 + 4. Reply with the integer result only.", "response": "7"}]
_base = stamp_generation(_samples, "gen", "T {a} {symbol} {b}", 5, "v1")
_variants = [
    stamp_generation(_samples, "gen2", "T {a} {symbol} {b}", 5, "v1"),
    stamp_generation(_samples, "gen", "T {a} {symbol} {b}.", 5, "v1"),
    stamp_generation(_samples, "gen", "T {a} {symbol} {b}", 6, "v1"),
    stamp_generation(_samples, "gen", "T {a} {symbol} {b}", 5, "v2"),
]
_ids = {_base["generation"]["generation_id"]} | {v["generation"]["generation_id"] for v in _variants}
assert len(_ids) == 5
assert all(v["samples"][0]["content_sha256"] == _base["samples"][0]["content_sha256"] for v in _variants)
assert _base["generation"]["seed"] == 5 and _base["generation"]["generator"] == "gen" and _base["generation"]["version"] == "v1"
_again = stamp_generation(_samples, "gen", "T {a} {symbol} {b}", 5, "v1")
assert _again["generation"] == _base["generation"]

# %% hidden exercise=stamp_generation points=1 name=invalid_identity_and_samples_are_refused
# hint: check every identity field and every sample before hashing: seeds are non-negative ints (not bools, not strings), prompts are not blank, responses are text or None.
_good = {"sample_id": "ok", "prompt": "Compute 1 + 2.", "response": "3"}
_cases = [
    ([_good], "", "T", 1, "v1"),
    ([_good], "gen", "", 1, "v1"),
    ([_good], "gen", "T", 1, " "),
    ([_good], "gen", "T", -1, "v1"),
    ([_good], "gen", "T", "1", "v1"),
    ([_good], "gen", "T", False, "v1"),
    ([{"sample_id": "a", "prompt": "Compute 1 + 2."}], "gen", "T", 1, "v1"),
    ([{"sample_id": "a", "prompt": "   ", "response": "3"}], "gen", "T", 1, "v1"),
    ([{"sample_id": "a", "prompt": "Compute 1 + 2.", "response": 3}], "gen", "T", 1, "v1"),
    ([{"sample_id": "", "prompt": "Compute 1 + 2.", "response": "3"}], "gen", "T", 1, "v1"),
    (["not a dict"], "gen", "T", 1, "v1"),
]
_valid = stamp_generation([_good, dict(_good, sample_id="ok2", response=None)], "gen", "T", 0, "v1")  # the call each case breaks
assert [_sample["sample_id"] for _sample in _valid["samples"]] == ["ok", "ok2"] and _valid["generation"]["seed"] == 0
assert _valid["samples"][0]["content_sha256"] != _valid["samples"][1]["content_sha256"], _valid
for _case in _cases:
    try:
        stamp_generation(*_case)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_case!r}")

# %% hidden exercise=stamp_generation points=1 name=one_sample_one_generation_and_inputs_untouched
# hint: a sample already stamped by a different generation must be refused, re-stamping with the same identity is fine, and the caller's dicts never change.
_first = stamp_generation([{"sample_id": "a", "prompt": "Compute 1 + 2.", "response": "3"}], "gen", "T", 1, "v1")
_stamped = _first["samples"][0]
_snapshot = dict(_stamped)
_same = stamp_generation([_stamped], "gen", "T", 1, "v1")
assert _same["samples"][0]["generation_id"] == _snapshot["generation_id"]
try:
    stamp_generation([_stamped], "gen", "T", 2, "v1")
except ValueError:
    pass
else:
    raise AssertionError("a sample of another generation was re-stamped")
assert _stamped == _snapshot
_empty = stamp_generation([], "gen", "T", 1, "v1")
assert _empty["samples"] == [] and _empty["generation"]["generation_id"] == _first["generation"]["generation_id"]

# %% hidden exercise=screen_overlap points=1 name=whitespace_case_and_fullwidth_variants_share_a_key
# hint: after NFKC, casefold and whitespace folding, tabs, newlines, non-breaking and ideographic spaces, capitals and full-width punctuation all disappear as differences.
_samples = [
    {"sample_id": "p0", "prompt": "Compute 40 - 3. Reply with the integer result only."},
    {"sample_id": "p1", "prompt": "\tCOMPUTE 40 - 3.\nReply with the integer result only.  "},
    {"sample_id": "p2", "prompt": "compute\u00a040\u00a0-\u00a03．\u3000Reply with the integer result only．"},
    {"sample_id": "p3", "prompt": "Compute ４０ － ３. Reply with the integer result only."},
    {"sample_id": "p4", "prompt": "Compute 40 - 4. Reply with the integer result only."},
]
_report = screen_overlap(_samples, ["Compute 99 + 1. Reply with the integer result only."])
assert _report["kept"] == ["p0", "p4"]
assert _report["duplicates"] == {"p1": "p0", "p2": "p0", "p3": "p0"}
assert _report["contaminated"] == [] and _report["eval_hits"] == []

# %% hidden exercise=screen_overlap points=1 name=casefold_and_nfkc_fold_sharp_s_and_ligatures
# hint: the key uses casefold(), which is stronger than lower() (ß and SS fold together), after NFKC, which splits ligatures such as ﬁ into plain letters.
_samples = [{"sample_id": "g1", "prompt": "Straße 12 + 30"}, {"sample_id": "g2", "prompt": "STRASSE 12 + 30"},
            {"sample_id": "l1", "prompt": "ﬁnd 6 * 7"}, {"sample_id": "l2", "prompt": "FIND 6 * 7"},
            {"sample_id": "w1", "prompt": "ｆｉｎｄ ６ ＊ ７"}]
_report = screen_overlap(_samples, ["strasse 12 + 31"])
assert _report["kept"] == ["g1", "l1"]
assert _report["duplicates"] == {"g2": "g1", "l2": "l1", "w1": "l1"}
assert screen_overlap(_samples[:2], ["STRASSE 12 + 30"])["contaminated"] == ["g1", "g2"]

# %% hidden exercise=screen_overlap points=1 name=every_copy_of_an_evaluation_prompt_is_contaminated
# hint: contamination is decided before duplication and for every copy; a repeated evaluation prompt never turns into a duplicate, and it does not become the first kept copy either.
_eval = ["Compute 25 + 68. Reply with the integer result only.", "Compute 84 - 43. Reply with the integer result only."]
_samples = [
    {"sample_id": "e1", "prompt": "compute 84 - 43. reply with the integer result only."},
    {"sample_id": "e2", "prompt": "Compute 84 - 43. Reply with the integer result only."},
    {"sample_id": "k1", "prompt": "Compute 84 - 42. Reply with the integer result only."},
    {"sample_id": "e3", "prompt": "COMPUTE 84 - 43. REPLY WITH THE INTEGER RESULT ONLY."},
]
_report = screen_overlap(_samples, _eval)
assert _report["contaminated"] == ["e1", "e2", "e3"]
assert _report["duplicates"] == {} and _report["kept"] == ["k1"]
assert _report["eval_hits"] == [1]
assert _report["counts"] == {"input": 4, "kept": 1, "duplicate": 0, "contaminated": 3}

# %% hidden exercise=screen_overlap points=1 name=duplicates_point_at_the_first_kept_copy_in_order
# hint: keep the first occurrence in input order; every later copy, however many, points at that first kept sample, and the kept list keeps the input order.
_samples = [
    {"sample_id": "z", "prompt": "Compute 5 * 9."},
    {"sample_id": "y", "prompt": "Compute 6 * 9."},
    {"sample_id": "x", "prompt": "compute 5 * 9."},
    {"sample_id": "w", "prompt": "COMPUTE 5 * 9. "},
    {"sample_id": "v", "prompt": "Compute 6 *  9."},
    {"sample_id": "u", "prompt": "Compute 7 * 9."},
]
_report = screen_overlap(_samples, [])
assert _report["kept"] == ["z", "y", "u"]
assert _report["duplicates"] == {"x": "z", "w": "z", "v": "y"}
assert _report["counts"] == {"input": 6, "kept": 3, "duplicate": 3, "contaminated": 0}

# %% hidden exercise=screen_overlap points=1 name=eval_hits_list_every_matching_evaluation_index
# hint: report the indices of all evaluation prompts that some sample matched, sorted and without repeats, including evaluation prompts that normalise to the same key.
_eval = ["Compute 1 + 1.", "Compute 2 + 2.", "compute 1 + 1.", "Compute 3 + 3."]
_samples = [{"sample_id": "a", "prompt": "Compute 3 + 3."}, {"sample_id": "b", "prompt": "COMPUTE 1 + 1."},
            {"sample_id": "c", "prompt": "Compute 3 + 3."}]
_report = screen_overlap(_samples, _eval)
assert _report["eval_hits"] == [0, 2, 3]
assert _report["contaminated"] == ["a", "b", "c"]
_clean = screen_overlap([], _eval)
assert _clean == {"kept": [], "duplicates": {}, "contaminated": [], "eval_hits": [],
                  "counts": {"input": 0, "kept": 0, "duplicate": 0, "contaminated": 0}}

# %% hidden exercise=screen_overlap points=1 name=reworded_problems_are_not_textual_matches
# hint: the rule is an exact match of normalised text; a reworded question or a prompt that merely contains an evaluation prompt is not a match.
_eval = ["Compute 12 + 30. Reply with the integer result only."]
_samples = [
    {"sample_id": "r1", "prompt": "What is 12 + 30?"},
    {"sample_id": "r2", "prompt": "Compute 12 + 30. Reply with the integer result only. Then explain."},
    {"sample_id": "r3", "prompt": "Compute 12 + 3. Reply with the integer result only."},
    {"sample_id": "r4", "prompt": "Compute 1 2 + 30. Reply with the integer result only."},
]
_report = screen_overlap(_samples, _eval)
assert _report["contaminated"] == [] and _report["kept"] == ["r1", "r2", "r3", "r4"]

# %% hidden exercise=screen_overlap points=1 name=invalid_prompts_and_ids_are_refused
# hint: validate before screening: every sample needs its own non-empty id, and a prompt or evaluation prompt must be text that is not empty after normalisation.
_cases = [
    ([{"sample_id": "a", "prompt": None}], []),
    ([{"sample_id": "a", "prompt": " \u3000\n"}], []),
    ([{"prompt": "Compute 1 + 1."}], []),
    ([{"sample_id": "a", "prompt": "Compute 1 + 1."}], [""]),
    ([{"sample_id": "a", "prompt": "Compute 1 + 1."}], [42]),
    ([{"sample_id": "a", "prompt": "Compute 1 + 1."}, {"sample_id": "a", "prompt": "Compute 2 + 2."}], []),
]
_valid = screen_overlap([{"sample_id": "a", "prompt": "Compute 1 + 1."}, {"sample_id": "b", "prompt": "Compute 2 + 2."}],
                        ["compute 2 + 2."])  # the valid call every case above breaks in one place
assert _valid["kept"] == ["a"] and _valid["contaminated"] == ["b"] and _valid["eval_hits"] == [0], _valid
for _samples, _eval in _cases:
    try:
        screen_overlap(_samples, _eval)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_samples!r}, {_eval!r}")

# %% hidden exercise=admit_by_verifier points=1 name=only_a_whole_integer_is_an_answer
# hint: use the course's parse rule: the whole stripped response is one integer, optionally signed; anything else (extra words, decimals, spaces inside, empty, None) is not an integer answer.
_labels = {"a": 42, "b": -7, "c": 42, "d": 42, "e": 42, "f": 42, "g": 42, "h": 5}
_samples = [{"sample_id": "a", "response": "+42"}, {"sample_id": "b", "response": "  -7 "},
            {"sample_id": "c", "response": "42.0"}, {"sample_id": "d", "response": "The answer is 42"},
            {"sample_id": "e", "response": "4 2"}, {"sample_id": "f", "response": ""},
            {"sample_id": "g", "response": None}, {"sample_id": "h", "response": "answer: 5"}]
_report = admit_by_verifier(_samples, _labels, 0.0, 1.0)
assert _report["admitted"] == ["a", "b"]
assert _report["rejected"] == {"c": "not_integer", "d": "not_integer", "e": "not_integer", "f": "not_integer",
                               "g": "not_integer", "h": "not_integer"}
assert _report["counts"] == {"total": 8, "admitted": 2, "no_label": 0, "not_integer": 6, "wrong_answer": 0}

# %% hidden exercise=admit_by_verifier points=1 name=first_reason_wins_and_every_count_is_reported
# hint: a sample gets only the first matching reason in the documented order, and the counts always carry all five keys.
_labels = {"k1": 10, "k2": 11}
_samples = [{"sample_id": "m1", "response": "oops"}, {"sample_id": "m2", "response": "3"},
            {"sample_id": "k1", "response": "10"}, {"sample_id": "k2", "response": "12"}]
_report = admit_by_verifier(_samples, _labels, 0.0, 1.0)
assert _report["rejected"] == {"m1": "no_label", "m2": "no_label", "k2": "wrong_answer"}
assert _report["counts"] == {"total": 4, "admitted": 1, "no_label": 2, "not_integer": 0, "wrong_answer": 1}
assert _report["pass_rate"] == 0.25 and _report["wrong_rate"] == 0.25
_clean = admit_by_verifier([{"sample_id": "k1", "response": "10"}], _labels)
assert _clean["counts"] == {"total": 1, "admitted": 1, "no_label": 0, "not_integer": 0, "wrong_answer": 0}
assert _clean["decision"] == "accept" and _clean["reasons"] == [] and _clean["rejected"] == {}

# %% hidden exercise=admit_by_verifier points=1 name=reject_lists_every_hard_failure_and_outranks_tune
# hint: collect all hard failures in their documented order before deciding; when any exists the decision is reject and the tuning pressure is not listed.
_labels = {f"s{i}": i for i in range(10)}
_samples = [{"sample_id": f"s{i}", "response": str(i + 1)} for i in range(5)]
_samples += [{"sample_id": "ghost", "response": "1"}]
_report = admit_by_verifier(_samples, _labels)
assert _report["decision"] == "reject"
assert _report["reasons"] == ["unverifiable", "wrong_rate_above_max"]
_wrong_only = admit_by_verifier([{"sample_id": "s1", "response": "1"}, {"sample_id": "s2", "response": "3"}], _labels)
assert _wrong_only["decision"] == "reject" and _wrong_only["reasons"] == ["wrong_rate_above_max"]

# %% hidden exercise=admit_by_verifier points=1 name=empty_batch_is_rejected_without_rates
# hint: with no sample there is no rate to report (not zero) and nothing to admit; say why the batch cannot be accepted.
_report = admit_by_verifier([], {"a": 1})
assert _report["decision"] == "reject" and _report["reasons"] == ["empty_batch"]
assert _report["pass_rate"] is None and _report["wrong_rate"] is None
assert _report["counts"] == {"total": 0, "admitted": 0, "no_label": 0, "not_integer": 0, "wrong_answer": 0}
assert _report["admitted"] == [] and _report["rejected"] == {}

# %% hidden exercise=admit_by_verifier points=1 name=thresholds_are_inclusive_and_just_below_tunes
# hint: a pass rate equal to the minimum passes, one just below it asks for tuning; a wrong rate equal to the maximum passes, one just above rejects.
_labels = {f"t{i}": i for i in range(10)}
_nine = [{"sample_id": f"t{i}", "response": str(i)} for i in range(9)] + [{"sample_id": "t9", "response": "nine"}]
assert admit_by_verifier(_nine, _labels, min_pass_rate=0.9)["decision"] == "accept"
_below = admit_by_verifier(_nine, _labels, min_pass_rate=0.91)
assert _below["decision"] == "tune" and _below["reasons"] == ["pass_rate_below_min"]
_one_wrong = [{"sample_id": f"t{i}", "response": str(i)} for i in range(9)] + [{"sample_id": "t9", "response": "8"}]
assert admit_by_verifier(_one_wrong, _labels, min_pass_rate=0.9, max_wrong_rate=0.1)["decision"] == "accept"
assert admit_by_verifier(_one_wrong, _labels, min_pass_rate=0.9, max_wrong_rate=0.09)["reasons"] == ["wrong_rate_above_max"]

# %% hidden exercise=admit_by_verifier points=1 name=invalid_thresholds_labels_and_samples_are_refused
# hint: thresholds are finite numbers in [0, 1]; labels are ints (a bool is not a label); every sample needs its own id and a text or None response.
_ok = [{"sample_id": "a", "response": "1"}]
_cases = [
    (_ok, {"a": 1}, float("nan"), 0.05),
    (_ok, {"a": 1}, 0.9, -0.1),
    (_ok, {"a": 1}, True, 0.05),
    (_ok, {"a": True}, 0.9, 0.05),
    (_ok, {"a": "1"}, 0.9, 0.05),
    (_ok, {"a": 1.0}, 0.9, 0.05),
    ([{"sample_id": "a", "response": 1}], {"a": 1}, 0.9, 0.05),
    ([{"response": "1"}], {"a": 1}, 0.9, 0.05),
    (_ok + _ok, {"a": 1}, 0.9, 0.05),
    (_ok, {"a": 1, "unused": True}, 0.9, 0.05),
]
_valid = admit_by_verifier(_ok + [{"sample_id": "b", "response": "2"}], {"a": 1, "b": 3}, 0.5, 0.5)  # the call each case breaks
assert _valid["decision"] == "accept" and _valid["wrong_rate"] == 0.5 and _valid["admitted"] == ["a"], _valid
for _samples, _labels, _min_pass, _max_wrong in _cases:
    try:
        admit_by_verifier(_samples, _labels, _min_pass, _max_wrong)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_samples!r}, {_labels!r}, {_min_pass!r}, {_max_wrong!r}")

# %% hidden exercise=stamp_generation points=1 name=generated_valid_batches_stamp_as_the_reference
# hint: on any valid batch (non-ASCII, full-width and ligature text, tabs and newlines, None responses, extra keys, large seeds) the identity, every content hash and the copied samples are exactly the reference's, and the caller's samples are untouched.
from hypothesis import strategies as st
_texts = st.one_of(st.sampled_from(["Compute 12 + 30.", "计算 12 + 30，只回复整数。", "Ｃｏｍｐｕｔｅ １２ ＋ ３０", "ﬁnd 7 * 6",
                                    "tab\there\nnew line", "Straße", " padded ", "\u00a0nbsp\u3000", "42"]),
                   st.text(min_size=1, max_size=8).filter(lambda text: text.strip()))
_sample = st.fixed_dictionaries({"sample_id": st.sampled_from(["a", "b", "job/c", "样本-d", "e"]), "prompt": _texts,
                                 "response": st.one_of(st.none(), st.text(max_size=6), _texts)},
                                optional={"task_id": st.text(max_size=4), "generation_id": st.none(),
                                          "content_sha256": st.just("stale")})
_batch = st.lists(_sample, max_size=5, unique_by=lambda sample: sample["sample_id"])
_name = st.sampled_from(["gen", "tools.data.arithmetic.generate_tasks", "生成器 v2", " spaced "])
reference.agrees("stamp_generation", st.tuples(_batch, _name, _texts, st.integers(0, 2**63), _name), cases=120, clauses={
    "no sample": lambda samples, *rest: samples == [],
    "a None response": lambda samples, *rest: any(s["response"] is None for s in samples),
    "non-ASCII text": lambda samples, *rest: any(not s["prompt"].isascii() for s in samples),
    "a sample already carrying generation_id None": lambda samples, *rest: any("generation_id" in s for s in samples),
    "a stale content_sha256 to replace": lambda samples, *rest: any("content_sha256" in s for s in samples),
    "an extra key kept": lambda samples, *rest: any("task_id" in s for s in samples),
    "a seed above 2**32": lambda samples, generator, template, seed, version: seed > 2**32,
    "a seed of 0": lambda samples, generator, template, seed, version: seed == 0,
    "names with outer spaces": lambda samples, generator, template, seed, version: generator != generator.strip(),
})

# %% hidden exercise=stamp_generation points=1 name=generated_invalid_stamping_raises_as_the_reference
# hint: every argument is checked, in every position and every sample: blank or non-text names, bool, float, string or negative seeds, non-list batches, non-dict samples, missing keys, empty or repeated ids, blank prompts, non-text responses, a foreign generation id; each gives a ValueError, never another exception or a result.
from hypothesis import strategies as st
_good_text = st.sampled_from(["Compute 1 + 2.", "ＡＢＣ", "x"])
_bad_text = st.sampled_from(["", " ", "\t\n", "\u3000", None, 0, 1.5, True, b"gen", ["gen"]])
_maybe_text = st.one_of(_good_text, _good_text, _bad_text)
_sample = st.fixed_dictionaries({}, optional={
    "sample_id": st.one_of(st.sampled_from(["a", "b", "a"]), st.sampled_from(["", None, 3, True, ("a",)])),
    "prompt": _maybe_text,
    "response": st.one_of(st.none(), _good_text, st.sampled_from([42, 4.2, b"42", ["42"], False])),
    "generation_id": st.sampled_from([None, "0" * 64, "foreign"]),
})
_item = st.one_of(_sample, _sample, _sample, st.none(), st.integers(), st.text(max_size=2))
_samples = st.one_of(st.lists(_item, max_size=4), st.tuples(_sample), st.none(), st.text(max_size=3),
                     st.dictionaries(st.text(max_size=2), _good_text, max_size=2))
_seed = st.one_of(st.integers(-3, 3), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                  st.sampled_from(["7", None, 2.0]))
from tools.course.grader.clauses import below, dicts, is_blank, is_bool, not_a_str


def _bad_name(value):
    return not_a_str(value) or is_blank(value)


def _with(samples, test):
    return any(test(sample) for sample in dicts(samples))


_ids = lambda samples: [s["sample_id"] for s in dicts(samples) if "sample_id" in s]  # noqa: E731
reference.agrees("stamp_generation", st.tuples(_samples, _maybe_text, _maybe_text, _seed, _maybe_text), cases=250, clauses={
    "a bad generator": lambda s, g, t, seed, v: _bad_name(g),
    "a bad template": lambda s, g, t, seed, v: _bad_name(t),
    "a bad version": lambda s, g, t, seed, v: _bad_name(v),
    "a seed that is a bool": lambda s, g, t, seed, v: is_bool(seed),
    "a seed that is a float": lambda s, g, t, seed, v: isinstance(seed, float),
    "a negative seed": lambda s, g, t, seed, v: below(seed, 0),
    "a seed that is a str or None": lambda s, g, t, seed, v: seed is None or isinstance(seed, str),
    "samples that is a tuple": lambda s, *rest: isinstance(s, tuple),
    "samples that is not a list or tuple": lambda s, *rest: not isinstance(s, (list, tuple)),
    "a sample that is not a dict": lambda s, *rest: isinstance(s, list) and any(not isinstance(x, dict) for x in s),
    **{f"a sample without {key}": (lambda key: lambda s, *rest: _with(s, lambda x: key not in x))(key)
       for key in ("sample_id", "prompt", "response")},
    "an empty or non-str sample_id": lambda s, *rest: _with(s, lambda x: "sample_id" in x and (
        not_a_str(x["sample_id"]) or x["sample_id"] == "")),
    "a repeated sample_id": lambda s, *rest: len(_ids(s)) > len(set(map(repr, _ids(s)))),
    "a blank prompt": lambda s, *rest: _with(s, lambda x: is_blank(x.get("prompt", "x"))),
    "a prompt that is not a str": lambda s, *rest: _with(s, lambda x: "prompt" in x and not_a_str(x["prompt"])),
    "a response that is neither str nor None": lambda s, *rest: _with(s, lambda x: x.get("response") is not None and not_a_str(
        x["response"])),
    "a foreign generation_id": lambda s, *rest: _with(s, lambda x: x.get("generation_id") not in (None,)),
})

# %% hidden exercise=screen_overlap points=1 name=generated_valid_batches_screen_as_the_reference
# hint: on any valid batch of prompt variants (full-width letters and digits, ligatures, ß, tabs, newlines, non-breaking and ideographic spaces, case) against any evaluation list, the kept list, the duplicate map, the contaminated list, the evaluation hits and the counts are exactly the reference's.
from hypothesis import strategies as st
_families = [
    ["Compute 12 + 30.", "compute 12 + 30.", "COMPUTE １２ ＋ ３０．", "Compute\t12 + 30.\n", "Compute 12\u00a0+\u300030.",
     "Ｃｏｍｐｕｔｅ 12 + 30.", "What is 12 + 30?", "Compute 12 + 3.", "Compute\r12 +\x0b30.\x0c", "Compute 12\u2028+ 30.",
     "𝐂ompute 12 + 30.", "ℂompute 12 + 30."],
    ["ﬁnd 6 * 7", "find 6 * 7", "FIND 6 * 7", "Find 6 *\n7", "ｆｉｎｄ ６ ＊ ７"],
    ["Straße 5 - 2", "STRASSE 5 - 2", "strasse 5 - 2", "straße 5  -  2", "Strasse 5 - 2 "],
]
_batch = st.sampled_from(_families).flatmap(lambda family: st.tuples(
    st.lists(st.one_of(st.sampled_from(family), st.sampled_from(family), st.text(max_size=4).filter(str.split)),
             max_size=7).map(lambda prompts: [{"sample_id": f"s{index}", "prompt": prompt, "note": index}
                                              for index, prompt in enumerate(prompts)]),
    st.lists(st.sampled_from(family), max_size=3)))
import unicodedata


def _key(text):
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _prompts(samples, evals):
    return [s["prompt"] for s in samples] + list(evals)


reference.agrees("screen_overlap", _batch, cases=200, clauses={
    "whitespace that is not a space, tab or newline (and that NFKC keeps)": lambda samples, evals: any(
        c in p for p in _prompts(samples, evals) for c in "\r\x0b\x0c\u2028"),
    "a letter NFKC turns into a capital": lambda samples, evals: any(c in p for p in _prompts(samples, evals) for c in "𝐂ℂ"),
    "a space NFKC folds (non-breaking, ideographic)": lambda samples, evals: any(
        c in p for p in _prompts(samples, evals) for c in "\u00a0\u3000"),
    "ß or a ligature": lambda samples, evals: any(c in p for p in _prompts(samples, evals) for c in "ßﬁ"),
    "a contaminated sample": lambda samples, evals: any(_key(s["prompt"]) in map(_key, evals) for s in samples),
    "a duplicate of a kept sample": lambda samples, evals: len({_key(s["prompt"]) for s in samples}) < len(samples),
    "a repeated evaluation prompt": lambda samples, evals: len(set(map(_key, evals))) < len(evals),
    "no evaluation prompt": lambda samples, evals: evals == [],
})

# %% hidden exercise=screen_overlap points=1 name=generated_invalid_screening_raises_as_the_reference
# hint: both arguments are checked before screening: non-list batches or evaluation lists (a single string is not a list), non-dict samples, missing, empty, non-text or repeated ids, missing or non-text prompts, and prompts or evaluation prompts that are empty after normalisation each give a ValueError.
from hypothesis import strategies as st
_good = st.sampled_from(["Compute 1 + 2.", "compute 1 + 2.", "Ｃｏｍｐｕｔｅ 3"])
_bad = st.sampled_from(["", " ", "\t\n", "\u3000\u00a0", None, 7, 1.0, True, b"x"])
_sample = st.fixed_dictionaries({}, optional={
    "sample_id": st.one_of(st.sampled_from(["a", "b", "c", "a"]), st.sampled_from(["", None, 0, False])),
    "prompt": st.one_of(_good, _good, _bad)})
_samples = st.one_of(st.lists(st.one_of(_sample, _sample, _sample, st.none(), st.just("a")), max_size=4),
                     st.tuples(_sample), st.none(), st.just("Compute 1 + 2."))
_evals = st.one_of(st.lists(st.one_of(_good, _good, _bad), max_size=3), st.none(), st.just("Compute 1 + 2."),
                   st.tuples(_good))
import unicodedata

from tools.course.grader.clauses import dicts, is_blank, not_a_str


def _repeated(ids):
    named = [identity for identity in ids if isinstance(identity, str) and identity]
    return len(named) > len(set(named))


def _empty_key(text):
    return isinstance(text, str) and not " ".join(unicodedata.normalize("NFKC", text).casefold().split())


reference.agrees("screen_overlap", st.tuples(_samples, _evals), cases=250, clauses={
    "samples not a list": lambda samples, evals: not isinstance(samples, list),
    "samples a single str": lambda samples, evals: isinstance(samples, str),
    "eval_prompts not a list": lambda samples, evals: not isinstance(evals, list),
    "a sample that is not a dict": lambda samples, evals: isinstance(samples, list) and any(
        not isinstance(s, dict) for s in samples),
    "a missing sample_id": lambda samples, evals: any("sample_id" not in s for s in dicts(samples)),
    "an empty or non-str sample_id": lambda samples, evals: any(
        "sample_id" in s and (not_a_str(s["sample_id"]) or s["sample_id"] == "") for s in dicts(samples)),
    "a repeated sample_id": lambda samples, evals: _repeated([s.get("sample_id") for s in dicts(samples)]),
    "a missing prompt": lambda samples, evals: any("prompt" not in s for s in dicts(samples)),
    "a prompt that is not a str": lambda samples, evals: any("prompt" in s and not_a_str(s["prompt"]) for s in dicts(samples)),
    "a prompt whose key is empty": lambda samples, evals: any(_empty_key(s.get("prompt")) for s in dicts(samples)),
    "a prompt that only NFKC makes empty": lambda samples, evals: any(
        isinstance(s.get("prompt"), str) and "\u3000" in s["prompt"] for s in dicts(samples)),
    "an evaluation prompt that is not a str": lambda samples, evals: isinstance(evals, list) and any(
        not_a_str(e) for e in evals),
    "an evaluation prompt whose key is empty": lambda samples, evals: isinstance(evals, list) and any(
        _empty_key(e) for e in evals),
})

# %% hidden exercise=admit_by_verifier points=1 name=generated_valid_batches_admit_as_the_reference
# hint: on any valid batch (answers with signs, spaces, newlines, full-width digits, words, decimals, empty or missing, samples without labels, thresholds at 0, 1 and exactly at a rate) the decision, every reason, the counts, both rates (floats, or None) and the admitted and rejected samples are exactly the reference's.
import unicodedata

from hypothesis import strategies as st


def _answer_forms(label):
    digits = str(label).translate(str.maketrans("0123456789", "０１２３４５６７８９"))
    return [str(label), f" {label}\n", f"+{label}" if label >= 0 else str(label), str(label + 1), digits,
            f"The answer is {label}.", f"{label}.0", "", None, "\t", f"{label} {label}", "missing"]


def _batch(labels_drawn, labelled, forms, extra, min_pass, max_wrong):
    labels = {f"s{index}": label for index, (label, keep) in enumerate(zip(labels_drawn, labelled)) if keep}
    samples = []
    for index, (label, form) in enumerate(zip(labels_drawn, forms)):
        response = _answer_forms(label)[form]
        samples.append({"sample_id": f"s{index}"} if response == "missing" else {"sample_id": f"s{index}", "response": response})
    return samples, {**extra, **labels}, min_pass, max_wrong


_rates = st.one_of(st.sampled_from([0, 1, 0.0, 1.0, 0.05, 0.9, 0.25, 0.5, 0.75, 1 / 3, 2 / 3, 0.2, 0.8]), st.floats(0, 1))
_batches = st.integers(0, 6).flatmap(lambda size: st.tuples(
    st.lists(st.integers(-120, 120), min_size=size, max_size=size),
    st.lists(st.sampled_from([True, True, True, True, False]), min_size=size, max_size=size),
    st.lists(st.integers(0, 11), min_size=size, max_size=size),
    st.dictionaries(st.sampled_from(["unused", "z"]), st.integers(-3, 3), max_size=2),
    _rates, _rates).map(lambda drawn: _batch(*drawn)))
def _parsed(response, label):
    return response is not None and response.strip().lstrip("+-").isdigit() and response.strip().isascii() and int(
        response.strip()) == label


reference.agrees("admit_by_verifier", _batches, cases=200, clauses={
    "no sample": lambda samples, labels, *rates: samples == [],
    "a sample without a label": lambda samples, labels, *rates: any(s["sample_id"] not in labels for s in samples),
    "a missing response key": lambda samples, labels, *rates: any("response" not in s for s in samples),
    "a full-width digit answer": lambda samples, labels, *rates: any(
        isinstance(s.get("response"), str) and any(unicodedata.east_asian_width(c) == "F" for c in s["response"])
        for s in samples),
    "an answer with a sign": lambda samples, labels, *rates: any(
        isinstance(s.get("response"), str) and s["response"].startswith("+") for s in samples),
    "a label for an id no sample uses": lambda samples, labels, *rates: bool(set(labels) - {s["sample_id"] for s in samples}),
    "a pass rate exactly at min_pass_rate": lambda samples, labels, low, high: bool(samples) and sum(
        _parsed(s.get("response"), labels.get(s["sample_id"])) for s in samples) / len(samples) == low,
    "a threshold of 0 or 1": lambda samples, labels, low, high: low in (0, 1) or high in (0, 1),
})

# %% hidden exercise=admit_by_verifier points=1 name=generated_invalid_admission_raises_as_the_reference
# hint: every argument is checked before any verification: thresholds that are NaN, infinite, outside [0, 1], bools or text; non-list batches; non-dict labels and any label value that is not an int (bools included, even for unused ids); non-dict samples, missing, empty or repeated ids, non-text responses.
from hypothesis import strategies as st
_rate = st.one_of(st.sampled_from([0.5, 0, 1]), st.sampled_from([float("nan"), float("inf"), -0.1, 1.5, True, False, "0.5", None]))
_sample = st.fixed_dictionaries({}, optional={
    "sample_id": st.one_of(st.sampled_from(["a", "b", "a"]), st.sampled_from(["", None, 1, True])),
    "response": st.one_of(st.sampled_from(["1", None, "x"]), st.sampled_from([1, 1.0, b"1", ["1"]]))})
_samples = st.one_of(st.lists(st.one_of(_sample, _sample, _sample, st.none(), st.just("a")), max_size=4),
                     st.tuples(_sample), st.none(), st.just("a"),
                     st.permutations([{"sample_id": "a", "response": "1"}, {"sample_id": "b", "response": None},
                                      {"sample_id": "a", "response": "2"}]))  # a repeated id among valid samples
_unused_bad_label = st.tuples(st.just([{"sample_id": "a", "response": "1"}, {"sample_id": "b", "response": " 2"}]),
                              st.sampled_from([{"a": 1, "b": 2, "unused": True}, {"a": 1, "z": "3", "b": 2},
                                               {"a": 1, "b": 2, "z": 1.0}, {"a": 1, "b": 2, "z": None}]),
                              st.just(0.5), st.just(0.5))  # the only defect: a label no sample uses
_label = st.one_of(st.integers(-2, 2), st.integers(-2, 2), st.sampled_from([True, False, 1.0, "1", None, float("nan")]))
_labels = st.one_of(st.dictionaries(st.sampled_from(["a", "b", "unused"]), _label, max_size=3), st.none(),
                    st.lists(st.tuples(st.just("a"), st.integers(0, 2)), max_size=2))
from tools.course.grader.clauses import below, dicts, is_bool, not_a_number, not_a_str, not_finite, values


def _repeated(ids):
    named = [identity for identity in ids if isinstance(identity, str) and identity]
    return len(named) > len(set(named))


def _bad_rate(value):
    return is_bool(value) or not_a_number(value) or not_finite(value) or not 0 <= value <= 1


reference.agrees("admit_by_verifier", st.one_of(st.tuples(_samples, _labels, _rate, _rate), _unused_bad_label), cases=250,
                 clauses={
    "a min_pass_rate outside [0, 1], not finite, a bool or not a number": lambda s, l, low, high: _bad_rate(low),
    "a max_wrong_rate outside [0, 1], not finite, a bool or not a number": lambda s, l, low, high: _bad_rate(high),
    "a threshold that is a bool": lambda s, l, low, high: is_bool(low) or is_bool(high),
    "samples not a list": lambda s, l, *rates: not isinstance(s, list),
    "labels not a dict": lambda s, l, *rates: not isinstance(l, dict),
    "a label that is a bool": lambda s, l, *rates: any(is_bool(v) for v in values(l) if isinstance(l, dict)),
    "a label that is not an int": lambda s, l, *rates: isinstance(l, dict) and any(
        not isinstance(v, int) for v in l.values()),
    "a bad label for an id no sample uses, and no other defect": lambda s, l, *rates: isinstance(s, list) and all(
        isinstance(x, dict) and isinstance(x.get("sample_id"), str) and x["sample_id"] and isinstance(
            x.get("response"), (str, type(None))) for x in s) and not _repeated([x["sample_id"] for x in s])
        and not any(_bad_rate(r) for r in rates) and isinstance(l, dict) and all(
            type(l[x["sample_id"]]) is int for x in s if x["sample_id"] in l) and any(
            k not in {x["sample_id"] for x in s} and (is_bool(v) or not isinstance(v, int)) for k, v in l.items()),
    "a sample that is not a dict": lambda s, l, *rates: isinstance(s, list) and any(not isinstance(x, dict) for x in s),
    "a missing sample_id": lambda s, l, *rates: any("sample_id" not in x for x in dicts(s)),
    "an empty or non-str sample_id": lambda s, l, *rates: any(
        "sample_id" in x and (not_a_str(x["sample_id"]) or x["sample_id"] == "") for x in dicts(s)),
    "a repeated sample_id": lambda s, l, *rates: _repeated([x.get("sample_id") for x in dicts(s)]),
    "a response that is neither str nor None": lambda s, l, *rates: any(
        x.get("response") is not None and not_a_str(x["response"]) for x in dicts(s)),
})
