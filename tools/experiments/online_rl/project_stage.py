"""Project 85 (online reward optimisation, GRPO / RLVR): start from 62's delivered SFT adapter, optimise
it online against a verifiable reward, and decide from paired held-out evidence whether to adopt it.

Before any work the runner reads 62's manifest (present, promised sha256 (required in real_gpu), seal,
run mode, decision `delivered`), loads the base it names and checks the base's revision, and checks
every file of the delivered adapter against the manifest's sha256 before loading it. Then, for each
seed, from the same adapter, the same training problems in the same order and the same sampling seeds:

    grpo              `steps` GRPO steps on the chain's task (two-digit sums plus one, arithmetic built in
                      code), `group_size` replies per prompt, each batch passed through the coverage gate
                      (the plan's `rollout_coverage`) before it may update
    shuffled_reward   the negative control: the same steps, rollouts and updates with the verdicts
                      permuted across the batch (the matched budget)

Each arm's step records go to the throughput accounting (the plan's `update_throughput`). The held-out
sets are opened once, at the end: the chain task's held-out problems and the base's own skill (plain
sums, the suite 62's regression gate read), for 62's adapter untouched (the baseline row) and for
every arm. The decision (the plan's `adoption_decision`) pairs GRPO with the baseline per seed:
accept / tune / reject. Records: `rollouts` (the rollout summary: every step's coverage, updates and
policy change), `evaluation` (the paired evaluation) and the sealed candidate `manifest`, which names
the candidate adapter (seed 1's GRPO arm, peft format) with its sha256, the run mode, 62's manifest
sha256, the gates and the decision, for project 86.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from tools.core import effects
from tools.core.catalog import find_chapter
from tools.core.handoff import check_manifest_body, fix_command, require_manifest, seal
from tools.core.numerics import cpu_numerics, one_thread_on_cpu
from tools.data import lab_tasks, sft_raw
from tools.models.adapters import save_adapter
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.measure.sampler import ResourceSampler, peaks
from tools.experiments.online_rl import project_gates as package_gates
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.project_policy import (
    StepSettings,
    adapter_sha256,
    check_adapter_files,
    held_out,
    load_policy,
    train_arm,
)

CHAPTER_ID = "85"
UPSTREAM_ID = "62"
ROLLOUT_SCHEMA = "online-reward-rollouts/v1"
EVALUATION_SCHEMA = "online-reward-evaluation/v1"
MANIFEST_SCHEMA = "online-reward-manifest/v1"
RECORD_STAGES = ("rollouts", "evaluation", "manifest")
GATE_NAMES = ("rollout_coverage", "update_throughput", "adoption_decision")
ARMS = ("grpo", "shuffled_reward")
SEEDS = (1, 2, 3, 4, 5)
CANDIDATE_SEED = 1
TASK = sft_raw.TASK
SKILL_TASK = sft_raw.REPLAY_TASK
UPSTREAM_SCHEMA = "sft-delivery-manifest/v2"
"""Project 62's manifest schema (tools.experiments.sft_chain.delivery.MANIFEST_SCHEMA; a test ties the two)."""
MIN_POLICY_CHANGE = 1e-6
"""Mean absolute change of the batch's response log-probs below which an update did not change the policy."""
CONFIDENCE = 0.95
REGRESSION_TOLERANCE = 0.05
"""The base skill may fall by at most this much (mean over seeds), as in 62's delivery gate (a test ties the two)."""
SETTINGS = {
    "cpu_smoke": {"step": StepSettings(steps=20, prompts_per_step=8, group_size=8, updates_per_batch=2,
                                       learning_rate=3e-4, max_new_tokens=6, temperature=0.7),
                  "train_problems": 160, "task_held_out": 300, "skill_held_out": 300, "resource_budget_s": 120.0},
    "real_gpu": {"step": StepSettings(steps=20, prompts_per_step=8, group_size=8, updates_per_batch=2,
                                      learning_rate=5e-5, max_new_tokens=16, temperature=0.7),
                 "train_problems": 24, "task_held_out": 400, "skill_held_out": 400, "resource_budget_s": 900.0},
}
"""Per run mode. cpu_smoke: 20 steps of 8 problems x 8 replies on 160 distinct training problems, 300 held-out
problems per set (one problem = 0.0033), five seeds (three gave intervals too wide for the control effect to
clear its margin under both numerics profiles). real_gpu keeps the original's 24 training problems and 8
rollouts per problem (the token limit is the lab task's, not GSM8K's 384) and reads 400 held-out problems (one
problem = 0.0025). The resource budget is the training wall seconds per seed a candidate may cost."""
DATA_SEEDS = {"train": 8501, "task_held_out": 8502, "skill_held_out": 8503}
COMPARABILITY_NOTE = ("arithmetic built in code (two-digit sums plus one) from 62's lab-scale SFT adapter; not comparable "
                      "with the original course's GSM8K figures (mean reward +0.0521, pass@group +0.0833, scoreable "
                      "share 0.75)")


