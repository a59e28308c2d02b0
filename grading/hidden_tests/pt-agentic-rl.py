# %% hidden exercise=env_step points=1 name=calculator_follows_python_integer_arithmetic
# hint: CALC computes x op y with Python's integer operators (// floors toward minus infinity, negatives allowed) and answers "RESULT <value>"; x // 0 is answered "ERROR division by zero".
_state = {"a": 5, "op": "*", "b": 6, "turn": 0, "max_turns": 4, "done": False}
for _action, _observation in (("CALC 12 + 30", "RESULT 42"), ("CALC 81 - 147", "RESULT -66"), ("CALC -7 * 3", "RESULT -21"),
                              ("CALC -7 // 2", "RESULT -4"), ("CALC 95 // 7", "RESULT 13"), ("CALC 9 // 0", "ERROR division by zero"),
                              ("CALC 007 + 1", "RESULT 8")):
    _result = env_step(_state, _action)
    assert _result["observation"] == _observation and _result["kind"] == "calc", _action
    assert _result["reward"] == 0.0 and _result["terminated"] is False and _result["truncated"] is False

# %% hidden exercise=env_step points=1 name=actions_are_parsed_strictly
# hint: strip the action, then match the whole string: the exact keywords, single spaces, one of the four operators, integers of ASCII digits; everything else is an unknown action that still uses a turn.
_state = {"a": 12, "op": "+", "b": 30, "turn": 0, "max_turns": 5, "done": False}
for _action in ("calc 12 + 30", "CALC 12+30", "CALC  12 + 30", "CALC 12 + 30 please", "CALC 12 % 5", "CALC 12 / 3",
                "CALC 12 ** 2", "ANSWER: 42", "ANSWER 42.", "ANSWER +42", "answer 42", "ANSWER ４２", "", "ANSWER",
                "The answer is 42", "CALC 12 + 30\nANSWER 42"):
    _result = env_step(_state, _action)
    assert (_result["kind"], _result["observation"], _result["reward"]) == ("invalid", "ERROR unknown action", 0.0), _action
    assert _result["state"]["turn"] == 1 and not _result["terminated"]
assert env_step(_state, "\t CALC 12 + 30 \n")["observation"] == "RESULT 42"
assert env_step(_state, "ANSWER 0042")["reward"] == 1.0

# %% hidden exercise=env_step points=1 name=answers_terminate_with_the_verdict
# hint: an ANSWER always ends the episode with observation "END": reward 1.0 only when the number equals a op b (for // the floored quotient), 0.0 otherwise.
for _a, _op, _b, _right in ((81, "-", 47, 34), (23, "*", 4, 92), (95, "//", 7, 13), (-9, "//", 2, -5)):
    _state = {"a": _a, "op": _op, "b": _b, "turn": 1, "max_turns": 3, "done": False}
    _good, _bad = env_step(_state, f"ANSWER {_right}"), env_step(_state, f"ANSWER {_right + 1}")
    assert (_good["observation"], _good["reward"], _good["terminated"], _good["truncated"]) == ("END", 1.0, True, False)
    assert (_bad["observation"], _bad["reward"], _bad["terminated"], _bad["truncated"]) == ("END", 0.0, True, False)
    assert _good["state"]["done"] is True and _good["kind"] == "answer" and type(_bad["reward"]) is float

# %% hidden exercise=env_step points=1 name=truncation_is_only_the_last_unanswered_turn
# hint: truncated is True only when this step used the last turn and did not answer; an answer on the last turn terminates instead, and earlier turns are neither.
_state = {"a": 1, "op": "+", "b": 1, "turn": 0, "max_turns": 1, "done": False}
assert env_step(_state, "CALC 1 + 1")["truncated"] is True and env_step(_state, "hello")["truncated"] is True
assert env_step(_state, "ANSWER 2")["truncated"] is False and env_step(_state, "ANSWER 3")["terminated"] is True
_state = {"a": 1, "op": "+", "b": 1, "turn": 3, "max_turns": 5, "done": False}
_expected_state = {**_state, "turn": 4}
_result = env_step(_state, "CALC 1 + 1")
assert _result["truncated"] is False and _result["state"] == _expected_state
_result = env_step(_result["state"], "nope")
assert _result["truncated"] is True and _result["state"]["done"] is True and _result["state"]["turn"] == 5

# %% hidden exercise=env_step points=1 name=invalid_states_and_actions_are_refused_valid_steps_taken
# hint: check every key and value of the state (exact keys, ints that are not bools, a known op, 0 <= turn < max_turns, done False) and that the action is a str, before reading the action.
_ok = {"a": 2, "op": "-", "b": 3, "turn": 0, "max_turns": 2, "done": False}
assert env_step(_ok, "ANSWER -1")["reward"] == 1.0
for _state, _action in (({**_ok, "extra": 1}, "ANSWER -1"), ({k: v for k, v in _ok.items() if k != "done"}, "ANSWER -1"),
                        ({**_ok, "a": 2.0}, "ANSWER -1"), ({**_ok, "b": True}, "ANSWER -1"), ({**_ok, "op": "/"}, "ANSWER -1"),
                        ({**_ok, "op": "%"}, "ANSWER -1"), ({**_ok, "turn": -1}, "ANSWER -1"), ({**_ok, "turn": 2}, "ANSWER -1"),
                        ({**_ok, "max_turns": 0, "turn": 0}, "ANSWER -1"), ({**_ok, "done": True}, "ANSWER -1"),
                        ({**_ok, "done": 0}, "ANSWER -1"), ({**_ok, "turn": True}, "ANSWER -1"), (None, "ANSWER -1"),
                        (list(_ok.items()), "ANSWER -1"), (_ok, None), (_ok, b"ANSWER -1"), (_ok, ["ANSWER -1"])):
    try:
        env_step(_state, _action)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_state!r}, {_action!r}")

