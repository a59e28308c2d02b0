# Hidden tests of chapter 14 (LoRA target modules). Each block is one nbgrader grade cell.

# %% hidden exercise=lora_trainable_count points=1 name=grouped_query_attention_narrows_k_and_v
# hint: k_proj and v_proj produce num_key_value_heads * head_dim outputs, not hidden_size.
qwen = lora.architecture("Qwen/Qwen2.5-0.5B-Instruct")
_result = lora_trainable_count(qwen, ("k_proj", "v_proj", "q_proj"), 8)
assert _result["per_layer"] == {"q_proj": 8 * (896 + 896), "k_proj": 8 * (896 + 128), "v_proj": 8 * (896 + 128)}, _result
assert _result["total"] == 24 * 8 * (1792 + 1024 + 1024), _result

# %% hidden exercise=lora_trainable_count points=1 name=head_dim_entry_is_used_when_given
# hint: when the config gives head_dim, the q, k, v and o widths use it, even if heads * head_dim != hidden_size.
_config = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 1,
           "num_hidden_layers": 3, "head_dim": 32}
_result = lora_trainable_count(_config, ["q_proj", "k_proj", "o_proj"], 2)
assert _result["per_layer"] == {"q_proj": 2 * (64 + 128), "k_proj": 2 * (64 + 32), "o_proj": 2 * (128 + 64)}, _result
assert _result["total"] == 3 * _result["per_layer_total"], _result
_none = dict(_config, head_dim=None)
assert lora_trainable_count(_none, ["q_proj"], 2)["per_layer"] == {"q_proj": 2 * (64 + 64)}

# %% hidden exercise=lora_trainable_count points=1 name=per_layer_follows_the_model_order
# hint: the per_layer keys come in QWEN2_LINEAR order, whatever order target_modules lists them in.
_result = lora_trainable_count(lora.architecture("tiny"), ["down_proj", "v_proj", "gate_proj", "q_proj"], 4)
assert list(_result["per_layer"]) == ["q_proj", "v_proj", "gate_proj", "down_proj"], list(_result["per_layer"])

# %% hidden exercise=lora_trainable_count points=1 name=total_counts_every_layer_and_is_an_int
# hint: total = per_layer_total * num_hidden_layers, and every count is an int.
_config = dict(lora.architecture("tiny"), num_hidden_layers=5)
_result = lora_trainable_count(_config, QWEN2_LINEAR, 3)
assert _result["per_layer_total"] == 3 * (128 + 96 + 96 + 128 + 192 + 192 + 192), _result
assert _result["total"] == 5 * _result["per_layer_total"], _result
assert all(type(value) is int for value in [_result["total"], _result["per_layer_total"], *_result["per_layer"].values()])

# %% hidden exercise=lora_trainable_count points=1 name=refuses_bad_config_entries
# hint: a required entry missing, zero, negative, a float or a bool is refused, and so is a config that is not a dict.
_good = lora.architecture("tiny")
_bad_configs = [dict(_good, hidden_size=0), dict(_good, num_key_value_heads=True), dict(_good, intermediate_size=128.0),
                dict(_good, num_hidden_layers=-2), dict(_good, head_dim=0), dict(_good, head_dim=16.0),
                {k: v for k, v in _good.items() if k != "num_key_value_heads"}, list(_good.items()), None]
_valid = lora_trainable_count(dict(_good, head_dim=None), ["q_proj"], 8)  # the valid config every case breaks
assert _valid["total"] == 2 * 8 * (64 + 64), _valid
for _bad in _bad_configs:
    try:
        lora_trainable_count(_bad, ["q_proj"], 8)
    except ValueError:
        continue
    raise AssertionError(f"config {_bad!r} accepted")

# %% hidden exercise=lora_trainable_count points=1 name=refuses_heads_that_do_not_divide
# hint: hidden_size must divide by num_attention_heads when head_dim is absent, and num_attention_heads by num_key_value_heads.
_good = lora.architecture("tiny")
for _bad in (dict(_good, num_attention_heads=3), dict(_good, num_key_value_heads=3),
             dict(_good, num_attention_heads=6, head_dim=8, num_key_value_heads=4)):
    try:
        lora_trainable_count(_bad, ["q_proj"], 8)
    except ValueError:
        continue
    raise AssertionError(f"config {_bad!r} accepted")
assert lora_trainable_count(dict(_good, num_attention_heads=6, head_dim=8, num_key_value_heads=3), ["k_proj"], 1)["total"] == 2 * (64 + 24)

