"""Project 63 (LoRA variant selection): ranks 4 / 8 / 16 x 3 shared seeds on 64's admitted data.

Before any work the runner reads 64's manifest (`manifests.read_upstream`: present, promised sha256,
seal, run mode, decision accept) and the admitted data through it (sha256 and split hashes). Then it
trains every candidate run with the same settings (only the rank changes), plus one leftover trial
that differs in more than the rank (rank 32, twice the steps, one seed) so the comparability gate has
something real to exclude. The gates (`selection_gates`) decide: comparability, then quality within
the equivalence band and memory within the budget, then the cheapest feasible rank. Records: the
candidate `matrix`, the chosen adapter's files (peft format) and the sealed `manifest` 62 reads.

Memory: on CUDA the allocator's peak (`torch.cuda.max_memory_allocated`); on a CPU there is no device
memory, so the gate reads the training state counted from the tensors (adapter parameters,
gradients, AdamW moments) and the record says which one it read.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Mapping

from tools.data import sft_raw
from tools.errors import RecordExistsError
from tools.experiments.sft_chain import admission, manifests, selection_gates
from tools.experiments.sft_chain.training import (
    QUALITY_METRICS,
    TrainConfig,
    adapter_state,
    attach_adapter,
    load_base,
    one_thread_on_cpu,
    render,
    save_adapter,
    train_run,
)

CHAPTER_ID = "63"
UPSTREAM_ID = "64"
MATRIX_SCHEMA = "lora-variant-selection-matrix/v1"
MANIFEST_SCHEMA = "lora-variant-selection-manifest/v1"
RECORD_STAGES = ("matrix", "manifest")
VARIABLE = "rank"
RANKS = (4, 8, 16)
SEEDS = (1, 2, 3)
LEFTOVER = {"rank": 32, "steps_factor": 2, "seed": 1}
"""An earlier trial kept in the matrix: another rank, twice the steps and one seed; it is not comparable."""
CPU_MODEL = "lab"
"""The model of cpu_smoke and dry_run: the lab student (it knows the chat format and addition, not the
chain's subtraction), so the candidates' quality moves with training rather than sitting at zero."""
SETTINGS = {
    "cpu_smoke": {"steps": 60, "batch_size": 16, "learning_rate": 1e-2, "alpha": 16.0, "quality": "token_accuracy",
                  "target_modules": ("q_proj", "v_proj"), "memory": "training_state_bytes",
                  "memory_budget": 96 * 1024, "band_floor": 0.02, "spread_factor": 2.0},
    "real_gpu": {"steps": 30, "batch_size": 8, "learning_rate": 2e-4, "alpha": 16.0, "quality": "exact_match",
                 "target_modules": ("q_proj", "v_proj"), "memory": "peak_allocated_bytes",
                 "memory_budget": 12 * 2 ** 30, "band_floor": 0.02, "spread_factor": 2.0},
}
MEMORY_SOURCES = {"training_state_bytes": "training state counted from the tensors (adapter parameters, gradients, "
                                          "AdamW moments); a CPU has no device memory to measure",
                  "peak_allocated_bytes": "torch.cuda.max_memory_allocated over the training steps"}
NEXT_STEP = {"accept": "project 62 trains the chosen configuration, saves, resumes and reloads it, and delivers it",
             "tune": "no rank passed both gates: widen the memory budget or change the candidates, then select again",
             "reject": "no candidate produced usable measurements: fix the training runs and select again"}


def settings_for(run_mode: str) -> dict:
    return SETTINGS["cpu_smoke" if run_mode == "dry_run" else run_mode]


def candidate_configs(run_mode: str) -> list[tuple[str, TrainConfig]]:
    """`(run name, config)` of every run: each rank with each shared seed, then the leftover trial."""
    settings = settings_for(run_mode)
    shared = {key: settings[key] for key in ("steps", "batch_size", "learning_rate", "alpha", "target_modules")}
    runs = [(f"r{rank}_s{seed}", TrainConfig(rank=rank, seed=seed, **shared)) for rank in RANKS for seed in SEEDS]
    leftover = dict(shared, steps=shared["steps"] * LEFTOVER["steps_factor"])
    runs.append((f"r{LEFTOVER['rank']}_s{LEFTOVER['seed']}_leftover",
                 TrainConfig(rank=LEFTOVER["rank"], seed=LEFTOVER["seed"], **leftover)))
    return runs


def baseline_of(run_mode: str, data_sha256: str) -> dict:
    """What every comparable run shares: the data and every setting but the rank and the seed."""
    config = candidate_configs(run_mode)[0][1].public()
    return {"data_sha256": data_sha256, **{key: value for key, value in config.items() if key not in (VARIABLE, "seed")}}


def describe(run_mode: str, model: str) -> str:
    settings = settings_for(run_mode)
    return (f"lora_selection ({run_mode}): reads project 64's manifest and admitted data, then trains "
            f"{len(RANKS)} ranks {RANKS} x {len(SEEDS)} seeds {SEEDS} (+1 leftover trial) on {model}, "
            f"{settings['steps']} steps of batch {settings['batch_size']}; memory gate on {settings['memory']} "
            f"<= {settings['memory_budget']}; nothing is read or written in dry_run")


def train_candidates(model_id: str, model_source: str, device: str, admitted: Mapping, run_mode: str,
                     log=None) -> dict:
    """Train every candidate run on the admitted data; returns the runs and their adapter states."""
    base, tokenizer, identity = load_base(model_id, model_source, "float32", device)
    train = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["splits"]["train"]]
    evaluation = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["evaluation"]]
    runs, states = [], {}
    quality = settings_for(run_mode)["quality"]
    for name, config in candidate_configs(run_mode):
        model = attach_adapter(copy.deepcopy(base), config)
        result = train_run(model, tokenizer, train, evaluation, config, device=device)
        runs.append({"name": name, "config": {"data_sha256": admitted["version"]["content_sha256"], **config.public()},
                     **{key: value for key, value in result.items() if key != "config"}, "quality": result[quality]})
        states[name] = adapter_state(model)
        if log is not None:
            log(f"  {name}: exact match {result['exact_match']:.3f}, token acc {result['token_accuracy']:.3f}, eval loss {result['eval_loss']:.3f}, "
                f"{result['step_time_s'] * 1000:.1f} ms/step")
    return {"runs": runs, "states": states, "model": identity, "tokenizer": tokenizer, "base": base}


def gate(runs: list[dict], run_mode: str, data_sha256: str, gates=selection_gates) -> dict:
    """The three gates over the matrix: comparability, quality and memory, the choice."""
    settings = settings_for(run_mode)
    comparability = gates.comparable_candidates([{"name": r["name"], "config": r["config"]} for r in runs], VARIABLE,
                                                baseline_of(run_mode, data_sha256), list(SEEDS))
    results = {value: [{"seed": r["config"]["seed"], "status": r["status"], "quality": r.get("quality"),
                        "memory_bytes": r.get(settings["memory"])}
                       for r in runs if r["config"][VARIABLE] == value]
               for value in comparability["comparable"]}
    gated = gates.gate_candidates(results, settings["memory_budget"], settings["band_floor"],
                                  settings["spread_factor"]) if results else None
    choice = gates.choose_candidate(gated) if gated else {"decision": "reject", "chosen": None, "ranking": [],
                                                          "reason": "no_comparable_candidate"}
    return {"comparability": comparability, "gated": gated, "choice": choice}


def manifest_gates(gating: Mapping, run_mode: str) -> list[dict]:
    settings = settings_for(run_mode)
    gates = [{"name": "comparable_candidates", "threshold": f"only {VARIABLE} differs; seeds {list(SEEDS)}",
              "measured": gating["comparability"]["comparable"], "passed": bool(gating["comparability"]["comparable"])}]
    gated = gating["gated"] or {"candidates": {}, "best_mean": None, "band": None}
    for value, row in gated["candidates"].items():
        gates.append({"name": f"quality_band_rank_{value}",
                      "threshold": None if gated["best_mean"] is None else gated["best_mean"] - gated["band"],
                      "measured": row["mean_quality"], "passed": row["quality_passed"]})
        gates.append({"name": f"memory_rank_{value}", "threshold": settings["memory_budget"],
                      "measured": row["peak_memory_bytes"], "passed": row["memory_passed"]})
    return gates


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner: upstream first, then the matrix, the gates and the records."""
    say = log or (lambda message: None)
    model_id = CPU_MODEL if plan.run_mode != "real_gpu" and plan.model == "tiny" else plan.model
    if not plan.writes:
        say(describe(plan.run_mode, model_id))
        return
    sink.require_new(RECORD_STAGES)
    root = sink.results_root
    adapter_folder = root / sink.slug / f"{sink.slug}_adapter_{sink.run_label}"
    if adapter_folder.exists():
        raise RecordExistsError(f"{adapter_folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    upstream = manifests.read_upstream(root, upstream_id=UPSTREAM_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                       label=sink.run_label, options=plan.options,
                                       schema_version=admission.MANIFEST_SCHEMA)
    admitted = manifests.admitted_data(upstream, root, schema_version=admission.ADMITTED_SCHEMA)
    data_sha256 = admitted["version"]["content_sha256"]
    say(describe(plan.run_mode, model_id))
    with one_thread_on_cpu(plan.device):
        trained = train_candidates(model_id, plan.model_source, plan.device, admitted, plan.run_mode, log=say)
    gating = gate(trained["runs"], plan.run_mode, data_sha256)
    settings = settings_for(plan.run_mode)
    matrix_body = {"model": trained["model"], "variable": VARIABLE, "seeds": list(SEEDS),
                   "memory_metric": settings["memory"], "memory_source": MEMORY_SOURCES[settings["memory"]],
                   "quality_key": settings["quality"], "quality_metric": QUALITY_METRICS[settings["quality"]],
                   "comparability_note": sft_raw.COMPARABILITY_NOTE, "runs": trained["runs"], "gating": gating}
    matrix_path, _ = sink.save_record("matrix", matrix_body, schema_version=MATRIX_SCHEMA)
    outputs = [{"role": "candidate_matrix", **sink.lineage(matrix_path)}]
    chosen = gating["choice"]["chosen"]
    chosen_config = None
    if chosen is not None:
        name = f"r{chosen}_s{SEEDS[0]}"
        run_record = next(r for r in trained["runs"] if r["name"] == name)
        chosen_config = dict(run_record["config"])
        chosen_config.pop("seed")
        outputs += chosen_adapter(trained, name, run_record, adapter_folder, root, model_id)
    body = {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root), {"role": "admitted_data", **upstream.output("admitted_data")}],
        "candidates": [{"name": r["name"], "config": r["config"], "status": r["status"],
                        "quality": r["quality"], "exact_match": r["exact_match"], "token_accuracy": r["token_accuracy"],
                        "eval_loss": r["eval_loss"], "step_time_s": r["step_time_s"],
                        "memory_bytes": r.get(settings["memory"]), "adapter_sha256": r["adapter_sha256"]}
                       for r in trained["runs"]],
        "gates": manifest_gates(gating, plan.run_mode),
        "decision": {"decision": gating["choice"]["decision"], "reasons": [gating["choice"]["reason"]],
                     "chosen_rank": chosen, "ranking": gating["choice"]["ranking"]},
        "next_action": NEXT_STEP[gating["choice"]["decision"]],
        "outputs": outputs,
        "selected_config": chosen_config,
        "chosen_adapter": None if chosen is None else {"run": f"r{chosen}_s{SEEDS[0]}",
                                                       "adapter_sha256": run_record["adapter_sha256"]},
        "memory_metric": settings["memory"], "memory_budget": settings["memory_budget"],
        "quality_metric": QUALITY_METRICS[settings["quality"]],
    }
    ref = manifests.write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
    say(f"63 selection: {gating['choice']['decision']} rank {chosen}; excluded "
        f"{[item['value'] for item in gating['comparability']['excluded']]}; manifest {ref.path.name}")


def chosen_adapter(trained: Mapping, name: str, run_record: Mapping, folder: Path, root: Path,
                   model_id: str) -> list[dict]:
    """The chosen run's adapter in peft's format under the results root; one output entry per file."""
    from peft import set_peft_model_state_dict

    config = TrainConfig(**{key: (tuple(value) if key == "target_modules" else value)
                            for key, value in run_record["config"].items() if key != "data_sha256"})
    model = attach_adapter(copy.deepcopy(trained["base"]), config)
    set_peft_model_state_dict(model, trained["states"][name])
    hashes = save_adapter(model, folder, model_id)
    return [{"role": f"chosen_adapter/{path}", "path": (folder / path).relative_to(root).as_posix(), "sha256": digest}
            for path, digest in hashes.items()]