# %% hidden exercise=env_step points=1 name=generated_steps_match_the_reference
# hint: on any valid state and any action (commands with every operator and sign, extra or Unicode spaces, other scripts' digits, wrong case, trailing words, newlines, free text) the observation, reward, flags, kind and new state are exactly the reference's.
from hypothesis import strategies as st
_ints = st.integers(-30, 99)
_ops = st.sampled_from(["+", "-", "*", "//"])
_states = st.tuples(_ints, _ops, _ints, st.integers(1, 4)).flatmap(lambda drawn: st.fixed_dictionaries({
    "a": st.just(drawn[0]), "op": st.just(drawn[1]), "b": st.just(drawn[2] if drawn[1] != "//" or drawn[2] else 3),
    "turn": st.integers(0, drawn[3] - 1), "max_turns": st.just(drawn[3]), "done": st.just(False)}))
_commands = st.one_of(
    st.tuples(_ints, _ops, st.one_of(_ints, st.just(0))).map(lambda t: f"CALC {t[0]} {t[1]} {t[2]}"),
    _ints.map(lambda n: f"ANSWER {n}"),
    st.sampled_from(["ANSWER 42", "CALC 12 + 30", "calc 1 + 1", "CALC 1+1", "ANSWER 4 2", "CALC 1 + 1 ok", "", "hi"]),
    st.text(alphabet="CALNSWER0123456789 +-*/\n", max_size=14))
_actions = st.tuples(st.sampled_from(["", " ", "\n", "\t"]), _commands, st.sampled_from(["", " ", "\n"])).map(
    lambda t: t[0] + t[1] + t[2])
import re


def _command(action):
    text = action.strip()
    calc = re.fullmatch(r"CALC (-?[0-9]+) (\+|-|\*|//) (-?[0-9]+)", text)
    answer = re.fullmatch(r"ANSWER (-?[0-9]+)", text)
    return calc, answer


def _truth(state):
    a, op, b = state["a"], state["op"], state["b"]
    return a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a // b


def _last_turn(state):
    return state["turn"] + 1 == state["max_turns"]


_answered = st.tuples(_states, st.sampled_from(["", " ", "\n"])).map(lambda t: (t[0], f"ANSWER {_truth(t[0])}{t[1]}"))
_by_zero = st.tuples(_states, st.sampled_from(["CALC 7 // 0", " CALC -3 // 0\n", "CALC 0 // 0"]))
_negative_division = st.tuples(st.integers(-40, -1), st.integers(2, 9), st.integers(1, 3)).map(
    lambda t: ({"a": t[0], "op": "//", "b": t[1], "turn": 0, "max_turns": t[2], "done": False}, f"ANSWER {t[0] // t[1]}"))
_zero_answer = st.tuples(st.integers(1, 9), st.integers(1, 3)).map(
    lambda t: ({"a": t[0], "op": "-", "b": t[0], "turn": t[1] - 1, "max_turns": t[1], "done": False}, "ANSWER -0"))
_single_turn = st.tuples(_ints, _ops, st.integers(1, 9), _actions).map(
    lambda t: ({"a": t[0], "op": t[1], "b": t[2], "turn": 0, "max_turns": 1, "done": False}, t[3]))


reference.agrees("env_step", st.one_of(st.tuples(_states, _actions), _answered, _by_zero, _negative_division, _zero_answer,
                                       _single_turn), cases=260, clauses={
    "a CALC command": lambda state, action: _command(action)[0] is not None,
    "a CALC that divides by zero": lambda state, action: _command(action)[0] is not None
        and _command(action)[0].group(2) == "//" and int(_command(action)[0].group(3)) == 0,
    "a correct ANSWER": lambda state, action: _command(action)[1] is not None
        and int(_command(action)[1].group(1)) == _truth(state),
    "a wrong ANSWER": lambda state, action: _command(action)[1] is not None
        and int(_command(action)[1].group(1)) != _truth(state),
    "an action that is no command (case, spacing, trailing words, free text)":
        lambda state, action: _command(action) == (None, None),
    "no answer on the last turn (truncated)": lambda state, action: _last_turn(state) and _command(action)[1] is None,
    "an answer on the last turn (terminated, not truncated)": lambda state, action: _last_turn(state)
        and _command(action)[1] is not None,
    "whitespace around a command": lambda state, action: action != action.strip() and any(_command(action)),
    "a negative operand in a CALC": lambda state, action: _command(action)[0] is not None and "-" in (
        _command(action)[0].group(1) + _command(action)[0].group(3)),
    "ANSWER -0 for a task whose result is 0": lambda state, action: action.strip() == "ANSWER -0" and _truth(state) == 0,
    "a floor division of a negative number (rounds down, not toward zero)": lambda state, action: (
        state["op"] == "//" and state["a"] < 0 and _command(action)[1] is not None) or (
        _command(action)[0] is not None and _command(action)[0].group(2) == "//"
        and int(_command(action)[0].group(3)) != 0
        and (int(_command(action)[0].group(1)) < 0) != (int(_command(action)[0].group(3)) < 0)
        and int(_command(action)[0].group(1)) % int(_command(action)[0].group(3)) != 0),
    "a one-turn episode (the first turn is the last)": lambda state, action: state["max_turns"] == 1,
})