# %% hidden exercise=lora_trainable_count points=1 name=refuses_bad_targets_and_ranks
# hint: target_modules is a non-empty list or tuple of distinct Qwen2 linear names; rank is an int >= 1 (not a bool).
_tiny = lora.architecture("tiny")
for _targets, _rank in ((["q_proj", "Q_PROJ"], 8), (("v_proj", "v_proj"), 8), ("q_proj", 8), ({"q_proj"}, 8),
                        ([], 8), (["embed_tokens"], 8), (["q_proj"], 0), (["q_proj"], True), (["q_proj"], 8.0)):
    assert lora_trainable_count(_tiny, ("v_proj", "q_proj"), 1)["per_layer"] == {"q_proj": 128, "v_proj": 96}
    try:
        lora_trainable_count(_tiny, _targets, _rank)
    except ValueError:
        continue
    raise AssertionError(f"target_modules {_targets!r}, rank {_rank!r} accepted")

# %% hidden exercise=lora_trainable_count points=1 name=equals_peft_on_every_module_alone
# hint: framework check: on Qwen2.5-0.5B (meta device), each of the seven modules alone at rank 4 counts exactly what peft counts.
for _module in QWEN2_LINEAR:
    _theirs = lora.peft_trainable(QWEN_META, [_module], 4)
    _ours = lora_trainable_count(lora.architecture("Qwen/Qwen2.5-0.5B-Instruct"), [_module], 4)["total"]
    assert _ours == _theirs, f"{_module}: {_ours} != peft {_theirs}"

# %% hidden exercise=lora_trainable_count points=2 name=agrees_with_reference_on_generated_configs
# hint: on generated Qwen2-shaped configs (grouped-query heads, with or without head_dim, extra keys, every target subset) the same counts.
from hypothesis import strategies as st


def _config(hidden_per_head, heads, intermediate, layers, head_dim, extra):
    heads, kv_heads = heads
    config = {"hidden_size": hidden_per_head * heads, "intermediate_size": intermediate,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "num_hidden_layers": layers}
    if head_dim != "absent":
        config["head_dim"] = head_dim
    if extra:
        config["vocab_size"] = 512
    return config


_heads = st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (6, 3), (8, 2), (14, 2)])
_configs = st.builds(_config, st.integers(1, 8), _heads, st.integers(1, 50), st.integers(1, 4),
                     st.sampled_from(["absent", None, 4, 7]), st.booleans())
_targets = st.lists(st.sampled_from(QWEN2_LINEAR), min_size=1, max_size=7, unique=True)
_shapes = st.sampled_from([list, tuple])
reference.agrees("lora_trainable_count",
                 st.tuples(_configs, st.tuples(_targets, _shapes).map(lambda drawn: drawn[1](drawn[0])),
                           st.integers(1, 64)), cases=120, clauses={
    "head_dim absent": lambda config, targets, rank: "head_dim" not in config,
    "head_dim None": lambda config, targets, rank: "head_dim" in config and config["head_dim"] is None,
    "head_dim given, heads * head_dim != hidden_size": lambda config, targets, rank: isinstance(
        config.get("head_dim"), int) and config["head_dim"] * config["num_attention_heads"] != config["hidden_size"],
    "grouped-query heads (kv < heads)": lambda config, targets, rank: config["num_key_value_heads"] < config[
        "num_attention_heads"],
    "an extra config key": lambda config, targets, rank: "vocab_size" in config,
    "targets as a tuple": lambda config, targets, rank: isinstance(targets, tuple),
    "targets not in QWEN2_LINEAR order": lambda config, targets, rank: list(targets) != sorted(targets, key=QWEN2_LINEAR.index),
    "all seven modules": lambda config, targets, rank: len(targets) == 7,
})

