# %% hidden exercise=estimate_saved_activation_bytes points=1 name=every_part_follows_the_formula
# hint: each of the six parts has its own formula in the docstring; check the per-layer groups (8h, 2*kv*d, 4i, a, 2) one by one and keep everything in whole bytes.
gqa = {"hidden_size": 12, "intermediate_size": 20, "num_hidden_layers": 3, "num_attention_heads": 6,
       "num_key_value_heads": 2, "head_dim": 2, "vocab_size": 7}
parts = estimate_saved_activation_bytes(gqa, 2, 5, "baseline", dtype_bytes=2)
tokens = 10
assert parts["tokens"] == tokens
assert parts["per_layer_bytes"] == 2 * tokens * (8 * 12 + 2 * 2 * 2 + 4 * 20 + 6 + 2) == 3840
assert parts["layer_input_bytes"] == 2 * tokens * 12
assert parts["outside_layers_bytes"] == 2 * tokens * (3 * 12 + 7 + 1)
assert parts["rotary_bytes"] == 2 * 2 * 5 * 2
assert parts["token_id_bytes"] == 16 * tokens
assert parts["saved_bytes"] == 3 * 3840 + 880 + 40 + 160
assert all(type(value) is int for value in parts.values()), {key: type(value) for key, value in parts.items()}