# %% hidden exercise=env_step points=1 name=generated_unicode_and_sign_actions_match_the_reference
# hint: commands wrapped in or split by Unicode spaces, zero-width characters, digits of other scripts, plus signs and -0: only ASCII digits, single spaces and what str.strip() removes are part of the action syntax.
import re

from tools.course.grader.clauses import each_of

_other_digits = ("０１２３４５６７８９", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९")
_kinds = ([("around", mark) for mark in ("\u3000", "\xa0", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\r\n")]
          + [("zero-width", where) for where in ("before", "after", "inside")]
          + [("inside", mark) for mark in ("\xa0", "\t", "  ", "\u3000", "\n")]
          + [("digits", digits) for digits in _other_digits]
          + [("plus", word) for word in ("ANSWER", "CALC")] + [("minus zero", word) for word in ("ANSWER", "CALC")]
          + [("plain", n) for n in range(6)])


def _unicode_case(kind, rng):
    what, how = kind
    max_turns = rng.randint(1, 3)
    state = {"a": rng.randint(0, 30), "op": rng.choice(["+", "-", "*", "//"]), "b": rng.randint(1, 9),
             "turn": rng.randrange(max_turns), "max_turns": max_turns, "done": False}
    truth = {"+": state["a"] + state["b"], "-": state["a"] - state["b"], "*": state["a"] * state["b"],
             "//": state["a"] // state["b"]}[state["op"]]
    command = rng.choice([f"ANSWER {truth}", f"CALC {rng.randint(1, 99)} {rng.choice(['+', '*', '-'])} {rng.randint(1, 9)}"])
    if what == "around":
        command = how + command if rng.random() < 0.5 else command + how
    elif what == "zero-width":
        command = {"before": "\ufeff" + command, "after": command + "\u200b", "inside": command.replace(" ", " \u200b", 1)}[how]
    elif what == "inside":
        command = command.replace(" ", how, 1)
    elif what == "digits":
        command = command.translate(str.maketrans("0123456789", how))
    elif what == "plus":
        command = f"ANSWER +{abs(truth)}" if how == "ANSWER" else f"CALC +{state['a']} + {state['b']}"
    elif what == "minus zero":
        state.update({"op": "-", "b": state["a"]})
        command = "ANSWER -0" if how == "ANSWER" else "CALC -0 * 7"
    return state, command


def _parsed(action):
    text = action.strip()
    return (re.fullmatch(r"CALC (-?[0-9]+) (\+|-|\*|//) (-?[0-9]+)", text) is not None
            or re.fullmatch(r"ANSWER (-?[0-9]+)", text) is not None)


reference.agrees("env_step", each_of(_kinds, _unicode_case, variants=2), cases=2 * len(_kinds), clauses={
    "Unicode whitespace strip() removes around a command (ideographic, no-break, \\x0b, \\x1c, \\x85, \\u2028)":
        lambda state, action: _parsed(action) and action != action.strip() and any(
            mark in action for mark in ("\u3000", "\xa0", "\x0b", "\x0c", "\x1c", "\x85", "\u2028")),
    "a zero-width character strip() keeps (no command)": lambda state, action: "\ufeff" in action or "\u200b" in action,
    "a no-break space, tab, ideographic space, newline or double space inside a command (no command)":
        lambda state, action: not _parsed(action) and any(
            mark in action.strip() for mark in ("\xa0", "\t", "  ", "\u3000", "\n")),
    "digits of another script in a command (no command)": lambda state, action: any(
        c in action for digits in _other_digits for c in digits),
    "a plus sign before a number (no command)": lambda state, action: re.fullmatch(r"(ANSWER|CALC) \+.*", action) is not None,
    "-0 in a command (the integer 0)": lambda state, action: "-0 " in action + " ",
    "a plain command": lambda state, action: _parsed(action) and action == action.strip(),
})

# %% hidden exercise=env_step points=1 name=generated_invalid_states_raise_as_the_reference
# hint: states with missing or extra keys, floats or bools for ints, unknown operators, turns outside [0, max_turns), a done flag that is not False, and actions that are not text each give a ValueError; valid steps among them are taken.
from tools.course.grader.clauses import each_of

_defects = ([("valid", n) for n in range(12)]
            + [("state", bad) for bad in (None, "state", [1, "+", 2])]
            + [("missing", key) for key in ("a", "op", "done")] + [("extra", key) for key in ("extra", "reward")]
            + [("number", (key, bad)) for key in ("a", "b", "turn", "max_turns") for bad in (3.0, True, "2")]
            + [("op", bad) for bad in ("/", "x", None, " +")]
            + [("max_turns", bad) for bad in (0, -1)] + [("turn", bad) for bad in ("-1", "max_turns", "beyond")]
            + [("done", bad) for bad in (True, 0, None)]
            + [("action", bad) for bad in (None, 5, b"ANSWER 5", ["ANSWER 5"])])


def _one_defect(defect, rng):
    kind, bad = defect
    max_turns = rng.randint(1, 4)
    state = {"a": rng.randint(-9, 40), "op": rng.choice(["+", "-", "*", "//"]), "b": rng.randint(1, 9),
             "turn": rng.randrange(max_turns), "max_turns": max_turns, "done": False}
    action = rng.choice(["ANSWER 5", "CALC 1 + 1", "nope", f"ANSWER {state['a']}"])
    if kind == "state":
        state = bad
    elif kind == "missing":
        del state[bad]
    elif kind == "extra":
        state[bad] = 1
    elif kind == "number":
        state[bad[0]] = bad[1]
    elif kind == "op":
        state["op"] = bad
    elif kind == "max_turns":
        state["max_turns"], state["turn"] = bad, 0
    elif kind == "turn":
        state["turn"] = {"-1": -1, "max_turns": max_turns, "beyond": max_turns + 2}[bad]
    elif kind == "done":
        state["done"] = bad
    elif kind == "action":
        action = bad
    return state, action


def _first_defect(state, action):
    if not isinstance(state, dict):
        return "state"
    if set(state) != {"a", "op", "b", "turn", "max_turns", "done"}:
        return "keys"
    if not all(type(state[key]) is int for key in ("a", "b", "turn", "max_turns")):
        return "number"
    if state["op"] not in ("+", "-", "*", "//"):
        return "op"
    if state["max_turns"] < 1:
        return "max_turns"
    if not 0 <= state["turn"] < state["max_turns"]:
        return "turn"
    if state["done"] is not False:
        return "done"
    return None if isinstance(action, str) else "action"


reference.agrees("env_step", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "a state that is not a dict": lambda s, a: _first_defect(s, a) == "state",
    "a state with a missing or extra key": lambda s, a: _first_defect(s, a) == "keys",
    "a, b, turn or max_turns that is a float, a bool or text": lambda s, a: _first_defect(s, a) == "number",
    "a bool among the ints": lambda s, a: _first_defect(s, a) == "number" and any(
        isinstance(s[key], bool) for key in ("a", "b", "turn", "max_turns")),
    "an unknown operator": lambda s, a: _first_defect(s, a) == "op",
    "max_turns below 1": lambda s, a: _first_defect(s, a) == "max_turns",
    "a turn outside [0, max_turns)": lambda s, a: _first_defect(s, a) == "turn",
    "a turn equal to max_turns": lambda s, a: _first_defect(s, a) == "turn" and s["turn"] == s["max_turns"],
    "done that is not False (True, 0, None)": lambda s, a: _first_defect(s, a) == "done",
    "an action that is not a str": lambda s, a: _first_defect(s, a) == "action",
    "a valid step": lambda s, a: _first_defect(s, a) is None,
})

# %% hidden exercise=assemble_trajectory points=1 name=environment_tokens_never_enter_the_loss
# hint: the loss mask is 1 exactly on the tokens of model segments; prompt and env tokens are 0, however many env segments there are; env_tokens counts only env tokens.
_segments = [{"source": "prompt", "token_ids": [10, 11]}, {"source": "model", "token_ids": [20]},
             {"source": "env", "token_ids": [30, 31, 32]}, {"source": "model", "token_ids": [21, 22]},
             {"source": "env", "token_ids": [33]}, {"source": "model", "token_ids": [23, 24, 25]},
             {"source": "env", "token_ids": [34, 35]}]
_result = assemble_trajectory(_segments)
assert _result["input_ids"] == [10, 11, 20, 30, 31, 32, 21, 22, 33, 23, 24, 25, 34, 35]
assert _result["loss_mask"] == [0, 0, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0]
assert _result["env_tokens"] == 6 and _result["model_turns"] == 3 and sum(_result["loss_mask"]) == 6

# %% hidden exercise=assemble_trajectory points=1 name=turn_ids_count_model_turns_only
# hint: the k-th model segment's tokens carry k (counting model segments only, from 0); every prompt or env token carries -1.
_segments = [{"source": "prompt", "token_ids": [0]}, {"source": "model", "token_ids": [1, 1]},
             {"source": "env", "token_ids": [2]}, {"source": "model", "token_ids": [3]},
             {"source": "env", "token_ids": [4, 4]}, {"source": "model", "token_ids": [5, 5, 5]}]
_result = assemble_trajectory(_segments)
assert _result["turn_ids"] == [-1, 0, 0, -1, 1, -1, -1, 2, 2, 2]
assert all(type(value) is int for value in _result["turn_ids"] + _result["loss_mask"] + _result["input_ids"])
_single = assemble_trajectory([{"source": "prompt", "token_ids": [7, 8]}, {"source": "model", "token_ids": [9]}])
assert _single == {"input_ids": [7, 8, 9], "loss_mask": [0, 0, 1], "turn_ids": [-1, -1, 0], "model_turns": 1,
                   "env_tokens": 0}

# %% hidden exercise=assemble_trajectory points=1 name=segment_order_is_checked
# hint: one prompt first, then model and env alternating starting with model; a trajectory may end on either, but needs a model segment, and nothing may follow out of turn.
_p, _m, _e = ({"source": "prompt", "token_ids": [1]}, {"source": "model", "token_ids": [2]}, {"source": "env", "token_ids": [3]})
assert assemble_trajectory([_p, _m, _e])["model_turns"] == 1 and assemble_trajectory([_p, _m, _e, _m])["model_turns"] == 2
for _bad in ([_p], [_m], [_e, _m], [_p, _e], [_p, _m, _m], [_p, _m, _e, _e, _m], [_p, _p, _m], [_p, _m, _p], [_m, _p, _m]):
    try:
        assemble_trajectory([dict(segment) for segment in _bad])
    except ValueError:
        continue
    raise AssertionError(f"out-of-order segments accepted: {[segment['source'] for segment in _bad]}")

# %% hidden exercise=assemble_trajectory points=1 name=invalid_segments_are_refused_valid_ones_assembled
# hint: check every segment (a dict with exactly source and token_ids, a known source, a non-empty list of ints >= 0 that are not bools) before concatenating.
_p, _m = {"source": "prompt", "token_ids": [1]}, {"source": "model", "token_ids": [2]}
assert assemble_trajectory([_p, _m])["loss_mask"] == [0, 1]
for _bad in ([], None, "prompt", [_p, {"source": "model", "token_ids": []}], [_p, {"source": "model", "token_ids": [-1]}],
             [_p, {"source": "model", "token_ids": [True]}], [_p, {"source": "model", "token_ids": [1.0]}],
             [_p, {"source": "model", "token_ids": (2,)}], [_p, {"source": "tool", "token_ids": [2]}],
             [_p, {"source": "Model", "token_ids": [2]}], [_p, {"source": "model"}],
             [_p, {"source": "model", "token_ids": [2], "text": "x"}], [_p, ("model", [2])], (_p, _m)):
    try:
        assemble_trajectory(_bad)
    except ValueError:
        continue
    raise AssertionError(f"invalid segments accepted: {_bad!r}")

# %% hidden exercise=assemble_trajectory points=1 name=generated_trajectories_match_the_reference
# hint: on any valid trajectory (several model and env turns, ending on either, segments of any length) the ids, mask, turn ids and counts are exactly the reference's, as plain lists of ints.
from hypothesis import strategies as st
_ids = st.lists(st.integers(0, 500), min_size=1, max_size=4)


def _trajectory(prompt, turns, end_with_env):
    segments = [{"source": "prompt", "token_ids": prompt}]
    for index, (model, env) in enumerate(turns):
        segments.append({"source": "model", "token_ids": model})
        if index < len(turns) - 1 or end_with_env:
            segments.append({"source": "env", "token_ids": env})
    return segments


reference.agrees("assemble_trajectory", st.tuples(st.tuples(_ids, st.lists(st.tuples(_ids, _ids), min_size=1, max_size=4),
                                                            st.booleans()).map(lambda t: _trajectory(*t))), cases=150, clauses={
    "a trajectory that ends on an env segment": lambda segments: segments[-1]["source"] == "env",
    "a trajectory that ends on a model segment": lambda segments: segments[-1]["source"] == "model",
    "one model turn": lambda segments: sum(s["source"] == "model" for s in segments) == 1,
    "three or more model turns": lambda segments: sum(s["source"] == "model" for s in segments) >= 3,
    "a model segment of one token": lambda segments: any(s["source"] == "model" and len(s["token_ids"]) == 1 for s in segments),
    "an env segment longer than the model segment before it": lambda segments: any(
        a["source"] == "model" and b["source"] == "env" and len(b["token_ids"]) > len(a["token_ids"])
        for a, b in zip(segments, segments[1:])),
    "a token id 0": lambda segments: any(0 in s["token_ids"] for s in segments),
})

# %% hidden exercise=assemble_trajectory points=1 name=generated_invalid_trajectories_raise_as_the_reference
# hint: segments in the wrong order, unknown or miscased sources, empty or non-list token ids, negative or non-int ids and extra or missing keys each give a ValueError; valid trajectories among them are assembled.
from tools.course.grader.clauses import each_of

_defects = ([("valid", n) for n in range(12)]
            + [("segments", bad) for bad in (None, "x", [], "tuple")]
            + [("segment", bad) for bad in ("tuple", "no source", "no token_ids", "extra key")]
            + [("source", bad) for bad in ("tool", "Model", None, " model")]
            + [("token_ids", bad) for bad in ([], [-1], [True], [1.5], (1,), None, [3, "4"])]
            + [("order", bad) for bad in ("model first", "env after prompt", "two model turns in a row",
                                          "two env segments in a row", "a second prompt", "only a prompt")]
            + [("bad id at", (segment, spot)) for segment in ("first", "last") for spot in ("first", "last")])


def _one_defect(defect, rng):
    kind, bad = defect
    turns = rng.randint(1, 3)
    segments = [{"source": "prompt", "token_ids": [rng.randint(0, 9) for _ in range(rng.randint(1, 3))]}]
    for turn in range(turns):
        segments.append({"source": "model", "token_ids": [rng.randint(0, 9) for _ in range(rng.randint(1, 3))]})
        if turn < turns - 1 or rng.random() < 0.5:
            segments.append({"source": "env", "token_ids": [rng.randint(0, 9) for _ in range(rng.randint(1, 3))]})
    index = rng.randrange(len(segments))
    if kind == "bad id at":  # a negative or bool id first or last in the first or the last segment
        segment = segments[0 if bad[0] == "first" else -1]
        segment["token_ids"] = [rng.randint(0, 9) for _ in range(3)]
        segment["token_ids"][0 if bad[1] == "first" else -1] = rng.choice([-1, True, False, 2.0])
        return (segments,)
    if kind == "segments":
        return (tuple(segments) if bad == "tuple" else bad,)
    if kind == "segment":
        segment = segments[index]
        segments[index] = {"tuple": (segment["source"], segment["token_ids"]), "no source": {"token_ids": segment["token_ids"]},
                           "no token_ids": {"source": segment["source"]}, "extra key": {**segment, "turn": 0}}[bad]
    elif kind == "source":
        segments[index]["source"] = bad
    elif kind == "token_ids":
        segments[index]["token_ids"] = bad
    elif kind == "order":
        model = {"source": "model", "token_ids": [5]}
        env = {"source": "env", "token_ids": [6]}
        if bad == "model first":
            segments = segments[1:]
        elif bad == "env after prompt":
            segments.insert(1, env)
        elif bad == "two model turns in a row":
            segments.insert(2, model)
        elif bad == "two env segments in a row":
            segments = segments[:2] + [env, env] + segments[2:]
        elif bad == "a second prompt":
            segments.append({"source": "prompt", "token_ids": [7]})
        else:
            segments = segments[:1]
    return (segments,)


def _where(segments):
    """The index of the first segment the checks refuse (None when every segment passes)."""
    follows = {None: "prompt", "prompt": "model", "model": "env", "env": "model"}
    previous = None
    for index, segment in enumerate(segments):
        if not isinstance(segment, dict) or set(segment) != {"source", "token_ids"} \
                or segment["source"] not in ("prompt", "model", "env"):
            return index
        ids = segment["token_ids"]
        if not isinstance(ids, list) or not ids or not all(type(t) is int and t >= 0 for t in ids):
            return index
        if segment["source"] != follows[previous]:
            return index
        previous = segment["source"]
    return None


def _bad_id_spot(segments, spot):
    index = _where(segments)
    ids = segments[index]["token_ids"] if index is not None and isinstance(segments[index], dict) else None
    if not isinstance(ids, list) or len(ids) < 2:
        return False
    position = 0 if spot == "first" else -1
    others = ids[1:] if spot == "first" else ids[:-1]
    return not (type(ids[position]) is int and ids[position] >= 0) and all(type(t) is int and t >= 0 for t in others)


def _first_defect(segments):
    follows = {None: "prompt", "prompt": "model", "model": "env", "env": "model"}
    if not isinstance(segments, list) or not segments:
        return "segments"
    previous = None
    for segment in segments:
        if not isinstance(segment, dict) or set(segment) != {"source", "token_ids"}:
            return "segment"
        if segment["source"] not in ("prompt", "model", "env"):
            return "source"
        ids = segment["token_ids"]
        if not isinstance(ids, list) or not ids or not all(type(t) is int and t >= 0 for t in ids):
            return "token_ids"
        if segment["source"] != follows[previous]:
            return "order"
        previous = segment["source"]
    return "only a prompt" if previous == "prompt" else None


reference.agrees("assemble_trajectory", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "segments that are not a non-empty list (None, text, [], a tuple)": lambda s: _first_defect(s) == "segments",
    "a segment that is not a dict with exactly source and token_ids": lambda s: _first_defect(s) == "segment",
    "an unknown or miscased source": lambda s: _first_defect(s) == "source",
    "token ids that are empty, not a list, negative, bools, floats or text": lambda s: _first_defect(s) == "token_ids",
    "a token id that is a bool": lambda s: _first_defect(s) == "token_ids" and any(
        isinstance(t, bool) for x in s for t in (x.get("token_ids") or []) if isinstance(x, dict)),
    "segments in an order the table does not allow": lambda s: _first_defect(s) == "order",
    "a prompt and no model segment": lambda s: _first_defect(s) == "only a prompt",
    "a valid trajectory": lambda s: _first_defect(s) is None,
    "the defect in the first segment": lambda s: _first_defect(s) in ("segment", "source", "token_ids", "order")
        and _where(s) == 0,
    "the defect in the last segment of several": lambda s: _first_defect(s) in ("segment", "source", "token_ids", "order")
        and len(s) > 2 and _where(s) == len(s) - 1,
    "the defect in a middle segment": lambda s: _first_defect(s) in ("segment", "source", "token_ids", "order")
        and _where(s) is not None and 0 < _where(s) < len(s) - 1,
    "a bad token id first in its list, the rest fine": lambda s: _first_defect(s) == "token_ids"
        and _bad_id_spot(s, "first"),
    "a bad token id last in its list, the rest fine": lambda s: _first_defect(s) == "token_ids"
        and _bad_id_spot(s, "last"),
})

# %% hidden exercise=attribute_reward points=1 name=the_last_model_turn_gets_the_reward_earlier_turns_are_discounted
# hint: with K model turns, turn k gets R * gamma ** (K - 1 - k): the last turn the whole reward, each earlier turn one more factor of gamma; the discount counts turns, not tokens.
_result = attribute_reward([-1, 0, 0, 0, 0, -1, 1, -1, 2, 2], 2.0, gamma=0.5)
assert _result["turn_returns"] == [0.5, 1.0, 2.0] and _result["turn_advantages"] == [0.5, 1.0, 2.0]
assert _result["token_advantages"] == [0.0, 0.5, 0.5, 0.5, 0.5, 0.0, 1.0, 0.0, 2.0, 2.0]
_flat = attribute_reward([0, 1, 2, 3], 1.0)
assert _flat["turn_returns"] == [1.0, 1.0, 1.0, 1.0], "gamma = 1: every turn gets the whole reward"
_negative = attribute_reward([0, -1, 1], -1, gamma=0.9)
assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(_negative["turn_returns"], [-0.9, -1.0]))

# %% hidden exercise=attribute_reward points=1 name=baseline_is_subtracted_from_every_turn_and_types_are_floats
# hint: subtract the baseline from each turn's return (not from the reward before discounting); non-model tokens get 0.0, and every value is a Python float, also for int inputs.
_result = attribute_reward([-1, 0, -1, 1, 1], 1, gamma=0.5, baseline=1)
assert _result["turn_returns"] == [0.5, 1.0] and _result["turn_advantages"] == [-0.5, 0.0]
assert _result["token_advantages"] == [0.0, -0.5, 0.0, 0.0, 0.0]
assert all(type(value) is float for key in _result for value in _result[key])
_zero = attribute_reward([0], 0.0, baseline=0.25)
assert _zero == {"turn_returns": [0.0], "turn_advantages": [-0.25], "token_advantages": [-0.25]}

# %% hidden exercise=attribute_reward points=1 name=turn_ids_must_be_contiguous_runs_from_zero
# hint: the model-turn indices must appear as 0, 1, ..., K - 1 in increasing order, each in one unbroken run; no model turn at all, a gap, a repeat after another id, or an id below -1 is refused.
assert attribute_reward([-1, -1, 0, 0, -1, 1], 1.0)["turn_returns"] == [1.0, 1.0]
for _bad in ([], [-1, -1], [1, 1], [0, 2], [0, -1, 0], [0, 1, 0], [1, 0], [0, -2], [0, 0, 2, 2], [0, True], [0, 1.0], (0, 1),
             None):
    try:
        attribute_reward(_bad, 1.0)
    except ValueError:
        continue
    raise AssertionError(f"invalid turn ids accepted: {_bad!r}")

# %% hidden exercise=attribute_reward points=1 name=invalid_rewards_and_settings_are_refused_valid_ones_credited
# hint: the reward and the baseline must be finite ints or floats (not bools), and gamma must lie in (0, 1]; check them before computing.
assert attribute_reward([0], 1.0, gamma=1)["turn_returns"] == [1.0]
for _kwargs in ({"terminal_reward": True}, {"terminal_reward": float("nan")}, {"terminal_reward": "1"}, {"terminal_reward": None},
                {"terminal_reward": float("inf")}, {"gamma": 0}, {"gamma": 1.5}, {"gamma": -0.5}, {"gamma": True},
                {"gamma": float("nan")}, {"baseline": float("inf")}, {"baseline": False}, {"baseline": "0"}):
    _call = {"terminal_reward": 1.0, **_kwargs}
    try:
        attribute_reward([0, -1, 1], **_call)
    except ValueError:
        continue
    raise AssertionError(f"invalid settings accepted: {_kwargs!r}")

# %% hidden exercise=attribute_reward points=1 name=generated_credits_match_the_reference
# hint: on any valid trajectory ids, reward, gamma and baseline (given by position, by keyword or left at their defaults) the returns, advantages and token advantages are exactly the reference's.
from hypothesis import strategies as st


def _ids(runs):
    ids = []
    for turn, (gap, length) in enumerate(runs):
        ids += [-1] * gap + [turn] * length
    return ids


_turn_ids = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=4).map(_ids)
_numbers = st.one_of(st.integers(-3, 3), st.floats(-5, 5, allow_nan=False, allow_infinity=False),
                     st.sampled_from([0.1, 0.2, 0.3, 1e-300, -0.0]))