# %% hidden exercise=lora_trainable_count points=1 name=agrees_with_reference_on_generated_invalid_counts
# hint: broken configs (missing, zero, bool, float or text entries, heads that do not divide), bad targets and bad ranks: the same ValueError.
from hypothesis import strategies as st
_values = st.one_of(st.integers(-1, 9), st.booleans(), st.sampled_from([2.0, "4", None, float("nan")]))
_keys = st.sampled_from(["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                         "num_hidden_layers", "head_dim"])
_configs = st.one_of(st.dictionaries(_keys, _values, max_size=6), st.just(lora.architecture("tiny")),
                     st.sampled_from([None, [], "config"]))
_targets = st.one_of(st.lists(st.sampled_from(QWEN2_LINEAR + ("lm_head", "", "Q_PROJ")), max_size=4),
                     st.sampled_from(["q_proj", None, {"q_proj"}, [["q_proj"]], ("q_proj", 1)]))
_ranks = st.one_of(st.integers(-2, 6), st.booleans(), st.sampled_from([1.0, "8", None]))
from tools.course.grader.clauses import is_bool, keys, values

_valid = st.tuples(st.just(lora.architecture("tiny")), st.lists(st.sampled_from(QWEN2_LINEAR), min_size=1, max_size=7,
                                                                unique=True), st.integers(1, 6))
_required = ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers"]


def _entries(config):
    return {k: v for k, v in config.items() if k in _required or k == "head_dim"} if isinstance(config, dict) else {}


def _ints(config):
    return {k: v for k, v in _entries(config).items() if type(v) is int and v >= 1}


_heads = st.builds(lambda heads, kv, head_dim: dict(lora.architecture("tiny"), num_attention_heads=heads, num_key_value_heads=kv,
                                                    **({} if head_dim == "absent" else {"head_dim": head_dim})),
                   st.integers(1, 8), st.integers(1, 8), st.sampled_from(["absent", None, 8, 12]))  # divisible or not
reference.agrees("lora_trainable_count", st.one_of(st.tuples(_configs, _targets, _ranks), _valid,
                                                   st.tuples(_heads, st.just(["k_proj"]), st.just(2))), cases=250, clauses={
    "config not a dict": lambda config, targets, rank: not isinstance(config, dict),
    "a required entry missing": lambda config, targets, rank: isinstance(config, dict) and bool(set(_required) - set(config)),
    "an entry that is a bool": lambda config, targets, rank: any(is_bool(v) for v in _entries(config).values()),
    "an entry that is a float": lambda config, targets, rank: any(isinstance(v, float) for v in _entries(config).values()),
    "an entry that is a str": lambda config, targets, rank: any(isinstance(v, str) for v in _entries(config).values()),
    "an entry < 1": lambda config, targets, rank: any(
        type(v) is int and v < 1 for v in _entries(config).values()),
    "a required entry None": lambda config, targets, rank: any(
        v is None for k, v in _entries(config).items() if k != "head_dim"),
    "hidden_size not a multiple of the heads (no head_dim)": lambda config, targets, rank: set(_required) <= set(
        _ints(config)) and _ints(config).get("head_dim") is None and config["hidden_size"] % config[
        "num_attention_heads"] != 0,
    "heads not a multiple of the kv heads": lambda config, targets, rank: {"num_attention_heads", "num_key_value_heads"} <= set(
        _ints(config)) and config["num_attention_heads"] % config["num_key_value_heads"] != 0,
    "targets not a list or tuple": lambda config, targets, rank: not isinstance(targets, (list, tuple)),
    "no target": lambda config, targets, rank: isinstance(targets, (list, tuple)) and not targets,
    "a target that is not a Qwen2 linear name": lambda config, targets, rank: any(
        t not in QWEN2_LINEAR for t in values(targets) if isinstance(t, str)) or any(
        not isinstance(t, str) for t in values(targets)),
    "a repeated target": lambda config, targets, rank: isinstance(targets, list) and len(set(map(repr, targets))) < len(targets),
    "a rank that is a bool": lambda config, targets, rank: is_bool(rank),
    "a rank < 1": lambda config, targets, rank: type(rank) is int and rank < 1,
    "a rank that is not an int": lambda config, targets, rank: not isinstance(rank, int),
})

# %% hidden exercise=frozen_base_report points=1 name=names_every_changed_base_tensor_sorted
# hint: every base tensor whose hash changed is listed, sorted by name, and the decision is base_changed even when adapters changed too.
_before = {"z.weight": torch.zeros(2), "a.weight": torch.zeros(2), "m.lora_B.default.weight": torch.zeros(2),
           "b.bias": torch.ones(3)}
_after = {"z.weight": torch.ones(2), "a.weight": torch.ones(2), "m.lora_B.default.weight": torch.ones(2),
          "b.bias": torch.ones(3)}
_report = frozen_base_report(_before, _after)
assert _report["changed_base"] == ["a.weight", "z.weight"], _report
assert _report["changed_adapter"] == ["m.lora_B.default.weight"] and _report["decision"] == "base_changed", _report
assert _report["base_tensors"] == 3 and _report["adapter_tensors"] == 1, _report

# %% hidden exercise=frozen_base_report points=1 name=nothing_changed_is_no_update
# hint: when no adapter tensor changed (and no base tensor either) the decision is no_update, not frozen.
_snapshot = {"w": torch.arange(4.0), "w.lora_A.default.weight": torch.zeros(1, 4)}
_report = frozen_base_report(_snapshot, {k: v.clone() for k, v in _snapshot.items()})
assert _report["decision"] == "no_update" and _report["changed_adapter"] == [] == _report["changed_base"], _report
_only_base = {"w": torch.arange(4.0)}
assert frozen_base_report(_only_base, {"w": torch.arange(4.0)})["decision"] == "no_update"

# %% hidden exercise=frozen_base_report points=1 name=dtype_and_shape_are_part_of_the_hash
# hint: a cast or a reshape of a base tensor is a change, even with the same values or the same bytes.
_w = torch.arange(6.0)
for _changed in (_w.to(torch.float64), _w.reshape(2, 3), _w.view(torch.int32)):
    _report = frozen_base_report({"w": _w, "x.lora_B.y": torch.zeros(1)}, {"w": _changed, "x.lora_B.y": torch.ones(1)})
    assert _report["changed_base"] == ["w"], (_changed.dtype, tuple(_changed.shape), _report)

# %% hidden exercise=frozen_base_report points=1 name=bits_decide_not_equality
# hint: the hash compares bits: a NaN kept bit for bit is unchanged, and -0.0 replacing 0.0 is a change.
_nan = torch.tensor([float("nan"), 1.0])
_report = frozen_base_report({"w": _nan, "w.lora_A.a": torch.zeros(1)}, {"w": _nan.clone(), "w.lora_A.a": torch.ones(1)})
assert _report["decision"] == "frozen", _report
_report = frozen_base_report({"w": torch.tensor([0.0]), "w.lora_A.a": torch.zeros(1)},
                             {"w": torch.tensor([-0.0]), "w.lora_A.a": torch.ones(1)})
assert _report["changed_base"] == ["w"], _report

# %% hidden exercise=frozen_base_report points=1 name=markers_match_anywhere_in_the_name
# hint: a name is an adapter tensor when a marker stands anywhere in it (peft puts lora_A in the middle); custom markers replace the default ones.
_names = ["base_model.model.layers.0.q_proj.lora_A.default.weight", "layers.0.q_proj.lora_magnitude_vector.default.weight",
          "layers.0.q_proj.base_layer.weight"]
_before = {name: torch.zeros(2) for name in _names}
_after = {name: torch.ones(2) for name in _names}
_report = frozen_base_report(_before, {**_after, _names[2]: torch.zeros(2)})
assert _report["adapter_tensors"] == 2 and _report["decision"] == "frozen", _report
_custom = frozen_base_report(_before, {**_after, _names[2]: torch.zeros(2)}, ("base_layer",))
assert _custom["adapter_tensors"] == 1 and _custom["decision"] == "base_changed", _custom

# %% hidden exercise=frozen_base_report points=1 name=refuses_snapshots_that_do_not_match
# hint: the two snapshots must be non-empty dicts of tensors with the same names; markers a non-empty tuple of non-empty strs.
_ok = {"w": torch.zeros(1)}
for _args in (({"w": torch.zeros(1)}, {"v": torch.zeros(1)}), ({}, {}), (_ok, {"w": [0.0]}), ([("w", torch.zeros(1))], _ok),
              ({"": torch.zeros(1)}, {"": torch.zeros(1)}), ({1: torch.zeros(1)}, {1: torch.zeros(1)}),
              (_ok, _ok, ()), (_ok, _ok, "lora_A"), (_ok, _ok, ("lora_A", "")), (_ok, _ok, ["lora_A"])):
    assert frozen_base_report(_ok, {"w": torch.ones(1)}, ("lora_A",))["changed_base"] == ["w"]  # a valid call
    try:
        frozen_base_report(*_args)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} accepted")

# %% hidden exercise=frozen_base_report points=1 name=a_real_update_through_peft_is_frozen
# hint: on the tiny model, one AdamW step of an all-linear adapter changes every adapter tensor and no base tensor.
_model = lora.with_adapter(TINY, TARGET_SETS["all_linear"], 4)
_snapshot = {name: p.detach().clone() for name, p in _model.named_parameters()}
_optimizer = torch.optim.AdamW([p for p in _model.parameters() if p.requires_grad], lr=1e-2)
_model(input_ids=ids, labels=ids).loss.backward()
_optimizer.step()
_report = frozen_base_report(_snapshot, {name: p.detach().clone() for name, p in _model.named_parameters()})
assert _report["decision"] == "frozen" and len(_report["changed_adapter"]) == _report["adapter_tensors"] == 28, _report
assert _report["base_tensors"] == 26, _report

# %% hidden exercise=frozen_base_report points=2 name=agrees_with_reference_on_generated_snapshots
# hint: on generated snapshots (adapter and base names, values changed, cast, reshaped, NaN kept, signed zeros) the same report.
from hypothesis import strategies as st
_names = ["model.layers.0.q_proj.base_layer.weight", "model.layers.0.q_proj.lora_A.default.weight",
          "model.layers.0.q_proj.lora_B.default.weight", "model.norm.weight", "lm_head.lora_embedding_A.x",
          "model.layers.1.v_proj.lora_magnitude_vector.default.weight", "model.embed_tokens.weight"]
_edits = ["same", "same", "value", "cast", "reshape", "negzero"]


def _tensor(values):
    return torch.tensor(values, dtype=torch.float32)


def _edit(tensor, edit):
    if edit == "value":
        return tensor + 1
    if edit == "cast":
        return tensor.to(torch.float64)
    if edit == "reshape":
        return tensor.reshape(1, -1)
    if edit == "negzero":
        return torch.where(tensor == 0, torch.tensor(-0.0), tensor)
    return tensor.clone()


def _snapshots(chosen, values, edits):
    before = {name: _tensor(values[i % len(values)]) for i, name in enumerate(chosen)}
    return before, {name: _edit(before[name], edits[i % len(edits)]) for i, name in enumerate(chosen)}


_value_lists = st.lists(st.lists(st.sampled_from([0.0, 1.5, -2.0, float("nan")]), min_size=1, max_size=3),
                        min_size=1, max_size=3)
_markers = st.sampled_from([None, ("lora_A", "lora_B", "lora_magnitude_vector", "lora_embedding_A", "lora_embedding_B"),
                            ("base_layer",), ("lora_",)])
_calls = st.tuples(st.lists(st.sampled_from(_names), min_size=1, max_size=6, unique=True), _value_lists,
                   st.lists(st.sampled_from(_edits), min_size=1, max_size=6), _markers).map(
    lambda d: _snapshots(d[0], d[1], d[2]) + (() if d[3] is None else (d[3],)))
def _markers(call):
    return call[2] if len(call) > 2 else ADAPTER_MARKERS


def _changed(before, after, *markers):
    return [name for name in before if before[name].dtype != after[name].dtype or before[name].shape != after[name].shape
            or not torch.equal(before[name].view(-1).view(torch.uint8) if before[name].numel() else before[name],
                               after[name].reshape(-1).view(torch.uint8) if after[name].numel() and
                               after[name].dtype == before[name].dtype else before[name])]


reference.agrees("frozen_base_report", _calls, cases=120, clauses={
    "custom markers": lambda *call: len(call) > 2,
    "a marker in the middle of a name": lambda *call: any(
        marker in name and not name.endswith(marker) for name in call[0] for marker in _markers(call)),
    "a NaN kept bit for bit": lambda *call: any(torch.isnan(t).any() for t in call[0].values()),
    "a cast tensor": lambda *call: any(call[0][n].dtype != call[1][n].dtype for n in call[0]),
    "a reshaped tensor": lambda *call: any(call[0][n].shape != call[1][n].shape for n in call[0]),
    "a zero turned into -0.0": lambda *call: any(
        bool(((call[0][n] == 0) & torch.signbit(call[1][n].reshape(call[0][n].shape) if call[1][n].numel() == call[0][
            n].numel() else call[0][n])).any()) and call[0][n].dtype == call[1][n].dtype for n in call[0]),
    "no adapter tensor": lambda *call: not any(marker in name for name in call[0] for marker in _markers(call)),
})

# %% hidden exercise=frozen_base_report points=1 name=agrees_with_reference_on_generated_invalid_snapshots
# hint: snapshots that are not dicts, are empty, hold non-tensors or name different tensors, and bad markers: the same ValueError.
from hypothesis import strategies as st
_values = st.sampled_from([torch.zeros(2), torch.ones(2), [0.0, 0.0], 0.0, None, torch.zeros(2).numpy()])
_dicts = st.one_of(st.dictionaries(st.sampled_from(["w", "w.lora_A.x", "", "v"]), _values, max_size=3),
                   st.sampled_from([None, [], "w", (("w", torch.zeros(2)),)]))
_markers = st.sampled_from([("lora_A",), (), ("",), "lora_A", ["lora_A"], ("lora_A", 1), None])
from tools.course.grader.clauses import keys, values

_valid_names = st.lists(st.sampled_from(["w", "w.lora_A.x", "v", "m.lora_B.y"]), min_size=1, max_size=3, unique=True)
_valid = _valid_names.flatmap(lambda names: st.tuples(
    st.just({name: torch.zeros(2) for name in names}),
    st.fixed_dictionaries({name: st.sampled_from([torch.zeros(2), torch.ones(2)]) for name in names})))


def _tensors_only(snapshot):
    return all(isinstance(v, torch.Tensor) for v in values(snapshot))


reference.agrees("frozen_base_report", st.one_of(st.tuples(_dicts, _dicts), st.tuples(_dicts, _dicts, _markers), _valid),
                 cases=200, clauses={
    "a snapshot that is not a dict": lambda before, after, *m: not isinstance(before, dict) or not isinstance(after, dict),
    "an empty snapshot": lambda before, after, *m: before == {} or after == {},
    "snapshots naming different tensors": lambda before, after, *m: isinstance(before, dict) and isinstance(
        after, dict) and set(before) != set(after),
    "an empty name": lambda before, after, *m: "" in keys(before) or "" in keys(after),
    "a value that is not a tensor (a list, a float, None, a numpy array)": lambda before, after, *m: not (
        _tensors_only(before) and _tensors_only(after)),
    "markers that are not a tuple": lambda before, after, *m: bool(m) and not isinstance(m[0], tuple),
    "empty markers or an empty marker": lambda before, after, *m: bool(m) and isinstance(m[0], tuple) and (
        not m[0] or "" in m[0]),
    "a marker that is not a str": lambda before, after, *m: bool(m) and isinstance(m[0], tuple) and any(
        not isinstance(x, str) for x in m[0]),
})

# %% hidden exercise=judge_merge points=1 name=thresholds_are_inclusive
# hint: a drift exactly at a threshold takes the better band (accept at 1e-4 in float32; in bfloat16 accept at 2 and tune at 16 spacings of the logit scale: 2**-6 and 2**-3 at scale 1).
_z = torch.zeros(3, dtype=torch.float64)
assert judge_merge(_z, _z + 1e-4, "float32")["decision"] == "accept"
assert judge_merge(_z, _z + 1.5e-4, "float32")["decision"] == "reject"
assert judge_merge(_z, _z + 2.0 ** -6, "bfloat16")["decision"] == "accept"
assert judge_merge(_z, _z + 2.0 ** -3, "bfloat16")["decision"] == "tune"
assert judge_merge(_z, _z + 2.0 ** -3 + 1e-9, "bfloat16")["decision"] == "reject"

# %% hidden exercise=judge_merge points=1 name=bfloat16_bands_are_counted_in_spacings_at_the_logit_scale
# hint: spacing = 2**(floor(log2(scale)) - 7): at scale 10.5 it is 2**-4, so accept up to 0.125 and tune up to 1.0 in absolute difference (thresholds returned relative to the scale).
_u = torch.tensor([10.5, -3.0, 0.0], dtype=torch.float64)
_near = judge_merge(_u, _u + torch.tensor([1.5 * 2 ** -4, 0.0, 0.0], dtype=torch.float64), "bfloat16")
assert _near["decision"] == "accept", _near
assert math.isclose(_near["accept_below"], 2 * 2 ** -4 / 10.5) and math.isclose(_near["tune_below"], 16 * 2 ** -4 / 10.5), _near
assert judge_merge(_u, _u + torch.tensor([0.125, 0.0, 0.0], dtype=torch.float64), "bfloat16")["decision"] == "accept"
assert judge_merge(_u, _u + torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), "bfloat16")["decision"] == "tune"
assert judge_merge(_u, _u + torch.tensor([1.0 + 1e-9, 0.0, 0.0], dtype=torch.float64), "bfloat16")["decision"] == "reject"
_pow2 = judge_merge(torch.tensor([8.0]), torch.tensor([8.0]), "bfloat16")  # a power of two: 2**3 exactly
assert _pow2["accept_below"] == 2 * 2.0 ** -4 / 8 and _pow2["tune_below"] == 16 * 2.0 ** -4 / 8, _pow2