def settings_for(run_mode: str) -> dict:
    return SETTINGS["real_gpu" if run_mode == "real_gpu" else "cpu_smoke"]


def describe(run_mode: str) -> str:
    plan = settings_for(run_mode)
    step = plan["step"]
    return (f"online_reward ({run_mode}): reads project 62's delivered manifest and adapter, runs {step.steps} GRPO "
            f"steps of {step.prompts_per_step} prompts x {step.group_size} replies per seed {SEEDS} and a shuffled-"
            "reward control at the same budget, each batch behind the coverage gate, opens the held-out task and "
            "base-skill sets once, and decides accept / tune / reject against 62's adapter; nothing is read or "
            "written in dry_run")


def problems_for(run_mode: str) -> dict:
    """The training problems (one order for every seed and arm) and the two held-out sets."""
    plan = settings_for(run_mode)
    return {"train": lab_tasks.sample_problems(TASK, "train", plan["train_problems"], DATA_SEEDS["train"]),
            "task_held_out": lab_tasks.sample_problems(TASK, "heldout", plan["task_held_out"],
                                                       DATA_SEEDS["task_held_out"]),
            "skill_held_out": lab_tasks.sample_problems(SKILL_TASK, "heldout", plan["skill_held_out"],
                                                        DATA_SEEDS["skill_held_out"])}


def candidate_folder(sink) -> Path:
    return sink.results_root / sink.slug / f"{sink.slug}_candidate_{sink.run_label}"


def promised(options, upstream_id: str) -> str | None:
    """The sha256 promised for the upstream manifest: `UPSTREAM_SHA256` as a dict, or the command line's pairs."""
    value = options.get("upstream_sha256") or {}
    if isinstance(value, (list, tuple)):
        value = dict(value)
    if not isinstance(value, dict):
        raise ConfigError(f"UPSTREAM_SHA256 must be a dict {{project id: sha256}}, got {value!r}")
    return value.get(upstream_id)


def read_delivery(plan, sink):
    """62's manifest (every handoff check; a promised sha256 is required in real_gpu) and its delivery section;
    refuses a state other than delivered."""
    digest = promised(plan.options, UPSTREAM_ID)
    if plan.run_mode == "real_gpu" and digest is None:
        raise ConfigError("project 85 in real_gpu needs UPSTREAM_SHA256 for project 62: the seal alone does not "
                          f"catch a manifest edited and sealed again. Nothing was run. Fix: "
                          f"{fix_command(CHAPTER_ID, plan.run_mode)}")
    upstream = require_manifest(sink.results_root, chapter_id=UPSTREAM_ID, slug=find_chapter(UPSTREAM_ID).slug,
                                label=plan.options.get("upstream_label") or sink.run_label, run_mode=plan.run_mode,
                                promised_sha256=digest, schema_version=UPSTREAM_SCHEMA, decisions=("delivered",),
                                reader="project 85", reader_id=CHAPTER_ID)
    section = upstream.record.get("delivery")
    if not isinstance(section, dict) or "adapter" not in section or "base_model" not in section:
        raise UpstreamRecordError(f"{upstream.path.name} has no delivery section; project 62 wrote it with another "
                                  "version of the course. Nothing was run.", stage="manifest")
    return upstream, section