_gammas = st.one_of(st.sampled_from([1, 1.0, 0.9, 0.5, 0.99, 0.1, 0.3, 5e-324, 1 - 2 ** -53]), st.floats(0.01, 1.0))
_calls = st.one_of(st.tuples(_turn_ids, _numbers), st.tuples(_turn_ids, _numbers, _gammas),
                   st.tuples(_turn_ids, _numbers, _gammas, _numbers),
                   st.tuples(st.tuples(_turn_ids, _numbers), st.fixed_dictionaries({"gamma": _gammas, "baseline": _numbers})))


def _credit(turn_ids, reward, gamma=1.0, baseline=0.0):
    return turn_ids, reward, gamma, baseline


reference.agrees("attribute_reward", _calls, cases=150, clauses={
    "gamma 1 (no discount)": lambda *a, **k: _credit(*a, **k)[2] == 1,
    "gamma below 1": lambda *a, **k: _credit(*a, **k)[2] < 1,
    "several model turns": lambda *a, **k: max(_credit(*a, **k)[0]) >= 1,
    "environment tokens between turns": lambda *a, **k: -1 in _credit(*a, **k)[0][1:],
    "gamma and baseline by default": lambda *a, **k: len(a) == 2 and not k,
    "gamma and baseline by keyword": lambda *a, **k: bool(k),
    "a negative reward": lambda *a, **k: _credit(*a, **k)[1] < 0,
    "a baseline other than 0": lambda *a, **k: _credit(*a, **k)[3] != 0,
    "an int reward": lambda *a, **k: type(_credit(*a, **k)[1]) is int,
    "gamma at a floating-point edge (the smallest subnormal, 1 - 2**-53)": lambda *a, **k: _credit(*a, **k)[2] in (
        5e-324, 1 - 2 ** -53),
    "inexact decimals (0.1, 0.3) as reward, gamma or baseline": lambda *a, **k: any(
        value in (0.1, 0.3) for value in _credit(*a, **k)[1:]),
    "a reward of -0.0 or below 1e-299": lambda *a, **k: _credit(*a, **k)[1] in (-0.0, 1e-300)
        and type(_credit(*a, **k)[1]) is float,
    "a turn of one token at the very start (no prompt before it)": lambda *a, **k: _credit(*a, **k)[0][0] == 0,
})

