"""Project 65 (QLoRA low-resource branch): an NF4 base against a bf16 base at the same adapter, paired
by seed, and a capacity ladder recorded apart.

Before any work the runner reads 64's manifest and admitted data (as 63 does; selecting on the frozen
evaluation split is refused). It measures each base without an adapter (the baseline rows: 4-bit
storage can cost the base's own skill before any training), then for each shared seed trains the
adapter the chain would deliver, at the middle rank of 63's candidates (63 runs beside 65, so its
choice is not known yet), once on a bf16 base and once on an NF4 base (transformers'
`BitsAndBytesConfig` -> bitsandbytes `Linear4bit`, double quantisation), reads both on 64's validation
split and on the base's own validation suite, then runs the capacity ladder (CUDA only: the largest
batch under the memory budget on each base, with the longest admitted samples, the allocator's
reserved memory, OOM as a status). The one difference from the delivered configuration is the base's
precision: the chain trains and delivers on a float32 base, and QLoRA's question is the 4-bit base
against the 16-bit one a GPU would train on; the record says so (`difference_from_delivery`).

The gates (the plan's mechanism, else `qlora_gates`) compute the paired deltas, the capacity gain and
the branch decision. The record says which bitsandbytes path ran (version, layers, quant type, the
device of the 4-bit weights) and, when the 4-bit base cannot be built, records that and the error
instead of a number. On a CPU there is no device memory: the peaks are None and the capacity ladder
is not run; the bytes the bases hold in their tensors are counted (they show the 4-bit storage),
never presented as a peak.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Mapping

from tools.data import sft_raw
from tools.experiments.sft_chain import admission, manifests, qlora_gates, selection
from tools.experiments.sft_chain.selection import CPU_MODEL, SKILL_SET, TASK_SET
from tools.experiments.sft_chain.training import (
    QUALITY_METRIC,
    TrainConfig,
    attach_adapter,
    base_metrics,
    base_tensor_bytes,
    load_base,
    numerics_note,
    one_thread_on_cpu,
    render_record,
    reply_loss,
    train_data,
    train_run,
)
from tools.models.lab import training_batch

CHAPTER_ID = "65"
UPSTREAM_ID = "64"
PAIRS_SCHEMA = "qlora-branch-pairs/v2"
MANIFEST_SCHEMA = "qlora-branch-manifest/v2"
RECORD_STAGES = ("pairs", "manifest")
SEEDS = selection.SEEDS
BASES = ("bf16", "nf4")
RANK = selection.CONTROL_RANK
GATE_NAMES = ("paired_deltas", "capacity_gain", "branch_decision")
SETTINGS = {
    "cpu_smoke": {"steps": 24, "ladder": (), "memory_budget": 12 * 2 ** 30, "required_batch": 32,
                  "quality_tolerance": 0.05},
    "real_gpu": {"steps": None, "ladder": (8, 16, 32, 64, 128), "memory_budget": 12 * 2 ** 30, "required_batch": 32,
                 "quality_tolerance": 0.05},
}
"""`steps` None: 63's steps. In cpu_smoke both bases train 24 steps, not 63's 80: bfloat16 and 4-bit arithmetic have
no fast CPU kernels (a step costs about four float32 steps), so the pair gets a shorter budget, the same on both
sides."""
DIFFERENCE_FROM_DELIVERY = ("the adapter settings are 63's candidates' (every linear layer, replay, dropout, schedule, "
                            "learning rate) at the middle rank {rank}; 63 runs beside this project, so the rank it "
                            "chooses is not known here. The base precision differs on purpose: the chain trains and "
                            "delivers on a float32 base, while QLoRA's question is a 4-bit base against the 16-bit base "
                            "a GPU would train on. Steps: {steps} here against 63's {chain_steps} (in cpu_smoke bfloat16 "
                            "and 4-bit arithmetic have no fast CPU kernels, so both bases get the same shorter budget; "
                            "real_gpu trains 63's steps)")
LADDER_STEPS = 2
NEXT_STEP = {"accept": "train on the NF4 base where the budget needs the capacity it buys (see the scope)",
             "tune": "keep the bf16 base for now: the 4-bit base did not buy capacity this budget needs",
             "reject": "do not train on the NF4 base: it lost quality, or no pair could be measured"}
UNMEASURED_NEXT_STEP = ("keep the bf16 base for now: capacity was not measured here (device memory is measured on "
                        "CUDA only); run the capacity ladder on a GPU (real_gpu) before deciding the branch")


def next_step(decision: Mapping) -> str:
    """What to do after the branch decision; a tune whose capacity was not measured says so."""
    if decision["decision"] == "tune" and "capacity_not_measured" in decision["reasons"]:
        return UNMEASURED_NEXT_STEP
    return NEXT_STEP[decision["decision"]]


def settings_for(run_mode: str) -> dict:
    return SETTINGS["cpu_smoke" if run_mode == "dry_run" else run_mode]


def config_for(run_mode: str, base: str, seed: int) -> TrainConfig:
    shared = dict(selection.shared_config(run_mode), base="bfloat16" if base == "bf16" else "nf4")
    shared["steps"] = settings_for(run_mode)["steps"] or shared["steps"]
    return TrainConfig(rank=RANK, seed=seed, **shared)


def difference_from_delivery(run_mode: str) -> str:
    return DIFFERENCE_FROM_DELIVERY.format(rank=RANK, steps=config_for(run_mode, "bf16", SEEDS[0]).steps,
                                           chain_steps=selection.shared_config(run_mode)["steps"])


def describe(run_mode: str, model: str) -> str:
    s = settings_for(run_mode)
    config = config_for(run_mode, "bf16", SEEDS[0])
    ladder = f"capacity ladder {s['ladder']} under {s['memory_budget']} bytes" if s["ladder"] else \
        "no capacity ladder (device memory is measured on CUDA only)"
    return (f"qlora_branch ({run_mode}): reads project 64's manifest and admitted data, measures a bf16 and an NF4 base "
            f"without an adapter, then trains rank {RANK} on every linear layer of {model} on each, seeds {SEEDS}, "
            f"{config.steps} steps (replay {config.replay_fraction:.0%}); reads the validation split and the base's own "
            f"validation suite; {ladder}; nothing is read or written in dry_run")


def bitsandbytes_path(model) -> dict:
    """Which 4-bit path ran: bitsandbytes' version, its Linear4bit layers, their quant type and device."""
    import bitsandbytes

    layers = [module for module in model.modules() if type(module).__name__ == "Linear4bit"]
    first = layers[0].weight if layers else None
    state = getattr(first, "quant_state", None)
    return {"bitsandbytes": bitsandbytes.__version__, "linear4bit_layers": len(layers),
            "quant_type": getattr(state, "quant_type", None), "double_quant": getattr(state, "nested", None),
            "compute_dtype": str(layers[0].compute_dtype) if layers else None,
            "weights_device": str(first.device) if first is not None else None,
            "backend": "cuda" if first is not None and first.device.type == "cuda" else "cpu"}