# %% hidden exercise=judge_merge points=1 name=float32_has_no_tune_band
# hint: in float32 anything above 1e-4 is reject, and tune_below is None.
_z = torch.zeros(2, 2)
_result = judge_merge(_z, _z + 0.01, "float32")
assert _result["decision"] == "reject" and _result["tune_below"] is None and _result["accept_below"] == 1e-4, _result

# %% hidden exercise=judge_merge points=1 name=drift_is_relative_to_the_unmerged_scale
# hint: the scale is max |unmerged| (at least 1), taken from the unmerged logits, not from the merged ones.
_unmerged = torch.tensor([20.0, -40.0, 5.0], dtype=torch.float64)
_result = judge_merge(_unmerged, _unmerged + torch.tensor([0.2, 0.0, 0.0], dtype=torch.float64), "bfloat16")
assert _result["logit_scale"] == 40.0 and math.isclose(_result["relative_drift"], 0.005), _result
assert _result["decision"] == "accept", _result
_grown = judge_merge(torch.tensor([2.0, 0.0]), torch.tensor([2.0, 64.0]), "bfloat16")
assert _grown["logit_scale"] == 2.0 and _grown["relative_drift"] == 32.0 and _grown["decision"] == "reject", _grown

# %% hidden exercise=judge_merge points=1 name=small_logits_are_judged_absolutely
# hint: the scale never falls below 1: near-zero logits are judged on their absolute difference.
_result = judge_merge(torch.tensor([0.01, -0.02]), torch.tensor([0.03, -0.02]), "bfloat16")
assert _result["logit_scale"] == 1.0 and _result["decision"] == "tune", _result

