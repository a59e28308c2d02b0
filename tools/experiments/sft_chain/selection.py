"""Project 63 (LoRA variant selection): ranks 4 / 8 / 16 x 3 shared seeds on 64's admitted data.

Before any work the runner reads 64's manifest (`manifests.read_upstream`: present, promised sha256,
seal, run mode, decision accept) and the admitted data through it (sha256 and split hashes); a plan
that asks to select on the frozen evaluation split is refused (`manifests.check_evaluation_split`:
only project 62 opens it). Then it measures the no-adapter base and trains every candidate run with
the same settings (only the rank changes), reading each on the admitted validation split (the task)
and on the base's own validation suite (plain sums, `sft_raw.base_skill_suite`):

- the candidates: every rank with every shared seed;
- one leftover trial that differs in more than the rank (rank 32, twice the steps, one seed), so the
  comparability gate has something real to exclude;
- a control without replay (the middle rank, every seed, `replay_fraction` 0): the same steps on the
  task records alone, to measure what replay protects (it is never a candidate).

The gates (the plan's mechanism, else `selection_gates`) decide: comparability, then per candidate
the task gain over the base, the base's skill kept, non-inferiority to the best within the margin and
memory within the budget (the user's input, `plan.options["memory_budget"]`), then the cheapest
feasible rank. Records: the candidate `matrix`, the chosen adapter's files (peft format) and the
sealed `manifest` 62 reads.

Memory: on CUDA the allocator's peak (`torch.cuda.max_memory_allocated`); on a CPU there is no device
memory, so the gate reads the training state counted from the tensors (adapter parameters,
gradients, AdamW moments) and the record says which one it read.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Mapping

from tools.core.effects import paired_effect
from tools.data import sft_raw
from tools.errors import ConfigError, RecordExistsError
from tools.experiments.sft_chain import admission, manifests, selection_gates
from tools.experiments.sft_chain.training import (
    DIGIT_METRIC,
    QUALITY_METRIC,
    TrainConfig,
    adapter_state,
    attach_adapter,
    base_metrics,
    load_base,
    numerics_note,
    one_thread_on_cpu,
    render_problems,
    render_record,
    save_adapter,
    train_data,
    train_run,
)

CHAPTER_ID = "63"
UPSTREAM_ID = "64"
MATRIX_SCHEMA = "lora-variant-selection-matrix/v2"
MANIFEST_SCHEMA = "lora-variant-selection-manifest/v2"
RECORD_STAGES = ("matrix", "manifest")
VARIABLE = "rank"
RANKS = (4, 8, 16)
SEEDS = (1, 2, 3)
LEFTOVER = {"rank": 32, "steps_factor": 2, "seed": 1}
"""An earlier trial kept in the matrix: another rank, twice the steps and one seed; it is not comparable."""
CONTROL_RANK = 8
"""The rank of the no-replay control (every seed)."""
GATE_NAMES = ("comparable_candidates", "gate_candidates", "choose_candidate")
TASK_SET, SKILL_SET = "validation", "base_skill_validation"
CPU_MODEL = "lab"
"""The model of cpu_smoke and dry_run: the lab student (it knows the chat format and plain sums, not the
chain's sum-plus-one), so the candidates' answers move with training."""
SHARED = {"alpha": 16.0, "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                            "down_proj"),
          "dropout": 0.05, "replay_fraction": 0.5, "schedule": "cosine", "base": "float32"}
SETTINGS = {
    "cpu_smoke": {"steps": 80, "batch_size": 16, "learning_rate": 5e-3, "memory": "training_state_bytes",
                  "memory_budget": 1024 * 1024, "margin": 0.05, "regression_tolerance": 0.05},
    "real_gpu": {"steps": 60, "batch_size": 8, "learning_rate": 2e-4, "memory": "peak_allocated_bytes",
                 "memory_budget": 12 * 2 ** 30, "margin": 0.05, "regression_tolerance": 0.05},
}
MEMORY_SOURCES = {"training_state_bytes": "training state counted from the tensors (adapter parameters, gradients, "
                                          "AdamW moments); a CPU has no device memory to measure",
                  "peak_allocated_bytes": "torch.cuda.max_memory_allocated over the training steps"}
NEXT_STEP = {"accept": "project 62 trains the chosen configuration, saves, resumes and reloads it, opens the evaluation "
                       "split once and delivers it",
             "tune": "no rank passed every gate: read each candidate's reasons (no task gain, forgot the base skill, "
                     "below the margin, over the budget), change the candidates, the budget or the number of seeds, "
                     "then select again under a new label",
             "reject": "no candidate produced usable measurements: fix the training runs and select again"}


def settings_for(run_mode: str) -> dict:
    return SETTINGS["cpu_smoke" if run_mode == "dry_run" else run_mode]


def memory_budget(run_mode: str, options: Mapping) -> int:
    """The user's memory budget (`options["memory_budget"]`, bytes), else the run mode's default."""
    budget = options.get("memory_budget")
    if budget is None:
        return settings_for(run_mode)["memory_budget"]
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"MEMORY_BUDGET must be None or an int >= 0 (bytes), got {budget!r}")
    return budget


def check_split(options: Mapping) -> None:
    """Selection reads the validation split; asking for another one is refused before any work."""
    split = options.get("selection_split") or "validation"
    if split != "validation":
        raise ConfigError(f"selection reads the validation split, not {split!r}")


def shared_config(run_mode: str) -> dict:
    settings = settings_for(run_mode)
    return {**SHARED, **{key: settings[key] for key in ("steps", "batch_size", "learning_rate")}}


def candidate_configs(run_mode: str) -> list[tuple[str, TrainConfig]]:
    """`(run name, config)` of every run the gates see: each rank with each shared seed, then the leftover."""
    shared = shared_config(run_mode)
    runs = [(f"r{rank}_s{seed}", TrainConfig(rank=rank, seed=seed, **shared)) for rank in RANKS for seed in SEEDS]
    leftover = dict(shared, steps=shared["steps"] * LEFTOVER["steps_factor"])
    runs.append((f"r{LEFTOVER['rank']}_s{LEFTOVER['seed']}_leftover",
                 TrainConfig(rank=LEFTOVER["rank"], seed=LEFTOVER["seed"], **leftover)))
    return runs


def control_configs(run_mode: str) -> list[tuple[str, TrainConfig]]:
    """The no-replay control: the middle rank on every seed, the task records alone."""
    shared = dict(shared_config(run_mode), replay_fraction=0.0)
    return [(f"r{CONTROL_RANK}_s{seed}_no_replay", TrainConfig(rank=CONTROL_RANK, seed=seed, **shared))
            for seed in SEEDS]


def baseline_of(run_mode: str, data_sha256: str) -> dict:
    """What every comparable run shares: the data and every setting but the rank and the seed."""
    config = candidate_configs(run_mode)[0][1].public()
    return {"data_sha256": data_sha256, **{key: value for key, value in config.items() if key not in (VARIABLE, "seed")}}


def describe(run_mode: str, model: str, budget: int | None = None) -> str:
    settings = settings_for(run_mode)
    budget = settings["memory_budget"] if budget is None else budget
    return (f"lora_selection ({run_mode}): reads project 64's manifest and admitted data, measures the no-adapter "
            f"base, then trains {len(RANKS)} ranks {RANKS} x {len(SEEDS)} seeds {SEEDS} (+1 leftover trial, +{len(SEEDS)} "
            f"no-replay controls) on {model}, {settings['steps']} steps of batch {settings['batch_size']} "
            f"(replay {SHARED['replay_fraction']:.0%}); reads the validation split and the base's own validation "
            f"suite; gates: task gain > 0, base skill within {settings['regression_tolerance']}, within "
            f"{settings['margin']} of the best, {settings['memory']} <= {budget}; nothing is read or written in dry_run")


def evaluation_sets(tokenizer, admitted: Mapping) -> dict:
    """What every run is read on: the admitted validation split (the task) and the base's own suite."""
    return {TASK_SET: [render_record(tokenizer, r) for r in admitted["splits"]["validation"]],
            SKILL_SET: render_problems(tokenizer, sft_raw.base_skill_suite("validation"))}


def train_candidates(model_id: str, model_source: str, device: str, admitted: Mapping, run_mode: str,
                     log=None) -> dict:
    """The base measured, then every candidate and control run trained on the admitted data."""
    base, tokenizer, identity = load_base(model_id, model_source, "float32", device)
    data = train_data(tokenizer, admitted["splits"]["train"])
    sets = evaluation_sets(tokenizer, admitted)
    measured_base = base_metrics(base, tokenizer, sets, device)
    if log is not None:
        log(f"  base (no adapter): exact match {measured_base[TASK_SET]['exact_match']:.3f} on the task, "
            f"{measured_base[SKILL_SET]['exact_match']:.3f} on the base's own sums")
    runs, controls, states = [], [], {}
    for group, configs in (("candidate", candidate_configs(run_mode)), ("control", control_configs(run_mode))):
        for name, config in configs:
            model = attach_adapter(copy.deepcopy(base), config)
            result = train_run(model, tokenizer, data, sets, config, device=device)
            row = {"name": name, "config": {"data_sha256": data.sha256, **config.public()},
                   **{key: value for key, value in result.items() if key != "config"},
                   "quality": result["metrics"][TASK_SET]["exact_match"],
                   "regression": result["metrics"][SKILL_SET]["exact_match"]}
            (runs if group == "candidate" else controls).append(row)
            if group == "candidate":
                states[name] = adapter_state(model)
            if log is not None:
                flag = " (undertrained)" if result["undertrained"] else ""
                log(f"  {name}: task exact match {row['quality']:.3f}, base skill {row['regression']:.3f}, "
                    f"{result['step_time_s'] * 1000:.1f} ms/step{flag}")
    return {"runs": runs, "controls": controls, "states": states, "model": identity, "tokenizer": tokenizer,
            "base": base, "base_metrics": measured_base, "data_sha256": data.sha256}


def gate(runs: list[dict], run_mode: str, data_sha256: str, base: Mapping, budget: int, gates=selection_gates) -> dict:
    """The three gates over the matrix: comparability, the quality / skill / memory gates, the choice."""
    settings = settings_for(run_mode)
    comparability = gates.comparable_candidates([{"name": r["name"], "config": r["config"]} for r in runs], VARIABLE,
                                                baseline_of(run_mode, data_sha256), list(SEEDS))
    results = {value: [{"seed": r["config"]["seed"], "status": r["status"], "quality": r.get("quality"),
                        "regression": r.get("regression"), "memory_bytes": r.get(settings["memory"])}
                       for r in runs if r["config"][VARIABLE] == value]
               for value in comparability["comparable"]}
    gated = gates.gate_candidates(results, {"quality": base[TASK_SET]["exact_match"],
                                            "regression": base[SKILL_SET]["exact_match"]},
                                  budget, settings["margin"], settings["regression_tolerance"],
                                  selection_gates.T95) if results else None
    choice = gates.choose_candidate(gated) if gated else {"decision": "reject", "chosen": None, "ranking": [],
                                                          "reason": "no_comparable_candidate"}
    return {"comparability": comparability, "gated": gated, "choice": choice}


def effects(matrix_runs: list[dict], controls: list[dict], base: Mapping) -> dict:
    """Paired effects over the seeds (`tools.core.effects`): each rank's task gain and base-skill change
    against the no-adapter base, and what dropping replay does to the base's skill (control minus
    the same rank with replay)."""
    found = {}
    for rank in RANKS:
        names = {f"r{rank}_s{seed}" for seed in SEEDS}
        rows = {r["config"]["seed"]: r for r in matrix_runs if r["name"] in names}
        if sorted(rows) != sorted(SEEDS) or any(r["status"] != "ok" for r in rows.values()):
            continue
        found[f"rank_{rank}_task_gain"] = paired_effect(
            {s: rows[s]["quality"] for s in SEEDS}, {s: base[TASK_SET]["exact_match"] for s in SEEDS},
            metric=f"{TASK_SET} exact match, rank {rank} minus the base")
        found[f"rank_{rank}_base_skill_change"] = paired_effect(
            {s: rows[s]["regression"] for s in SEEDS}, {s: base[SKILL_SET]["exact_match"] for s in SEEDS},
            metric=f"{SKILL_SET} exact match, rank {rank} minus the base")
    with_replay = {r["config"]["seed"]: r for r in matrix_runs if r["name"] in {f"r{CONTROL_RANK}_s{s}" for s in SEEDS}}
    without = {r["config"]["seed"]: r for r in controls}
    if sorted(with_replay) == sorted(without) == sorted(SEEDS):
        found["no_replay_base_skill_change"] = paired_effect(
            {s: without[s]["regression"] for s in SEEDS}, {s: with_replay[s]["regression"] for s in SEEDS},
            metric=f"{SKILL_SET} exact match, rank {CONTROL_RANK} without replay minus with replay")
        found["no_replay_task_change"] = paired_effect(
            {s: without[s]["quality"] for s in SEEDS}, {s: with_replay[s]["quality"] for s in SEEDS},
            metric=f"{TASK_SET} exact match, rank {CONTROL_RANK} without replay minus with replay")
    return found


def manifest_gates(gating: Mapping, run_mode: str, budget: int) -> list[dict]:
    settings = settings_for(run_mode)
    gates = [{"name": "comparable_candidates", "threshold": f"only {VARIABLE} differs; seeds {list(SEEDS)}",
              "measured": gating["comparability"]["comparable"], "passed": bool(gating["comparability"]["comparable"])}]
    gated = gating["gated"] or {"candidates": {}}
    for value, row in gated["candidates"].items():
        gates += [
            {"name": f"task_gain_rank_{value}", "threshold": "interval lower end > 0", "measured": row["gain_lower"],
             "passed": row["learned"]},
            {"name": f"base_skill_rank_{value}", "threshold": -settings["regression_tolerance"],
             "measured": row["regression_change"], "passed": row["kept_skill"]},
            {"name": f"versus_best_rank_{value}", "threshold": -settings["margin"], "measured": row["versus_best_lower"],
             "passed": row["equivalent"]},
            {"name": f"memory_rank_{value}", "threshold": budget, "measured": row["peak_memory_bytes"],
             "passed": row["memory_passed"]},
        ]
    return gates


def warnings_of(runs: list[dict]) -> list[str]:
    """Runs whose loss still fell over their last quarter (undertrained), as lines for the manifest."""
    return [f"{r['name']}: undertrained, its validation loss fell {r['last_quarter_drop']:.1%} over the last quarter"
            for r in runs if r.get("undertrained")]


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner: upstream first, then the matrix, the gates and the records."""
    say = log or (lambda message: None)
    model_id = CPU_MODEL if plan.run_mode != "real_gpu" and plan.model == "tiny" else plan.model
    budget = memory_budget(plan.run_mode, plan.options)
    if not plan.writes:
        say(describe(plan.run_mode, model_id, budget))
        return
    gates = _gates(plan)
    sink.require_new(RECORD_STAGES)
    root = sink.results_root
    adapter_folder = root / sink.slug / f"{sink.slug}_adapter_{sink.run_label}"
    if adapter_folder.exists():
        raise RecordExistsError(f"{adapter_folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    manifests.require_promise(plan.run_mode, plan.options, (UPSTREAM_ID,), CHAPTER_ID)
    upstream = manifests.read_upstream(root, upstream_id=UPSTREAM_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                       label=sink.run_label, options=plan.options,
                                       schema_version=admission.MANIFEST_SCHEMA)
    if (plan.options.get("selection_split") or "validation") != "validation":
        manifests.check_evaluation_split(root, upstream, reader_id=CHAPTER_ID)
    check_split(plan.options)
    admitted = manifests.admitted_data(upstream, root, schema_version=admission.ADMITTED_SCHEMA)
    say(describe(plan.run_mode, model_id, budget))
    with one_thread_on_cpu(plan.device):
        trained = train_candidates(model_id, plan.model_source, plan.device, admitted, plan.run_mode, log=say)
    gating = gate(trained["runs"], plan.run_mode, trained["data_sha256"], trained["base_metrics"], budget, gates)
    settings = settings_for(plan.run_mode)
    mechanism = plan.mechanism.describe({name: getattr(selection_gates, name) for name in GATE_NAMES})
    measured_effects = effects(trained["runs"], trained["controls"], trained["base_metrics"])
    matrix_body = {"model": trained["model"], "variable": VARIABLE, "seeds": list(SEEDS),
                   "memory_metric": settings["memory"], "memory_source": MEMORY_SOURCES[settings["memory"]],
                   "memory_budget": budget, "margin": settings["margin"],
                   "regression_tolerance": settings["regression_tolerance"],
                   "splits": {TASK_SET: "64's admitted validation split (the task: sum plus one)",
                              SKILL_SET: "the base's own plain sums, lab validation split"},
                   "quality_metric": QUALITY_METRIC, "digit_metric": DIGIT_METRIC,
                   "comparability_note": sft_raw.COMPARABILITY_NOTE, "base_metrics": trained["base_metrics"],
                   "runs": trained["runs"], "controls": trained["controls"], "gating": gating,
                   "effects": measured_effects, "warnings": warnings_of(trained["runs"]), "mechanism": mechanism,
                   "numerics": numerics_note()}
    matrix_path, _ = sink.save_record("matrix", matrix_body, schema_version=MATRIX_SCHEMA)
    outputs = [{"role": "candidate_matrix", **sink.lineage(matrix_path)}]
    chosen = gating["choice"]["chosen"]
    chosen_config = chosen_run = None
    if chosen is not None:
        name = f"r{chosen}_s{SEEDS[0]}"
        chosen_run = next(r for r in trained["runs"] if r["name"] == name)
        chosen_config = {key: value for key, value in chosen_run["config"].items() if key != "seed"}
        outputs += chosen_adapter(trained, name, chosen_run, adapter_folder, root, model_id)
    body = {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root), {"role": "admitted_data", **upstream.output("admitted_data")}],
        "base": {name: trained["base_metrics"][name]["exact_match"] for name in (TASK_SET, SKILL_SET)},
        "candidates": [{"name": r["name"], "config": r["config"], "status": r["status"], "quality": r["quality"],
                        "regression": r["regression"], "digit_accuracy": r["metrics"][TASK_SET]["digit_accuracy"],
                        "eval_loss": r["metrics"][TASK_SET]["eval_loss"], "undertrained": r["undertrained"],
                        "step_time_s": r["step_time_s"], "memory_bytes": r.get(settings["memory"]),
                        "adapter_sha256": r["adapter_sha256"]} for r in trained["runs"]],
        "gates": manifest_gates(gating, plan.run_mode, budget),
        "decision": {"decision": gating["choice"]["decision"], "reasons": [gating["choice"]["reason"]],
                     "chosen_rank": chosen, "ranking": gating["choice"]["ranking"]},
        "next_action": NEXT_STEP[gating["choice"]["decision"]],
        "outputs": outputs,
        "selected_config": chosen_config,
        "chosen_adapter": None if chosen is None else {"run": chosen_run["name"], "seed": SEEDS[0],
                                                       "adapter_sha256": chosen_run["adapter_sha256"]},
        "memory_metric": settings["memory"], "memory_budget": budget, "margin": settings["margin"],
        "regression_tolerance": settings["regression_tolerance"], "quality_metric": QUALITY_METRIC,
        "warnings": warnings_of(trained["runs"]), "mechanism": mechanism,
    }
    ref = manifests.write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
    say(f"63 selection: {gating['choice']['decision']} rank {chosen}; excluded "
        f"{[item['value'] for item in gating['comparability']['excluded']]}; manifest {ref.path.name}")


def _gates(plan):
    """The three gate functions of the plan's mechanism (the notebook's), else the library's."""
    from types import SimpleNamespace

    return SimpleNamespace(**{name: plan.mechanism.function(name, getattr(selection_gates, name))
                              for name in GATE_NAMES})


def chosen_adapter(trained: Mapping, name: str, run_record: Mapping, folder: Path, root: Path,
                   model_id: str) -> list[dict]:
    """The chosen run's adapter in peft's format under the results root; one output entry per file."""
    from peft import set_peft_model_state_dict

    config = TrainConfig.from_public(run_record["config"])
    model = attach_adapter(copy.deepcopy(trained["base"]), config)
    set_peft_model_state_dict(model, trained["states"][name])
    hashes = save_adapter(model, folder, model_id, trained["model"].get("base_revision"))
    return [{"role": f"chosen_adapter/{path}", "path": (folder / path).relative_to(root).as_posix(), "sha256": digest}
            for path, digest in hashes.items()]