# %% hidden exercise=attribute_reward points=1 name=generated_invalid_credits_raise_as_the_reference
# hint: broken turn ids, bools, nan, infinities or text as numbers, and gamma outside (0, 1] each give a ValueError; valid calls among them are credited.
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite

_defects = ([("valid", n) for n in range(12)]
            + [("turn_ids", bad) for bad in (None, (0, 1), [0, True], [0, 1.0], [0, -2], [0, 2], [0, 1, 0], [0, -1, 0],
                                             [1, 1], [], [-1, -1], [0, 0, 2, 2], ["0"])]
            + [("reward", bad) for bad in (True, float("nan"), float("inf"), "1", None)]
            + [("baseline", bad) for bad in (False, -float("inf"), "0", None)]
            + [("gamma", bad) for bad in (0, 1.01, -1, True, float("nan"), None, "0.5", -0.0, 1 + 2 ** -52, -5e-324,
                                          float("inf"))]
            + [("ids at", where) for where in ("first", "middle", "last")])


def _one_defect(defect, rng):
    kind, bad = defect
    ids = []
    for turn in range(rng.randint(1, 3)):
        ids += [-1] * rng.randint(0, 2) + [turn] * rng.randint(1, 3)
    call = {"turn_ids": ids, "reward": rng.choice([1.0, 0, -2, 0.5]), "gamma": rng.choice([1.0, 0.5, 1, 0.9]),
            "baseline": rng.choice([0.0, 0.25, -1])}
    if kind == "ids at":  # an id below -1, a bool or a float at the first, a middle or the last position
        ids = [-1, 0, 0, -1, 1, 1]
        ids[{"first": 0, "middle": 3, "last": -1}[bad]] = rng.choice([-2, True, 1.0])
        call["turn_ids"] = ids
    elif kind != "valid":
        call[kind] = bad
    return call["turn_ids"], call["reward"], call["gamma"], call["baseline"]