# %% hidden exercise=judge_merge points=1 name=the_largest_difference_decides
# hint: one far-off logit among many exact ones decides: the maximum difference, not a mean.
_unmerged = torch.zeros(1000)
_merged = _unmerged.clone()
_merged[17] = 0.5
_result = judge_merge(_unmerged, _merged, "bfloat16")
assert _result["max_abs_diff"] == 0.5 and _result["decision"] == "reject", _result

# %% hidden exercise=judge_merge points=1 name=non_finite_merge_is_reject_with_infinite_difference
# hint: a NaN or an infinity in the merged logits is reject, with max_abs_diff and relative_drift math.inf; non-finite unmerged logits raise.
for _bad in (float("nan"), float("inf"), -float("inf")):
    _result = judge_merge(torch.ones(3), torch.tensor([1.0, _bad, 1.0]), "float32")
    assert _result["decision"] == "reject" and _result["max_abs_diff"] == math.inf == _result["relative_drift"], _result
try:
    judge_merge(torch.tensor([1.0, float("nan")]), torch.ones(2), "float32")
except ValueError:
    pass
else:
    raise AssertionError("non-finite unmerged logits accepted")

# %% hidden exercise=judge_merge points=1 name=refuses_bad_inputs
# hint: only "float32" and "bfloat16"; both logits non-empty floating tensors of the same shape.
for _args in ((torch.ones(2), torch.ones(2), "float16"), (torch.ones(2), torch.ones(2), "bf16"),
              (torch.ones(2), torch.ones(3), "float32"), (torch.ones(2, 1), torch.ones(2), "float32"),
              (torch.ones(2, dtype=torch.long), torch.ones(2, dtype=torch.long), "float32"),
              (torch.ones(0), torch.ones(0), "float32"), ([1.0, 2.0], torch.ones(2), "float32"),
              (torch.ones(2), None, "bfloat16")):
    assert judge_merge(torch.ones(2), torch.ones(2) * 1.25, "bfloat16")["decision"] == "reject"  # a valid call
    try:
        judge_merge(*_args)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} accepted")