def base_revision(identity) -> str | None:
    """The revision 62 names for its base: the hub commit of a cached model, else `sha256:<weights>`."""
    if identity.get("revision"):
        return str(identity["revision"])
    return f"sha256:{identity['weights_sha256']}" if identity.get("weights_sha256") else None


def numerics_note() -> dict:
    """The CPU numerics in force and where the lab weights came from (what a record's figures depend on)."""
    import os

    return {"cpu_numerics": cpu_numerics(), "lab_models": os.environ.get("COURSE_LAB_MODELS") or "committed"}




def write_manifest(sink, body: dict):
    """The sealed candidate manifest, written once (header, runtime, body, seal)."""
    check_manifest_body(body)
    record = {**sink.header("manifest", MANIFEST_SCHEMA), "runtime": sink.runtime(), **body}
    return sink.save(sink.record_path("manifest"), seal(record), stage="manifest")


def measure_all(models: dict, tokenizer, sets: dict, max_new_tokens: int, device: str) -> dict:
    """Every model measured once on every held-out set: `{name: {set: greedy exact match result}}`."""
    with one_thread_on_cpu(device):
        return {name: {set_name: held_out(model, tokenizer, problems, max_new_tokens)
                       for set_name, problems in sets.items()} for name, model in models.items()}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    if not plan.writes:
        say(describe(plan.run_mode))
        return
    fns = SimpleNamespace(**{name: plan.mechanism.function(name, getattr(package_gates, name)) for name in GATE_NAMES})
    mechanism = plan.mechanism.describe({name: getattr(package_gates, name) for name in GATE_NAMES})
    sink.require_new(RECORD_STAGES)
    root, folder = sink.results_root, candidate_folder(sink)
    if folder.exists():
        raise RecordExistsError(f"{folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    upstream, section = read_delivery(plan, sink)
    adapter_folder = root / section["adapter"]["folder"]
    check_adapter_files(adapter_folder, section["adapter"]["files"])
    base_model = section["base_model"]
    plan_settings = settings_for(plan.run_mode)
    settings: StepSettings = plan_settings["step"]
    data = problems_for(plan.run_mode)
    say(describe(plan.run_mode))
    import torch

    cuda = str(plan.device).startswith("cuda")
    with one_thread_on_cpu(plan.device):
        base, tokenizer, identity = load_quietly(base_model["model_id"], plan.model_source, plan.device)
        base.config.use_cache = False
        if base_revision(identity) != base_model.get("revision"):
            raise UpstreamRecordError(f"62's adapter was trained on {base_model['model_id']} revision "
                                      f"{base_model.get('revision')}, this base is {base_revision(identity)}. Nothing "
                                      "was trained.", stage="manifest")
        models, arms = {"sft_adapter": load_policy(base, adapter_folder)}, {}
        for seed in SEEDS:
            for arm in ARMS:
                model = load_policy(base, adapter_folder)
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                sampler = ResourceSampler(device="cuda" if cuda else "cpu")
                started = time.perf_counter()
                with sampler:
                    steps = train_arm(model, tokenizer, data["train"], settings, fns.rollout_coverage, seed=seed,
                                      control=arm != "grpo")
                seconds = time.perf_counter() - started
                throughput = fns.update_throughput(
                    [{key: step[key] for key in ("rollouts", "rollouts_in_loss", "optimizer_steps", "policy_change",
                                                 "seconds")} for step in steps], MIN_POLICY_CHANGE)
                arms[(arm, seed)] = {"steps": steps, "throughput": throughput, "training_s": seconds,
                                     "adapter_sha256": adapter_sha256(model),
                                     "peak_allocated_mib": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None,
                                     "sampled": {**peaks(sampler.snapshot()), **sampler.summary()}}
                models[f"{arm}_seed_{seed}"] = model
                say(f"  seed {seed} {arm}: {throughput['effective_steps']}/{throughput['steps']} steps changed the "
                    f"policy, mean reward {sum(s['mean_reward'] for s in steps) / len(steps):.3f}, {seconds:.1f} s")
    sets = {"task_held_out": data["task_held_out"], "skill_held_out": data["skill_held_out"]}
    measured = measure_all(models, tokenizer, sets, settings.max_new_tokens, plan.device)
    exact = {name: {set_name: result["exact_match"] for set_name, result in by_set.items()}
             for name, by_set in measured.items()}
    baseline = exact["sft_adapter"]

    def per_seed(arm, set_name):
        return {seed: exact[f"{arm}_seed_{seed}"][set_name] for seed in SEEDS}

    baseline_per_seed = {set_name: {seed: baseline[set_name] for seed in SEEDS} for set_name in sets}
    decision = fns.adoption_decision(
        {"candidate": per_seed("grpo", "task_held_out"), "baseline": baseline_per_seed["task_held_out"]},
        {"candidate": per_seed("grpo", "skill_held_out"), "baseline": baseline_per_seed["skill_held_out"]},
        {"measured": sum(arms[("grpo", seed)]["training_s"] for seed in SEEDS) / len(SEEDS),
         "budget": plan_settings["resource_budget_s"]},
        {seed: arms[("grpo", seed)]["throughput"]["effective_steps"] for seed in SEEDS},
        effects.t_critical(CONFIDENCE, len(SEEDS) - 1), 0.0, REGRESSION_TOLERANCE)
    if not isinstance(decision, dict) or decision.get("decision") not in package_gates.DECISIONS:
        raise ConfigError(f"adoption_decision returned {decision!r}; it must decide one of {package_gates.DECISIONS}")
    paired = {
        "task_gain": effects.paired_effect(per_seed("grpo", "task_held_out"), baseline_per_seed["task_held_out"],
                                           metric="held-out task exact match, GRPO minus 62's adapter"),
        "skill_change": effects.paired_effect(per_seed("grpo", "skill_held_out"), baseline_per_seed["skill_held_out"],
                                              metric="held-out base skill exact match, GRPO minus 62's adapter"),
        "reward_signal": effects.paired_effect(per_seed("grpo", "task_held_out"),
                                               per_seed("shuffled_reward", "task_held_out"),
                                               metric="held-out task exact match, GRPO minus the shuffled-reward control"),
        "control_task_change": effects.paired_effect(per_seed("shuffled_reward", "task_held_out"),
                                                     baseline_per_seed["task_held_out"],
                                                     metric="held-out task exact match, control minus 62's adapter"),
    }
    model_id = base_model["model_id"]
    with one_thread_on_cpu(plan.device):
        candidate_files = save_adapter(models[f"grpo_seed_{CANDIDATE_SEED}"], folder / "adapter", model_id,
                                         base_model.get("revision"))
    rollouts_body = {
        "comparability": COMPARABILITY_NOTE, "settings": settings.public(), "seeds": list(SEEDS), "arms": list(ARMS),
        "min_policy_change": MIN_POLICY_CHANGE, "mechanism": mechanism, "numerics": numerics_note(),
        "runs": {f"{arm}_seed_{seed}": {"arm": arm, "seed": seed, **value} for (arm, seed), value in arms.items()},
    }
    rollouts_path, _ = sink.save_record("rollouts", rollouts_body, schema_version=ROLLOUT_SCHEMA)
    evaluation_body = {
        "comparability": COMPARABILITY_NOTE, "model": identity, "task": TASK, "skill_task": SKILL_TASK,
        "data_seeds": DATA_SEEDS, "held_out_sizes": {name: len(problems) for name, problems in sets.items()},
        "opened_once": True, "measured": measured, "exact_match": exact, "effects": paired,
        "decision": decision, "regression_tolerance": REGRESSION_TOLERANCE, "confidence": CONFIDENCE,
        "resource_budget_s": plan_settings["resource_budget_s"], "mechanism": mechanism, "numerics": numerics_note(),
        "lineage": [sink.lineage(rollouts_path)],
    }
    evaluation_path, _ = sink.save_record("evaluation", evaluation_body, schema_version=EVALUATION_SCHEMA)
    reasons = decision.get("reasons", [])
    candidate_entry = {
        "adapter_folder": folder.joinpath("adapter").relative_to(root).as_posix(),
        "adapter_file": folder.joinpath("adapter", "adapter_model.safetensors").relative_to(root).as_posix(),
        "adapter_file_sha256": candidate_files["adapter_model.safetensors"], "files": candidate_files,
        "adapter_sha256": arms[("grpo", CANDIDATE_SEED)]["adapter_sha256"], "seed": CANDIDATE_SEED,
        "base_model": dict(base_model), "started_from": {"project": UPSTREAM_ID,
                                                         "adapter_sha256": section["adapter"].get("adapter_sha256")},
        "run_mode": plan.run_mode, "upstream_manifest_sha256": upstream.sha256,
    }
    body = {
        "comparability": COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root)] + [{"role": f"sft_adapter/{name}", "path": f"{section['adapter']['folder']}/{name}",
                                             "sha256": digest} for name, digest in sorted(section["adapter"]["files"].items())],
        "candidates": [{"name": "sft_adapter", "baseline": True, "adapter_sha256": section["adapter"].get("adapter_sha256"),
                        **{f"{name}_exact_match": value for name, value in baseline.items()}}]
        + [{"name": f"grpo_seed_{seed}", "baseline": False, "adapter_sha256": arms[("grpo", seed)]["adapter_sha256"],
            "delivered": seed == CANDIDATE_SEED,
            **{f"{name}_exact_match": value for name, value in exact[f"grpo_seed_{seed}"].items()}} for seed in SEEDS],
        "gates": [
            {"name": "effective_updates", "threshold": "every seed > 0",
             "measured": {str(seed): arms[("grpo", seed)]["throughput"]["effective_steps"] for seed in SEEDS},
             "passed": "no_effective_update" not in reasons},
            {"name": "task_gain", "threshold": "interval lower end > 0", "measured": paired["task_gain"]["lower"],
             "passed": not {"task_worse", "task_gain_not_shown"} & set(reasons)},
            {"name": "base_skill_kept", "threshold": -REGRESSION_TOLERANCE, "measured": paired["skill_change"]["mean"],
             "passed": "base_skill_lost" not in reasons},
            {"name": "resource", "threshold": plan_settings["resource_budget_s"],
             "measured": sum(arms[("grpo", seed)]["training_s"] for seed in SEEDS) / len(SEEDS),
             "passed": not {"resource_not_measured", "resource_over_budget"} & set(reasons)},
        ],
        "decision": {"decision": decision["decision"], "reasons": list(reasons)},
        "next_action": package_gates.NEXT_ACTIONS[decision["decision"]],
        "outputs": [{"role": "rollout_summary", **sink.lineage(rollouts_path)},
                    {"role": "paired_evaluation", **sink.lineage(evaluation_path)}]
        + [{"role": f"candidate/adapter/{name}", **sink.lineage(folder / "adapter" / name)}
           for name in sorted(candidate_files)],
        "candidate": candidate_entry,
        "effects": paired,
        "mechanism": mechanism,
    }
    ref = write_manifest(sink, body)
    say(f"85 decision: {decision['decision']} {reasons or ''}; manifest {ref.path.name}")