def _ids_defect(turn_ids):
    if not isinstance(turn_ids, list) or not all(type(t) is int for t in turn_ids):
        return "type"
    turns, previous = 0, None
    for value in turn_ids:
        if value < -1:
            return "below"
        if value != -1 and value != previous:
            if value != turns:
                return "order"
            turns += 1
        previous = value
    return "none" if turns == 0 else None


def _finite(value):
    return is_number(value) and not not_finite(value)


reference.agrees("attribute_reward", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "turn ids that are not a list of ints (None, a tuple, bools, floats, text)": lambda t, r, g, b: _ids_defect(t) == "type",
    "a turn id below -1": lambda t, r, g, b: _ids_defect(t) == "below",
    "model turns that skip, repeat or start above 0": lambda t, r, g, b: _ids_defect(t) == "order",
    "no model turn": lambda t, r, g, b: _ids_defect(t) == "none",
    "a reward that is a bool, nan, inf, text or None": lambda t, r, g, b: _ids_defect(t) is None and not _finite(r),
    "a baseline that is a bool, inf, text or None": lambda t, r, g, b: _ids_defect(t) is None and _finite(r)
        and not _finite(b),
    "gamma outside (0, 1]": lambda t, r, g, b: _ids_defect(t) is None and _finite(r) and _finite(b) and _finite(g)
        and not 0 < g <= 1,
    "gamma that is a bool, nan, None or text": lambda t, r, g, b: _ids_defect(t) is None and _finite(r) and _finite(b)
        and not _finite(g),
    "a valid call": lambda t, r, g, b: _ids_defect(t) is None and _finite(r) and _finite(b) and _finite(g) and 0 < g <= 1,
    "gamma just outside (0, 1]: -0.0, the negative subnormal, 1 + 2**-52": lambda t, r, g, b: _ids_defect(t) is None
        and _finite(r) and _finite(b) and g in (-0.0, -5e-324, 1 + 2 ** -52) and type(g) is float and not 0 < g <= 1,
    "a bad turn id at the first position": lambda t, r, g, b: _ids_defect(t) is not None and isinstance(t, list)
        and len(t) == 6 and not (type(t[0]) is int and t[0] >= -1),
    "a bad turn id at a middle position": lambda t, r, g, b: _ids_defect(t) is not None and isinstance(t, list)
        and len(t) == 6 and not (type(t[3]) is int and t[3] >= -1),
    "a bad turn id at the last position": lambda t, r, g, b: _ids_defect(t) is not None and isinstance(t, list)
        and len(t) == 6 and not (type(t[-1]) is int and t[-1] >= -1),
})