# %% hidden exercise=judge_merge points=1 name=bfloat16_merge_of_the_tiny_model
# hint: framework check: peft's bfloat16 merge of the tiny model's adapter lands in a bfloat16 band, judged in bfloat16.
torch.manual_seed(7)
_model = lora.with_adapter(TINY, TARGET_SETS["attention_qv"], RANK)
_model.load_state_dict({name: (torch.randn_like(p) * 0.05 if "lora_B" in name else p) for name, p in _model.state_dict().items()})
_model = _model.to(torch.bfloat16)
with torch.no_grad():
    _unmerged = _model(input_ids=ids).logits.float()
    _merged = _model.merge_and_unload()(input_ids=ids).logits.float()
_result = judge_merge(_unmerged, _merged, "bfloat16")
_spacing = 2.0 ** (math.frexp(_result["logit_scale"])[1] - 8)
assert _result["decision"] in ("accept", "tune") and math.isclose(_result["tune_below"], 16 * _spacing / _result["logit_scale"]), _result
assert type(_result["max_abs_diff"]) is float and type(_result["logit_scale"]) is float, _result

# %% hidden exercise=judge_merge points=2 name=agrees_with_reference_on_generated_logits
# hint: on generated logits (float16 to float64, large and tiny scales, differences in every band, NaN and infinities of either sign at any position of the merged logits) the same judgement.
from hypothesis import strategies as st