# %% hidden exercise=estimate_saved_activation_bytes points=1 name=checkpoint_keeps_layer_inputs_without_cos_sin
# hint: with recomputation each layer keeps only its input (T*h elements); cos and sin are rebuilt in the recomputation, so they are not kept, while the loss side and the token ids still are.
arch = {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 5, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": 4, "vocab_size": 50}
ckpt = estimate_saved_activation_bytes(arch, 1, 9, "checkpoint")
expected = 5 * ckpt["layer_input_bytes"] + ckpt["outside_layers_bytes"] + ckpt["token_id_bytes"]
assert ckpt["saved_bytes"] == expected == ckpt["device_bytes"], (ckpt, expected)
assert ckpt["host_bytes"] == 0
hybrid = estimate_saved_activation_bytes(arch, 1, 9, "hybrid")
assert hybrid["saved_bytes"] == expected and hybrid["host_bytes"] == expected and hybrid["device_bytes"] == 0

# %% hidden exercise=estimate_saved_activation_bytes points=1 name=offload_strategies_keep_nothing_on_the_device
# hint: offload and hybrid keep the same amount as baseline and checkpoint, but on the host; every part is still reported.
arch = {"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 11}
by_name = {name: estimate_saved_activation_bytes(arch, 3, 4, name) for name in ("baseline", "checkpoint", "offload", "hybrid")}
assert by_name["offload"]["host_bytes"] == by_name["baseline"]["device_bytes"] == by_name["baseline"]["saved_bytes"]
assert by_name["offload"]["device_bytes"] == 0 and by_name["baseline"]["host_bytes"] == 0
assert by_name["hybrid"]["host_bytes"] == by_name["checkpoint"]["device_bytes"] > 0
for name, result in by_name.items():
    assert result["device_bytes"] + result["host_bytes"] == result["saved_bytes"], name
    assert result["rotary_bytes"] == by_name["baseline"]["rotary_bytes"], name

# %% hidden exercise=estimate_saved_activation_bytes points=1 name=cos_sin_ignore_the_batch_and_ids_are_int64
# hint: cos and sin have one row per position, not per sequence in the batch; the input ids and the labels are two int64 tensors whatever the activation dtype.
arch = {"hidden_size": 4, "intermediate_size": 4, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 2, "head_dim": 2, "vocab_size": 5}
one = estimate_saved_activation_bytes(arch, 1, 6, "baseline", dtype_bytes=2)
four = estimate_saved_activation_bytes(arch, 4, 6, "baseline", dtype_bytes=2)
assert four["rotary_bytes"] == one["rotary_bytes"] == 2 * 2 * 6 * 2
assert four["token_id_bytes"] == 16 * 24 and one["token_id_bytes"] == 16 * 6
assert four["saved_bytes"] == 4 * one["saved_bytes"] - 3 * one["rotary_bytes"]

# %% hidden exercise=estimate_saved_activation_bytes points=1 name=every_argument_is_checked
# hint: each argument has its own check (strategy, batch_size, seq_len, dtype_bytes, and every one of the seven architecture numbers); a bool is not an int and a float is not an int either.
arch = {"hidden_size": 4, "intermediate_size": 4, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 2, "head_dim": 2, "vocab_size": 5}
bad_calls = [
    (arch, 1, 4, "checkpointing", 4), (arch, 0, 4, "baseline", 4), (arch, True, 4, "baseline", 4),
    (arch, 1, 2.0, "baseline", 4), (arch, 1, 4, "baseline", 0), (arch, 1, 4, "baseline", False),
    ([("hidden_size", 4)], 1, 4, "baseline", 4), (None, 1, 4, "baseline", 4),
]
for key in arch:
    bad_calls.append(({**arch, key: 0}, 1, 4, "baseline", 4))
    bad_calls.append(({**arch, key: True}, 1, 4, "baseline", 4))
    bad_calls.append(({name: value for name, value in arch.items() if name != key}, 1, 4, "offload", 4))
bad_calls.append(({**arch, "vocab_size": 5.0}, 1, 4, "hybrid", 4))
valid = estimate_saved_activation_bytes(arch, 1, 4, "hybrid", 2)  # the valid call every case above breaks in one place
assert valid["device_bytes"] == 0 and valid["host_bytes"] == valid["saved_bytes"] == (
    2 * (2 * 4 * 4) + 2 * 4 * (3 * 4 + 5 + 1) + 16 * 4), valid  # L * input + outside + token ids, p = 2
for call in bad_calls:
    try:
        estimate_saved_activation_bytes(*call)
    except ValueError:
        continue
    raise AssertionError(f"estimate_saved_activation_bytes{call!r} must raise ValueError")

# %% hidden exercise=estimate_saved_activation_bytes points=2 name=agrees_with_reference_on_generated_architectures
# hint: any architecture, sizes, strategy and dtype, valid or not: the same dict of ints, or a ValueError, as the contract says; the arch dict must not be changed.
from hypothesis import strategies as st

ARCH_NAMES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size")
STRATEGY_NAMES = ["baseline", "checkpoint", "offload", "hybrid"]
whole = st.integers(min_value=1, max_value=4096)


def archs(value):
    return st.fixed_dictionaries({name: value for name in ARCH_NAMES},
                                 optional={"model_type": st.just("qwen2"), "rope_theta": st.floats(1.0, 1e6)})


valid = st.tuples(archs(whole), whole, whole, st.sampled_from(STRATEGY_NAMES), st.sampled_from([1, 2, 4]))


def spoiled(args, position, value):
    """One argument made invalid: positions 0-6 are the architecture numbers, then batch, seq, strategy, dtype."""
    args = list(args)
    if position < len(ARCH_NAMES):
        args[0] = {**args[0], ARCH_NAMES[position]: value}
    elif position == len(ARCH_NAMES) + 4:
        args[0] = value if value is None or isinstance(value, str) else [args[0]]
    elif position == len(ARCH_NAMES) + 5:
        args[0] = {k: v for k, v in args[0].items() if k != ARCH_NAMES[value % len(ARCH_NAMES)]} \
            if isinstance(value, int) else {}
    else:
        args[position - len(ARCH_NAMES) + 1] = value
    return tuple(args)


from tools.course.grader.clauses import each_of

ODD_VALUES = [0, -2, True, False, 2.0, 1.5, None, "4"]
entries = [("valid", n) for n in range(60)] + [(position, value) for position in range(len(ARCH_NAMES) + 6)
                                               for value in ODD_VALUES]


def spoiled_case(entry, rng):
    """A valid call (sizes up to 4096, any strategy and dtype), or one with exactly this argument spoiled."""
    arch = {name: rng.randint(1, 4096) for name in ARCH_NAMES}
    if rng.random() < 0.5:
        arch.update(model_type="qwen2", rope_theta=rng.uniform(1.0, 1e6))
    args = (arch, rng.randint(1, 4096), rng.randint(1, 4096), rng.choice(STRATEGY_NAMES), rng.choice([1, 2, 4]))
    position, value = entry
    return args if position == "valid" else spoiled(args, position, value)
from tools.course.grader.clauses import is_bool


def _arch_values(arch):
    return [arch.get(name) for name in ARCH_NAMES] if isinstance(arch, dict) else []


reference.agrees("estimate_saved_activation_bytes", each_of(entries, spoiled_case), cases=len(entries), clauses={
    **{f"strategy {name}": (lambda name: lambda a, b, s, strategy, p: strategy == name)(name) for name in STRATEGY_NAMES},
    "extra architecture keys": lambda arch, *rest: isinstance(arch, dict) and "model_type" in arch,
    "dtype_bytes other than 4": lambda a, b, s, strategy, p: p != 4,
    "arch not a dict": lambda arch, *rest: not isinstance(arch, dict),
    "an architecture key missing": lambda arch, *rest: isinstance(arch, dict) and any(n not in arch for n in ARCH_NAMES),
    "an architecture number that is a bool": lambda arch, *rest: any(is_bool(v) for v in _arch_values(arch)),
    "an architecture number < 1": lambda arch, *rest: any(type(v) is int and v < 1 for v in _arch_values(arch)),
    "an architecture number that is a float or text": lambda arch, *rest: any(
        isinstance(v, (float, str)) for v in _arch_values(arch)),
    "a batch_size that is a bool or not an int >= 1": lambda a, b, *rest: is_bool(b) or not isinstance(b, int) or b < 1,
    "a seq_len that is a bool or not an int >= 1": lambda a, b, seq, *rest: is_bool(seq) or not isinstance(seq, int) or seq < 1,
    "an unknown strategy": lambda a, b, s, strategy, p: strategy not in STRATEGY_NAMES,
    "a dtype_bytes that is a bool or not an int >= 1": lambda a, b, s, strategy, p: is_bool(p) or not isinstance(p, int) or p < 1,
})

# %% hidden exercise=saved_tensor_ledger points=1 name=parameters_are_counted_but_never_as_bytes
# hint: a saved weight (or its transposed view) shares storage with a parameter: count it as a parameter and add no bytes for it; every other saved tensor is an activation.
from tools.chapters.saved_tensor_probes import squared_sum

torch.manual_seed(3)
two_layers = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
x = torch.randn(5, 4)
ledger = saved_tensor_ledger(two_layers, x, squared_sum)
# the first layer saves x; the second saves its input and (its input needs a gradient) its weight, transposed;
# pow saves the output
assert ledger["parameter_tensors"] == 1 and ledger["activation_tensors"] == 3, ledger
assert ledger["saved_tensors"] == 4 and ledger["activation_storages"] == 3
expected = (5 * 4 + 5 * 3 + 5 * 2) * 4
assert ledger["activation_bytes"] == expected and ledger["device_bytes"] == {"cpu": expected}, (ledger, expected)

# %% hidden exercise=saved_tensor_ledger points=1 name=one_storage_counts_once_whatever_its_views
# hint: two saved views of one storage (a slice is a view) keep the whole storage alive once: key the bytes by the storage address, and take the storage's size, not the view's.
from tools.chapters.saved_tensor_probes import SlicesModule, summed

x = torch.arange(12.0).reshape(3, 4)
ledger = saved_tensor_ledger(SlicesModule(), x, summed)
assert ledger["saved_tensors"] == 3 and ledger["parameter_tensors"] == 1 and ledger["activation_tensors"] == 2, ledger
assert ledger["activation_storages"] == 1 and ledger["activation_bytes"] == 48 == ledger["device_bytes"]["cpu"], ledger
wider = saved_tensor_ledger(SlicesModule(), x.double(), summed)
assert wider["activation_bytes"] == 96 and wider["activation_storages"] == 1, wider  # the storage of a float64 input

# %% hidden exercise=saved_tensor_ledger points=1 name=unpack_counts_backward_and_nothing_moves
# hint: unpack runs during backward (after leaving the hooks context) and returns what it got; the gradients must be those of a step without hooks.
from tools.chapters.saved_tensor_probes import square_mean

torch.manual_seed(5)
hooked = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
plain = copy.deepcopy(hooked)
batch = torch.randn(6, 3)
kept = batch.clone()
ledger = saved_tensor_ledger(hooked, batch, square_mean)
plain(batch).square().mean().backward()
assert ledger["unpacked"] == ledger["saved_tensors"] > 0, ledger
for mine, theirs in zip(hooked.parameters(), plain.parameters()):
    assert mine.grad is not None and torch.equal(mine.grad, theirs.grad)
assert torch.equal(batch, kept)

# %% hidden exercise=saved_tensor_ledger points=1 name=types_devices_and_an_empty_ledger
# hint: the loss is a Python float and every count an int; bytes are grouped by str(device); a step that saves nothing has an empty device_bytes dict.
from tools.chapters.saved_tensor_probes import summed, weight_only

torch.manual_seed(7)
ledger = saved_tensor_ledger(nn.Linear(2, 2), torch.randn(3, 2), summed)
assert type(ledger["loss"]) is float
for key in ("saved_tensors", "parameter_tensors", "activation_tensors", "activation_storages", "activation_bytes",
            "unpacked"):
    assert type(ledger[key]) is int, (key, type(ledger[key]))
assert list(ledger["device_bytes"]) == ["cpu"] and type(ledger["device_bytes"]["cpu"]) is int
nothing = saved_tensor_ledger(nn.Linear(2, 2), torch.randn(3, 2), weight_only)
assert nothing["device_bytes"] == {} and nothing["activation_bytes"] == 0 and nothing["activation_storages"] == 0

# %% hidden exercise=saved_tensor_ledger points=1 name=ledger_checks_module_then_loss
# hint: refuse something that is not a module before calling loss_fn, and a loss that is not a 0-dim floating tensor requiring grad before backward, both with ValueError.
from tools.chapters.saved_tensor_probes import column_sums, detached_sum, integer_constant, must_not_run, summed

# must_not_run raises RuntimeError when called: beside something that is not a module, loss_fn must not run
for module, loss_fn in (("not a module", must_not_run), (None, must_not_run),
                        (nn.Linear(2, 2), column_sums),
                        (nn.Linear(2, 2), detached_sum),
                        (nn.Linear(2, 2), integer_constant)):
    try:
        saved_tensor_ledger(module, torch.ones(1, 2), loss_fn)
    except ValueError:
        continue
    raise AssertionError(f"saved_tensor_ledger({module!r}, ...) must raise ValueError")
valid = saved_tensor_ledger(nn.Linear(2, 2), torch.ones(1, 2), summed)  # a valid call beside the refused ones
assert valid["activation_bytes"] == 8 and valid["unpacked"] == valid["saved_tensors"] >= 1, valid

# %% hidden exercise=saved_tensor_ledger points=2 name=ledger_agrees_with_reference_on_generated_modules
# hint: any small stack of layers, batch and loss function, valid or not: the same ledger (counts, bytes per device, loss) or the same ValueError.
from hypothesis import strategies as st

from tools.chapters.saved_tensor_probes import detached, row_losses, softplus_sum, square_mean

LAYERS = {"tanh": lambda width: nn.Tanh(), "relu": lambda width: nn.ReLU(), "sigmoid": lambda width: nn.Sigmoid(),
          "gelu": lambda width: nn.GELU(), "norm": lambda width: nn.LayerNorm(width), "none": lambda width: nn.Identity()}


def stack_case(widths, kinds, rows, seed, loss_fn, replacement):
    torch.manual_seed(seed)
    layers = []
    for (width_in, width_out), kind in zip(zip(widths, widths[1:]), kinds):
        layers += [nn.Linear(width_in, width_out), LAYERS[kind](width_out)]
    batch = torch.randn(rows, widths[0], generator=torch.Generator().manual_seed(seed))
    return (nn.Sequential(*layers) if replacement is None else replacement, batch, loss_fn)


stack_cases = st.builds(
    stack_case, widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    kinds=st.lists(st.sampled_from(sorted(LAYERS)), min_size=3, max_size=3), rows=st.integers(1, 4),
    seed=st.integers(0, 2**16), loss_fn=st.sampled_from([square_mean] * 4 + [softplus_sum] * 2 + [row_losses, detached]),
    replacement=st.sampled_from([None] * 8 + ["a module", {"weight": 1.0}]))
reference.agrees("saved_tensor_ledger", stack_cases, cases=80, check_inputs=False, clauses={
    "a module that is not a module": lambda module, batch, loss_fn: not isinstance(module, nn.Module),
    "a loss that is not 0-dim": lambda module, batch, loss_fn: isinstance(module, nn.Module) and loss_fn is row_losses,
    "a loss that does not require grad": lambda module, batch, loss_fn: isinstance(module, nn.Module) and loss_fn is detached,
    "a valid step": lambda module, batch, loss_fn: isinstance(module, nn.Module) and loss_fn in (square_mean, softplus_sum),
    "a layer norm (saves its statistics)": lambda module, *rest: isinstance(module, nn.Module) and any(
        isinstance(m, nn.LayerNorm) for m in module.modules()),
    "a layer that saves nothing of its own (identity)": lambda module, *rest: isinstance(module, nn.Module) and any(
        isinstance(m, nn.Identity) for m in module.modules()),
})

# %% hidden exercise=offloaded_step points=1 name=gradients_match_a_step_without_hooks
# hint: unpack must give back exactly what pack received, on the device it came from; only where the tensor waits may change, never its value, dtype or shape.
from tools.chapters.saved_tensor_probes import square_mean

torch.manual_seed(11)
offloaded = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.GELU(), nn.Linear(6, 2)).double()
plain = copy.deepcopy(offloaded)
batch = torch.randn(5, 4, dtype=torch.float64)
loss = plain(batch).pow(2).mean()
loss.backward()
result = offloaded_step(offloaded, batch, square_mean)
assert math.isclose(result["loss"], loss.item(), rel_tol=1e-12)
for mine, theirs in zip(offloaded.parameters(), plain.parameters()):
    assert mine.grad.dtype == torch.float64 and torch.allclose(mine.grad, theirs.grad, rtol=1e-12, atol=0)

# %% hidden exercise=offloaded_step points=1 name=host_copy_is_a_real_copy
# hint: on a CPU, tensor.cpu() and tensor.to("cpu") return the tensor itself; allocate a new host buffer and copy into it, so a later in-place change cannot reach the saved value.
from tools.chapters.saved_tensor_probes import ChangesWhatItSaved, forward_only

inputs = torch.randn(4, 2, generator=torch.Generator().manual_seed(17))
# sigmoid, then the sum of squares; the saved output is doubled in place afterwards
offloaded, plain = (ChangesWhatItSaved(13, 2, 3, activation="sigmoid", power=2, factor=2.0) for _ in range(2))
offloaded_step(offloaded, inputs, forward_only)
y = torch.sigmoid(plain.linear(inputs))
(y * y).sum().backward()
assert torch.allclose(offloaded.linear.weight.grad, plain.linear.weight.grad), "the saved tensor changed after pack"

# %% hidden exercise=offloaded_step points=1 name=one_copy_per_pack_and_parameters_stay
# hint: every saved activation is copied at each pack (views of one storage are copied separately, each with its own size); parameters stay where they are and are only counted.
from tools.chapters.saved_tensor_probes import ThreeViews, float_sum

x = torch.arange(12.0, dtype=torch.float16).reshape(3, 4)  # saved whole, as its first row and as its last 3 columns
result = offloaded_step(ThreeViews(), x, float_sum)
assert result["host_copies"] == 3 and result["restored_tensors"] == 3, result
assert result["host_bytes"] == (12 + 4 + 9) * 2, result
assert result["kept_parameter_tensors"] == 1, result
assert type(result["loss"]) is float and all(type(result[key]) is int for key in result if key != "loss")

# %% hidden exercise=offloaded_step points=1 name=offload_checks_module_then_loss
# hint: the same checks as the ledger: a module first (before loss_fn runs), then a 0-dim floating loss that requires grad, both with ValueError.
from tools.chapters.saved_tensor_probes import detached_sum, forward_only, must_not_run, summed

# must_not_run raises RuntimeError when called: beside something that is not a module, loss_fn must not run
for module, loss_fn in (([nn.Linear(2, 2)], must_not_run), (3, must_not_run),
                        (nn.Linear(2, 2), forward_only),
                        (nn.Linear(2, 2), detached_sum)):
    try:
        offloaded_step(module, torch.ones(1, 2), loss_fn)
    except ValueError:
        continue
    raise AssertionError(f"offloaded_step({module!r}, ...) must raise ValueError")
valid = offloaded_step(nn.Linear(2, 2), torch.ones(3, 2), summed)  # a valid call beside the refused ones
assert valid["host_copies"] == valid["restored_tensors"] and valid["host_bytes"] >= 24, valid

# %% hidden exercise=offloaded_step points=2 name=offload_agrees_with_reference_on_generated_modules
# hint: any small stack of layers, batch and loss function, valid or not: the same copies, bytes, restores and loss, or the same ValueError.
from hypothesis import strategies as st

from tools.chapters.saved_tensor_probes import detached, row_losses, softplus_sum, square_mean

LAYERS = {"tanh": lambda width: nn.Tanh(), "relu": lambda width: nn.ReLU(), "sigmoid": lambda width: nn.Sigmoid(),
          "gelu": lambda width: nn.GELU(), "norm": lambda width: nn.LayerNorm(width), "none": lambda width: nn.Identity()}


def stack_case(widths, kinds, rows, seed, loss_fn, dtype, replacement):
    torch.manual_seed(seed)
    layers = []
    for (width_in, width_out), kind in zip(zip(widths, widths[1:]), kinds):
        layers += [nn.Linear(width_in, width_out), LAYERS[kind](width_out)]
    module = nn.Sequential(*layers).to(dtype)
    batch = torch.randn(rows, widths[0], generator=torch.Generator().manual_seed(seed)).to(dtype)
    return (module if replacement is None else replacement, batch, loss_fn)


stack_cases = st.builds(
    stack_case, widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    kinds=st.lists(st.sampled_from(sorted(LAYERS)), min_size=3, max_size=3), rows=st.integers(1, 4),
    seed=st.integers(0, 2**16), loss_fn=st.sampled_from([square_mean] * 4 + [softplus_sum] * 2 + [row_losses, detached]),
    dtype=st.sampled_from([torch.float32, torch.float32, torch.float64]),
    replacement=st.sampled_from([None] * 8 + ["a module", {"weight": 1.0}]))
reference.agrees("offloaded_step", stack_cases, cases=80, check_inputs=False, clauses={
    "a module that is not a module": lambda module, batch, loss_fn: not isinstance(module, nn.Module),
    "a loss that is not 0-dim": lambda module, batch, loss_fn: isinstance(module, nn.Module) and loss_fn is row_losses,
    "a loss that does not require grad": lambda module, batch, loss_fn: isinstance(module, nn.Module) and loss_fn is detached,
    "a valid step": lambda module, batch, loss_fn: isinstance(module, nn.Module) and loss_fn in (square_mean, softplus_sum),
    "float64 layers": lambda module, batch, loss_fn: batch.dtype == torch.float64,
    "a layer norm": lambda module, *rest: isinstance(module, nn.Module) and any(
        isinstance(m, nn.LayerNorm) for m in module.modules()),
})

# %% hidden exercise=decide_strategy_handoff points=1 name=partial_failures_force_a_rerun_baseline_first
# hint: a partial OOM or partial failure means incomplete evidence, and so does an ok record short of repeats; list the baseline first when it is incomplete, then the others in input order.
def g0_record(name, status="ok", runs=3, verified=True, peak=500.0):
    return {"name": name, "status": status, "successful_runs": runs, "execution_path_verified": verified,
            "peak_memory_mb": peak}


result = decide_strategy_handoff([g0_record("hybrid", "partial_failed", 1), g0_record("baseline", "partial_oom", 2),
                                  g0_record("checkpoint", "ok", 2), g0_record("offload", "failed", 0)])
assert result == {"status": "rerun_required", "reason": "incomplete_repeats", "eligible_candidates": [],
                  "rerun_candidates": ["baseline", "hybrid", "checkpoint"], "failed_candidates": ["offload"],
                  "next_action": "repeat_paired_runs_with_a_new_label"}, result
short_baseline = decide_strategy_handoff([g0_record("baseline", runs=1), g0_record("checkpoint")], minimum_repeats=2)
assert short_baseline["rerun_candidates"] == ["baseline"]
partial_but_enough = decide_strategy_handoff([g0_record("baseline"), g0_record("offload", "partial_oom", 3),
                                              g0_record("hybrid", "partial_failed", 5)])
assert partial_but_enough["status"] == "rerun_required", partial_but_enough
assert partial_but_enough["rerun_candidates"] == ["offload", "hybrid"], partial_but_enough

# %% hidden exercise=decide_strategy_handoff points=1 name=whole_failures_are_kept_not_rerun
# hint: a strategy that never succeeded is a result, not a gap: list it among the failures in every outcome, never ask for its rerun and never hand it off.
def g0_record(name, status="ok", runs=3, verified=True, peak=500.0):
    return {"name": name, "status": status, "successful_runs": runs, "execution_path_verified": verified,
            "peak_memory_mb": peak}


result = decide_strategy_handoff([g0_record("baseline"), g0_record("offload", "oom", 0, True, 10.0),
                                  g0_record("hybrid", "failed", 0, True, 20.0), g0_record("checkpoint")])
assert result["status"] == "ready_for_budget_review" and result["eligible_candidates"] == ["checkpoint"]
assert result["failed_candidates"] == ["offload", "hybrid"] and result["rerun_candidates"] == []
only_failures = decide_strategy_handoff([g0_record("baseline"), g0_record("offload", "oom", 0)])
assert only_failures["status"] == "no_valid_candidate" and only_failures["failed_candidates"] == ["offload"]

# %% hidden exercise=decide_strategy_handoff points=1 name=eligible_needs_exact_verification_and_a_measured_peak
# hint: only execution_path_verified exactly True counts (1 or "yes" do not), and the device peak must be a finite number: None (a CPU run), NaN, infinity or a bool is no measurement.
def g0_record(name, status="ok", runs=3, verified=True, peak=500.0):
    return {"name": name, "status": status, "successful_runs": runs, "execution_path_verified": verified,
            "peak_memory_mb": peak}


result = decide_strategy_handoff([
    g0_record("baseline", peak=None), g0_record("a", verified=1), g0_record("b", verified="yes"),
    g0_record("c", peak=None), g0_record("d", peak=float("nan")), g0_record("e", peak=float("inf")),
    g0_record("f", peak=True), g0_record("g", peak=300), g0_record("h", peak=250.5),
])
assert result["status"] == "ready_for_budget_review" and result["eligible_candidates"] == ["g", "h"], result
none_left = decide_strategy_handoff([g0_record("baseline"), g0_record("a", verified=False), g0_record("c", peak=None)])
assert none_left == {"status": "no_valid_candidate", "reason": "no_measured_verified_candidate",
                     "eligible_candidates": [], "rerun_candidates": [], "failed_candidates": [],
                     "next_action": "repair_strategy_execution_or_measure_on_a_gpu"}, none_left

# %% hidden exercise=decide_strategy_handoff points=1 name=exact_minimum_is_enough_and_the_input_is_unchanged
# hint: successful_runs equal to minimum_repeats is complete; the function reads the records and never changes them.
records = [{"name": "baseline", "status": "ok", "successful_runs": 2, "execution_path_verified": True,
            "peak_memory_mb": 100.0},
           {"name": "checkpoint", "status": "ok", "successful_runs": 2, "execution_path_verified": True,
            "peak_memory_mb": 80.0}]
snapshot = copy.deepcopy(records)
assert decide_strategy_handoff(records, minimum_repeats=2)["status"] == "ready_for_budget_review"
assert decide_strategy_handoff(records, minimum_repeats=3)["rerun_candidates"] == ["baseline", "checkpoint"]
assert decide_strategy_handoff(records, 1)["eligible_candidates"] == ["checkpoint"]
assert records == snapshot
alone = decide_strategy_handoff(records[:1], 1)
assert alone["status"] == "no_valid_candidate" and alone["eligible_candidates"] == []

# %% hidden exercise=decide_strategy_handoff points=1 name=malformed_input_raises_value_error
# hint: check minimum_repeats and every record (a list of dicts, distinct non-empty names, exactly one baseline, a known status, successful_runs an int >= 0) before deciding anything.
good = [{"name": "baseline", "status": "ok", "successful_runs": 3, "execution_path_verified": True,
         "peak_memory_mb": 1.0},
        {"name": "checkpoint", "status": "partial_oom", "successful_runs": 1, "execution_path_verified": True,
         "peak_memory_mb": 1.0}]
bad_calls = [(good, 0), (good, True), (good, 2.5), (good, "3"), (tuple(good), 3), ([*good, "hybrid"], 3),
             (good[1:], 3), ([good[0], good[0]], 3), ([good[0], {**good[1], "name": ""}], 3),
             ([good[0], {**good[1], "name": None}], 3), ([good[0], {**good[1], "status": "done"}], 3),
             ([good[0], {**good[1], "successful_runs": -1}], 3), ([good[0], {**good[1], "successful_runs": True}], 3),
             ([good[0], {**good[1], "successful_runs": 1.0}], 3), ([{**good[0], "status": "skipped"}, good[1]], 3),
             ([good[0], {**good[1], "name": "baseline"}], 3)]
valid = decide_strategy_handoff(good, 1)  # the valid call every case above breaks in one place
assert valid["status"] == "rerun_required" and valid["rerun_candidates"] == ["checkpoint"], valid
for candidates, minimum in bad_calls:
    try:
        decide_strategy_handoff(candidates, minimum)
    except ValueError:
        continue
    raise AssertionError(f"decide_strategy_handoff({candidates!r}, {minimum!r}) must raise ValueError")

# %% hidden exercise=decide_strategy_handoff points=2 name=agrees_with_reference_on_generated_g0_records
# hint: any set of G0 records and minimum, valid or not: the same decision with the same lists in the same order, or the same ValueError; the records must not be changed.
from hypothesis import strategies as st

statuses = st.sampled_from(["ok"] * 4 + ["partial_oom", "partial_failed", "oom", "failed", "done"])
successes = st.one_of(st.integers(0, 5), st.integers(0, 5), st.sampled_from([True, -1, 2.0]))
verified = st.sampled_from([True, True, True, False, None, 1, "yes"])
peaks = st.one_of(st.floats(1.0, 1e4), st.floats(1.0, 1e4), st.sampled_from([None, float("nan"), float("inf"), True, 700]))


def g0_records(name):
    return st.fixed_dictionaries({"name": st.just(name), "status": statuses, "successful_runs": successes,
                                  "execution_path_verified": verified, "peak_memory_mb": peaks})


names = st.lists(st.sampled_from(["checkpoint", "offload", "hybrid", "selective", "baseline", ""]), max_size=4)
record_sets = names.flatmap(lambda others: st.tuples(*[g0_records(name) for name in ["baseline", *others]]))
shuffled = record_sets.flatmap(lambda records: st.permutations(list(records)))
minimums = st.one_of(st.integers(1, 4), st.integers(1, 4), st.sampled_from([0, True, 2.5]))
containers = st.one_of(shuffled, shuffled, shuffled, shuffled.map(tuple),
                       shuffled.map(lambda records: records + ["hybrid"]),
                       shuffled.map(lambda records: records + [{**records[0], "name": None}]))

from tools.course.grader.clauses import dicts, is_bool


def _records(candidates):
    return dicts(candidates)


def _complete(record, minimum):
    return record["status"] == "ok" and type(record["successful_runs"]) is int and record["successful_runs"] >= minimum


reference.agrees("decide_strategy_handoff", st.tuples(containers, minimums), cases=250, clauses={
    "candidates a tuple": lambda c, m: isinstance(c, tuple),
    "a candidate that is not a dict": lambda c, m: isinstance(c, list) and any(not isinstance(r, dict) for r in c),
    "a name that is empty or not a str": lambda c, m: any(not isinstance(r["name"], str) or not r["name"]
                                                        for r in _records(c)),
    "a repeated name": lambda c, m: len([r["name"] for r in _records(c)]) > len({repr(r["name"]) for r in _records(c)}),
    "more than one baseline": lambda c, m: [r["name"] for r in _records(c)].count("baseline") > 1,
    "an unknown status": lambda c, m: any(r["status"] == "done" for r in _records(c)),
    "successful_runs a bool, a float or negative": lambda c, m: any(
        is_bool(r["successful_runs"]) or not isinstance(r["successful_runs"], int) or r["successful_runs"] < 0
        for r in _records(c)),
    "minimum_repeats a bool, a float or < 1": lambda c, m: is_bool(m) or not isinstance(m, int) or m < 1,
    "an incomplete baseline": lambda c, m: type(m) is int and not is_bool(m) and any(
        r["name"] == "baseline" and not _complete(r, m) for r in _records(c)),
    "a whole failure kept as failed": lambda c, m: any(r["status"] in ("oom", "failed") and r["name"] != "baseline"
                                                       for r in _records(c)),
    "ok with too few successful runs": lambda c, m: type(m) is int and any(
        r["status"] == "ok" and type(r["successful_runs"]) is int and r["successful_runs"] < m for r in _records(c)),
    "a complete candidate verified by 1 or yes (not True)": lambda c, m: type(m) is int and any(
        _complete(r, m) and r["execution_path_verified"] in (1, "yes") and r["execution_path_verified"] is not True
        for r in _records(c)),
    "a complete verified candidate without a finite peak": lambda c, m: type(m) is int and any(
        _complete(r, m) and r["execution_path_verified"] is True and (
            r["peak_memory_mb"] is None or is_bool(r["peak_memory_mb"]) or r["peak_memory_mb"] != r["peak_memory_mb"]
            or r["peak_memory_mb"] in (float("inf"),)) for r in _records(c)),
})