def evaluation_sets(tokenizer, admitted: Mapping) -> dict:
    return selection.evaluation_sets(tokenizer, admitted)


def base_row(model_id: str, model_source: str, device: str, admitted: Mapping, base: str) -> dict:
    """One base measured without an adapter (its task and base-skill exact match); a base that cannot
    be built is a status with its error."""
    try:
        model, tokenizer, identity = load_base(model_id, model_source, "bfloat16" if base == "bf16" else "nf4", device)
    except Exception as error:  # recorded: which path could not run, and why
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    measured = base_metrics(model, tokenizer, evaluation_sets(tokenizer, admitted), device)
    return {"status": "ok", "error": None, "metrics": measured, "quality": measured[TASK_SET]["exact_match"],
            "regression": measured[SKILL_SET]["exact_match"], "base_tensor_bytes": base_tensor_bytes(model)}


def one_run(model_id: str, model_source: str, device: str, admitted: Mapping, config: TrainConfig) -> dict:
    """Train one (base, seed) run; a base that cannot be built or a failed run is a status, not an exception."""
    from tools.measure.training import free_device_memory, out_of_memory_error

    import torch

    oom = out_of_memory_error(torch)
    try:
        model, tokenizer, identity = load_base(model_id, model_source, config.base, device)
    except Exception as error:  # recorded: which path could not run, and why
        return {"status": "failed", "error": f"{type(error).__name__}: {error}", "config": config.public()}
    path = bitsandbytes_path(model) if config.base == "nf4" else None
    stored = base_tensor_bytes(model)
    try:
        data = train_data(tokenizer, admitted["splits"]["train"])
        model = attach_adapter(model, config)
        result = train_run(model, tokenizer, data, evaluation_sets(tokenizer, admitted), config, device=device,
                           curve=False)
        result = {**result, "quality": result["metrics"][TASK_SET]["exact_match"],
                  "regression": result["metrics"][SKILL_SET]["exact_match"]}
    except oom as error:
        result = {"status": "oom", "error": str(error).strip().splitlines()[0] if str(error).strip() else "oom",
                  "config": config.public()}
    except Exception as error:  # recorded per run: the paired one still counts as unpaired evidence
        result = {"status": "failed", "error": f"{type(error).__name__}: {error}", "config": config.public()}
    finally:
        model = None
        free_device_memory(torch)
    return {**result, "model": identity, "bitsandbytes_path": path, "base_tensor_bytes": stored}