def _logits(shape, values, offsets, specials, where, tensor_dtype, dtype):
    size = 1
    for dim in shape:
        size *= dim
    unmerged = torch.tensor([values[i % len(values)] for i in range(size)], dtype=torch.float64).reshape(shape)
    merged = unmerged + torch.tensor([offsets[i % len(offsets)] for i in range(size)], dtype=torch.float64).reshape(shape)
    if specials is not None:
        merged.view(-1)[where % size] = specials  # any position, not only the first
    return unmerged.to(tensor_dtype), merged.to(tensor_dtype), dtype


_calls = st.builds(_logits, st.sampled_from([(1,), (3,), (2, 3), (1, 2, 2)]),
                   st.lists(st.sampled_from([0.0, 0.3, -0.7, 3.0, -12.0, 40.0]), min_size=1, max_size=4),
                   st.lists(st.sampled_from([0.0, 1e-7, 1e-5, 1e-4, 2e-3, 0.0078125, 0.015625, 0.02, 0.0625, 0.125, 0.2, 0.5,
                                             1.0, 3.0]), min_size=1,
                            max_size=4),
                   st.sampled_from([None] * 6 + [float("nan"), float("inf"), float("-inf")]),
                   st.integers(0, 5),
                   st.sampled_from([torch.float64, torch.float32, torch.bfloat16, torch.float16]),
                   st.sampled_from(["float32", "bfloat16"]))