def longest_samples(rendered: list, size: int) -> list:
    """`size` rows for a ladder step: the longest admitted samples first, repeated when there are fewer
    (a batch that fits only short samples claims capacity the data does not have)."""
    by_length = sorted(rendered, key=lambda row: len(row[0]), reverse=True)
    return [by_length[index % len(by_length)] for index in range(size)]


def ladder(model_id: str, model_source: str, device: str, admitted: Mapping, base: str, run_mode: str) -> list[dict]:
    """The capacity ladder of one base: a few steps at each batch size on the longest admitted samples;
    the allocator's reserved memory (what the process holds) and its allocated peak, or OOM."""
    import torch

    from tools.measure.training import free_device_memory, out_of_memory_error

    oom, steps = out_of_memory_error(torch), []
    config = config_for(run_mode, base, SEEDS[0])
    model, tokenizer, _ = load_base(model_id, model_source, config.base, device)
    model = attach_adapter(model, config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    rendered = [render_record(tokenizer, r) for r in admitted["splits"]["train"]]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for size in settings_for(run_mode)["ladder"]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        try:
            batch = training_batch(longest_samples(rendered, size), pad_id)
            for _ in range(LADDER_STEPS):
                optimizer.zero_grad(set_to_none=True)
                reply_loss(model, batch, device).backward()
                optimizer.step()
            torch.cuda.synchronize()
            steps.append({"batch_size": size, "status": "ok", "tokens_per_row": int(batch["input_ids"].shape[1]),
                          "peak_memory_bytes": int(torch.cuda.max_memory_reserved()),
                          "peak_allocated_bytes": int(torch.cuda.max_memory_allocated())})
        except oom:
            steps.append({"batch_size": size, "status": "oom", "peak_memory_bytes": None})
            optimizer.zero_grad(set_to_none=True)
            free_device_memory(torch)
            break
    model = optimizer = None
    free_device_memory(torch)
    return steps


def gate(runs: Mapping, ladders: Mapping, run_mode: str, gates=qlora_gates) -> dict:
    s = settings_for(run_mode)
    memory_key = "peak_allocated_bytes"
    sides = {base: {seed: {"status": run["status"], "peak_memory_bytes": run.get(memory_key),
                           "step_time_s": run.get("step_time_s"), "quality": run.get("quality")}
                    for seed, run in runs[base].items()} for base in BASES}
    deltas = gates.paired_deltas(sides["nf4"], sides["bf16"])
    capacity = gates.capacity_gain(ladders, s["memory_budget"])
    decision = gates.branch_decision(deltas, capacity, s["required_batch"], s["quality_tolerance"])
    return {"deltas": deltas, "capacity": capacity, "decision": decision}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    model_id = CPU_MODEL if plan.run_mode != "real_gpu" and plan.model == "tiny" else plan.model
    if not plan.writes:
        say(describe(plan.run_mode, model_id))
        return
    gates = SimpleNamespace(**{name: plan.mechanism.function(name, getattr(qlora_gates, name)) for name in GATE_NAMES})
    sink.require_new(RECORD_STAGES)
    root = sink.results_root
    manifests.require_promise(plan.run_mode, plan.options, (UPSTREAM_ID,), CHAPTER_ID)
    upstream = manifests.read_upstream(root, upstream_id=UPSTREAM_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                       label=sink.run_label, options=plan.options,
                                       schema_version=admission.MANIFEST_SCHEMA)
    if (plan.options.get("selection_split") or "validation") != "validation":
        manifests.check_evaluation_split(root, upstream, reader_id=CHAPTER_ID)
    selection.check_split(plan.options)
    admitted = manifests.admitted_data(upstream, root, schema_version=admission.ADMITTED_SCHEMA)
    say(describe(plan.run_mode, model_id))
    runs = {base: {} for base in BASES}
    with one_thread_on_cpu(plan.device):
        bases = {base: base_row(model_id, plan.model_source, plan.device, admitted, base) for base in BASES}
        for base, row in bases.items():
            say(f"  {base} base without adapter: {row['status']}, task exact match {row.get('quality')}, "
                f"base skill {row.get('regression')}")
        for seed in SEEDS:
            for base in BASES:
                result = one_run(model_id, plan.model_source, plan.device, admitted, config_for(plan.run_mode, base, seed))
                runs[base][seed] = {"data_sha256": admitted["version"]["content_sha256"], **result}
                say(f"  {base} seed {seed}: {result['status']}, task exact match {result.get('quality')}, "
                    f"base skill {result.get('regression')}, step {result.get('step_time_s')} s")
        ladders = {base: (ladder(model_id, plan.model_source, plan.device, admitted, base, plan.run_mode)
                          if plan.device == "cuda" and settings_for(plan.run_mode)["ladder"] else [])
                   for base in BASES}
    gating = gate(runs, ladders, plan.run_mode, gates)
    s = settings_for(plan.run_mode)
    mechanism = plan.mechanism.describe({name: getattr(qlora_gates, name) for name in GATE_NAMES})
    pairs_body = {"seeds": list(SEEDS), "adapter": config_for(plan.run_mode, "bf16", SEEDS[0]).public(),
                  "difference_from_delivery": difference_from_delivery(plan.run_mode),
                  "splits": {TASK_SET: "64's admitted validation split", SKILL_SET: "the base's own plain sums"},
                  "quality_key": "quality", "quality_metric": QUALITY_METRIC, "bases": bases,
                  "memory_metric": "peak_allocated_bytes (torch.cuda.max_memory_allocated; None on a CPU)",
                  "ladder_metric": "torch.cuda.max_memory_reserved over two steps on the longest admitted samples",
                  "mechanism": mechanism, "numerics": numerics_note(),
                  "runs": {base: {str(seed): run for seed, run in by_seed.items()} for base, by_seed in runs.items()},
                  "ladders": ladders, "ladder_note": None if ladders["bf16"] else
                  "not run: device memory is measured on CUDA only, so a CPU run claims no capacity",
                  "memory_budget": s["memory_budget"], "required_batch": s["required_batch"],
                  "gating": _plain(gating), "comparability_note": sft_raw.COMPARABILITY_NOTE}
    pairs_path, _ = sink.save_record("pairs", pairs_body, schema_version=PAIRS_SCHEMA)
    deltas, capacity, decision = gating["deltas"], gating["capacity"], gating["decision"]
    first_nf4 = runs["nf4"][SEEDS[0]]
    body = {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root), {"role": "admitted_data", **upstream.output("admitted_data")}],
        "bases": {base: {"status": row["status"], "quality": row.get("quality"), "regression": row.get("regression")}
                  for base, row in bases.items()},
        "candidates": [{"base": base, "seed": seed, "status": run["status"], "quality": run.get("quality"),
                        "regression": run.get("regression"),
                        "step_time_s": run.get("step_time_s"), "peak_allocated_bytes": run.get("peak_allocated_bytes"),
                        "base_tensor_bytes": run.get("base_tensor_bytes"), "adapter_sha256": run.get("adapter_sha256")}
                       for seed in SEEDS for base, by_seed in runs.items() for run in [by_seed[seed]]],
        "gates": [
            {"name": "paired_seeds", "threshold": len(SEEDS), "measured": len(deltas["paired"]),
             "passed": len(deltas["paired"]) == len(SEEDS)},
            {"name": "quality_delta", "threshold": -s["quality_tolerance"], "measured": deltas["mean"]["quality_delta"],
             "passed": deltas["mean"]["quality_delta"] is not None
             and deltas["mean"]["quality_delta"] >= -s["quality_tolerance"]},
            {"name": "capacity_for_required_batch", "threshold": s["required_batch"], "measured": capacity["largest"],
             "passed": decision["decision"] == "accept"},
            {"name": "peak_memory_change", "threshold": None, "measured": deltas["mean"]["memory_change"],
             "passed": deltas["mean"]["memory_change"] is not None and deltas["mean"]["memory_change"] < 0},
            {"name": "step_time_change", "threshold": 0.0, "measured": deltas["mean"]["step_time_change"],
             "passed": deltas["mean"]["step_time_change"] is not None and deltas["mean"]["step_time_change"] <= 0},
        ],
        "decision": {"decision": decision["decision"], "reasons": decision["reasons"], "scope": decision["scope"]},
        "next_action": next_step(decision),
        "outputs": [{"role": "pairs", **sink.lineage(pairs_path)}],
        "qlora_adapter_sha256": first_nf4.get("adapter_sha256"),
        "bitsandbytes_path": first_nf4.get("bitsandbytes_path"),
        "nf4_error": first_nf4.get("error"),
        "quality_metric": QUALITY_METRIC, "difference_from_delivery": difference_from_delivery(plan.run_mode),
        "mechanism": mechanism,
    }
    ref = manifests.write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
    say(f"65 QLoRA branch: {decision['decision']} {decision['reasons']}; manifest {ref.path.name}")


def _plain(gating: Mapping) -> dict:
    """The gating result with int dict keys (seeds) as strings, as JSON keeps them."""
    deltas = dict(gating["deltas"])
    deltas["per_seed"] = {str(seed): row for seed, row in deltas["per_seed"].items()}
    return {**gating, "deltas": deltas}