def _bands(unmerged, dtype):
    if dtype == "float32":
        return (1e-4, None)
    scale = max(1.0, unmerged.double().abs().max().item())
    spacing = 2.0 ** (math.frexp(scale)[1] - 8)
    return (2 * spacing / scale, 16 * spacing / scale)


def _drift(unmerged, merged, dtype):
    if not torch.isfinite(merged).all():
        return math.inf
    scale = max(1.0, unmerged.double().abs().max().item())
    return (merged.double() - unmerged.double()).abs().max().item() / scale


reference.agrees("judge_merge", _calls, cases=150, clauses={
    "a NaN or infinity in the merged logits": lambda u, m, d: not bool(torch.isfinite(m).all()),
    "a non-finite merged logit past the first position": lambda u, m, d: bool(torch.isfinite(m.reshape(-1)[:1]).all())
    and not bool(torch.isfinite(m).all()),
    "a negative infinity in the merged logits": lambda u, m, d: bool((m == float("-inf")).any()),
    "bfloat16 drift in the tune band": lambda u, m, d: d == "bfloat16" and _bands(u, d)[0] < _drift(u, m, d) <= _bands(u, d)[1],
    "a drift exactly at a threshold": lambda u, m, d: _drift(u, m, d) in _bands(u, d),
    "a logit scale that is not a power of two": lambda u, m, d: math.frexp(max(1.0, u.double().abs().max().item()))[0] != 0.5,
    "float32 drift above 1e-4 (no tune band)": lambda u, m, d: d == "float32" and 1e-4 < _drift(u, m, d) <= 2 ** -3,
    "logits scale above 1": lambda u, m, d: u.double().abs().max().item() > 1,
    "logits all below 1 in size": lambda u, m, d: u.double().abs().max().item() < 1,
    "tensors in float16 or bfloat16": lambda u, m, d: u.dtype in (torch.float16, torch.bfloat16),
    "a tensor of more than one dimension": lambda u, m, d: u.dim() > 1,
})

# %% hidden exercise=judge_merge points=1 name=agrees_with_reference_on_generated_invalid_logits
# hint: wrong dtype names, non-tensors, integer or empty tensors, shape mismatches and non-finite unmerged logits: the same ValueError.
from hypothesis import strategies as st
_tensors = st.sampled_from([torch.ones(2), torch.ones(2, dtype=torch.float64), torch.ones(3), torch.ones(1, 2),
                            torch.ones(2, dtype=torch.int64), torch.ones(0), torch.tensor([1.0, float("nan")]),
                            torch.tensor([float("inf"), 0.0]), [1.0, 1.0], None, 1.0])
_dtypes = st.sampled_from(["float32", "bfloat16", "float16", "fp32", "Float32", None, torch.float32])
_valid = st.tuples(st.sampled_from([torch.zeros(3), torch.ones(2, 2) * 3]), st.sampled_from([0.0, 1e-3, 0.1, 1.0])).map(
    lambda drawn: (drawn[0], drawn[0] + drawn[1])).flatmap(
    lambda pair: st.tuples(st.just(pair[0]), st.just(pair[1]), st.sampled_from(["float32", "bfloat16"])))


def _floating(value):
    return isinstance(value, torch.Tensor) and value.is_floating_point()


reference.agrees("judge_merge", st.one_of(st.tuples(_tensors, _tensors, _dtypes), _valid), cases=200, clauses={
    "a dtype name other than float32 and bfloat16": lambda u, m, d: d not in ("float32", "bfloat16"),
    "a dtype given as a torch.dtype": lambda u, m, d: isinstance(d, torch.dtype),
    "logits that are not a tensor": lambda u, m, d: not isinstance(u, torch.Tensor) or not isinstance(m, torch.Tensor),
    "integer logits": lambda u, m, d: any(isinstance(t, torch.Tensor) and not t.is_floating_point() for t in (u, m)),
    "empty logits": lambda u, m, d: any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in (u, m)),
    "shapes that differ": lambda u, m, d: _floating(u) and _floating(m) and u.shape != m.shape,
    "non-finite unmerged logits": lambda u, m, d: _floating(u) and u.numel() > 0 and not bool(torch.isfinite(u).all()),
    "non-finite merged logits only (valid: reject)": lambda u, m, d: _floating(u) and _floating(m) and bool(
        torch.isfinite(u).all()) and not bool(torch.isfinite(m).all()),
})
