"""PT-GRPO-FAMILY's Step 5: the GRPO family's loss aggregations side by side at one rollout budget.

Stage `compare`: one record per variant. Every variant starts from the same weights and sees the same
prompts in the same order, the same number of sampled groups (the rollout budget) and the same number of
updates; only the loss aggregation differs (`grpo`, `bnpo`, `dr_grpo`, `dapo`); `clip_higher` is `dapo` with
epsilon_high 0.28 alone (the control that isolates clip-higher); `dapo_recipe` adds DAPO's other pieces as well
(dynamic sampling with refill inside the same budget, overlong masking). Per step: sample a group per prompt at the sampling temperature, verify (integer-answer-v1),
normalise the rewards inside each group (chapter 18's group advantages: a group whose rewards do not vary
gives nothing), then `updates_per_batch` updates, each over `micro_batches` micro-batches with gradient
accumulation (so `bnpo` and `dapo` normalise by different token counts). Measured: held-out exact match
before and after (greedy), per step the mean sampled completion length (overall and of the wrong replies),
the clip rates and the policy's mean token entropy on its own samples.

The planted length incentive: replies are sampled at `temperature` 1.5, at which about a third of the lab
model's replies are format errors that carry extra tokens (longer and wrong). GRPO's per-response mean
gives each token of a long wrong reply a smaller share of the penalty than a token of a short one; the
token-level aggregations do not. The records show what the lengths did.

Stage `mismatch`: the importance-sampling correction. Replies are drawn by a sampler (the model in bfloat16,
and the model at temperature 1.5) with the log-probabilities the sampler reported, and scored again by the
trainer (float32, temperature 1); the per-token log-probability gap, and the weights of the four correction
modes through `importance_sampling_weights`.

The mechanism functions come from `plan.mechanism` (the learner's, passed by the notebook) or this
package's `family_losses`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from tools.core.numerics import cpu_numerics
from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.experiments.online_rl import advantages as advantages_module
from tools.experiments.online_rl import family_losses
from tools.experiments.online_rl.batch import pack
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.rollouts import greedy_exact_match, prompt_of, sample_replies
from tools.experiments.online_rl.verifier import verify_integer_answer
from tools.measure.sampler import ResourceSampler, peaks

SCHEMA = "grpo-family-variant/v1"
MISMATCH_SCHEMA = "grpo-family-mismatch/v1"
MIB = 2 ** 20
MECHANISM_DEFAULTS = {"aggregate_loss": family_losses.aggregate_loss,
                      "clipped_token_losses": family_losses.clipped_token_losses,
                      "fill_batch": family_losses.fill_batch,
                      "importance_sampling_weights": family_losses.importance_sampling_weights}
VARIANTS = {
    "grpo": {"loss_type": "grpo"},
    "bnpo": {"loss_type": "bnpo"},
    "dr_grpo": {"loss_type": "dr_grpo"},
    "dapo": {"loss_type": "dapo"},
    "clip_higher": {"loss_type": "dapo", "epsilon_high": 0.28},
    "dapo_recipe": {"loss_type": "dapo", "epsilon_high": 0.28, "dynamic_sampling": True, "mask_truncated": True},
}
"""Variant -> what differs from the shared settings (eps 0.2 both sides, no dynamic sampling, no overlong mask)."""
PLANS = {
    "cpu_smoke": {"steps": 16, "prompts_per_step": 16, "group_size": 6, "updates_per_batch": 2, "micro_batches": 2,
                  "learning_rate": 2e-4, "temperature": 1.5, "max_new_tokens": 12, "train_problems": 128,
                  "train_seed": 101, "eval_problems": 810, "eval_seed": 0, "epsilon": 0.2, "seed": 0},
    "real_gpu": {"steps": 4, "prompts_per_step": 4, "group_size": 4, "updates_per_batch": 1, "micro_batches": 2,
                 "learning_rate": 1e-6, "temperature": 1.0, "max_new_tokens": 64, "train_problems": 64,
                 "train_seed": 101, "eval_problems": 64, "eval_seed": 0, "epsilon": 0.2, "seed": 0},
}
MISMATCH_PLANS = {
    "cpu_smoke": {"problems": 32, "group_size": 4, "max_new_tokens": 8, "seed": 0, "clip_max": 2.0, "clip_min": 0.5,
                  "hot_temperature": 1.5},
    "real_gpu": {"problems": 16, "group_size": 4, "max_new_tokens": 64, "seed": 0, "clip_max": 2.0, "clip_min": 0.5,
                 "hot_temperature": 1.5},
}
STAGES = ("compare", "mismatch")
LAB_TASK = lab_tasks.PRETRAINING_TASK


def variant_names(chapter: str = "PT-GRPO-FAMILY", run_mode: str = "cpu_smoke") -> tuple[str, ...]:
    return tuple(VARIANTS)


def settings_for(run_mode: str, overrides: dict | None = None, plans: dict = PLANS) -> dict:
    """The run mode's plan (dry_run describes real_gpu) with the plan's options of the same names."""
    base = dict(plans["cpu_smoke" if run_mode == "cpu_smoke" else "real_gpu"])
    unknown = sorted(set(overrides or {}) - set(base) - {"progress"})
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; this stage knows {sorted(base)}")
    return {**base, **{key: value for key, value in (overrides or {}).items() if key in base and value is not None}}


def tasks_for(settings: dict) -> tuple[list, list]:
    """Training problems (train split) and held-out problems (heldout split, disjoint by content hash)."""
    train = lab_tasks.sample_problems(LAB_TASK, "train", settings["train_problems"], settings["train_seed"])
    held_out = lab_tasks.problems(LAB_TASK, "heldout")
    if settings["eval_problems"] < len(held_out):
        held_out = lab_tasks.sample_problems(LAB_TASK, "heldout", settings["eval_problems"], settings["eval_seed"])
    return train, held_out


def logps_and_entropy(model, batch: dict, temperature: float):
    """Per-token log-probabilities of the packed responses (with grad) and the policy's per-token entropy
    (no grad), both from log_softmax(logits / temperature)."""
    import torch

    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1:-1].float() / temperature
    table = torch.log_softmax(logits, dim=-1)
    logps = table.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(table.detach().exp() * table.detach()).sum(dim=-1)
    return logps, entropy


def _draw_groups(model, tokenizer, tasks, settings: dict, seed: int) -> list[list[dict]]:
    groups = sample_replies(model, tokenizer, [prompt_of(task) for task in tasks], settings["group_size"],
                            max_new_tokens=settings["max_new_tokens"], temperature=settings["temperature"], seed=seed)
    for task, group in zip(tasks, groups):
        for reply in group:
            reply.update(verify_integer_answer(reply["text"], task.label, reply["finished"]))
    return groups


def collect_groups(model, tokenizer, stream, settings: dict, variant: dict, functions: dict, step: int) -> dict:
    """This step's groups: `prompts_per_step` drawn groups; with dynamic sampling, drawn in chunks of that
    size until `fill_batch` keeps `prompts_per_step` scoreable groups or this step's share of the budget
    (`dynamic_budget` groups) is used. Returns the groups, the indices kept, the loss masks, groups drawn."""
    want = settings["prompts_per_step"]
    groups: list[list[dict]] = []
    chunk = 0
    while True:
        tasks = [stream() for _ in range(want)]
        groups += _draw_groups(model, tokenizer, tasks, settings, seed=settings["seed"] * 100_003 + step * 101 + chunk)
        chunk += 1
        view = [[{"reward": reply["reward"], "truncated": not reply["finished"]} for reply in group] for group in groups]
        if variant.get("dynamic_sampling"):
            budget = settings["dynamic_budget"]
            filled = functions["fill_batch"](view, want, budget, bool(variant.get("mask_truncated", False)))
            if filled["full"] or len(groups) >= budget:
                return {"groups": groups, "kept": filled["kept"], "loss_masks": filled["loss_masks"],
                        "drawn": len(groups), "budget": budget}
            continue
        masks = [[not (variant.get("mask_truncated", False) and item["truncated"]) for item in group] for group in view]
        return {"groups": groups, "kept": list(range(len(groups))), "loss_masks": masks, "drawn": len(groups),
                "budget": want}


def update_step(model, optimizer, tokenizer, collected: dict, settings: dict, variant: dict, functions: dict) -> dict:
    """Advantages of the kept groups, then the updates; what the step measured."""
    import torch

    groups = [collected["groups"][index] for index in collected["kept"]]
    rewards = [[reply["reward"] for reply in group] for group in groups]
    normalised = advantages_module.group_advantages(rewards) if groups else {"advantages": [], "scoreable_share": None}
    prompts, responses, gains, row_masks = [], [], [], []
    for group, values, masks in zip(groups, normalised["advantages"], collected["loss_masks"]):
        if values is None:
            continue
        for reply, value, keep in zip(group, values, masks):
            prompts.append(reply["prompt_ids"])
            responses.append(reply["reply_ids"])
            gains.append(value)
            row_masks.append(keep)
    drawn = [reply for group in collected["groups"] for reply in group]
    wrong = [len(reply["reply_ids"]) for reply in drawn if reply["outcome"] != "correct"]
    record = {"groups_drawn": collected["drawn"], "group_budget": collected["budget"],
              "groups_kept": len(collected["kept"]),
              "scoreable_share": normalised["scoreable_share"],
              "mean_reward": sum(reply["reward"] for reply in drawn) / len(drawn),
              "mean_length": sum(len(reply["reply_ids"]) for reply in drawn) / len(drawn),
              "mean_length_wrong": sum(wrong) / len(wrong) if wrong else None,
              "outcomes": {name: sum(reply["outcome"] == name for reply in drawn)
                           for name in ("correct", "wrong", "format_error", "truncated")},
              "updates": [], "entropy": None}
    if not gains:
        return record
    device = next(model.parameters()).device
    order = list(range(len(gains)))
    parts = [order[index::settings["micro_batches"]] for index in range(settings["micro_batches"])]
    parts = [part for part in parts if part]
    batches = []
    for part in parts:
        batch = {key: value.to(device) for key, value in
                 pack([prompts[i] for i in part], [responses[i] for i in part], tokenizer.pad_token_id).items()}
        keep = torch.tensor([row_masks[i] for i in part], dtype=torch.bool, device=device).unsqueeze(1)
        batch["mask"] = batch["completion_mask"].bool() & keep
        batch["advantages"] = torch.tensor([gains[i] for i in part], dtype=torch.float32, device=device)
        with torch.no_grad():
            batch["old"], _ = logps_and_entropy(model, batch, settings["temperature"])
        batches.append(batch)
    all_tokens = sum(int(batch["mask"].sum()) for batch in batches)
    if all_tokens == 0:
        return record
    entropies = []
    for _ in range(settings["updates_per_batch"]):
        optimizer.zero_grad(set_to_none=True)
        rates, losses = [], []
        for batch in batches:
            if not bool(batch["mask"].any()):
                continue
            logps, entropy = logps_and_entropy(model, batch, settings["temperature"])
            if not record["updates"]:
                entropies.append((float((entropy * batch["mask"]).sum()), int(batch["mask"].sum())))
            out = functions["clipped_token_losses"](logps, batch["old"], batch["advantages"], batch["mask"],
                                                    settings["epsilon"], variant.get("epsilon_high", settings["epsilon"]))
            extra = {"dr_grpo": {"max_completion_length": settings["max_new_tokens"]},
                     "dapo": {"num_items_in_batch": all_tokens}}.get(variant["loss_type"], {})
            loss = functions["aggregate_loss"](out["token_losses"], batch["mask"], variant["loss_type"], **extra)
            if variant["loss_type"] != "dapo":
                loss = loss / len(batches)  # gradient accumulation: the mean of the micro-batches' losses
            loss.backward()
            losses.append(float(loss.detach()))
            rates.append((out["clip_region"], int(batch["mask"].sum())))
        optimizer.step()
        record["updates"].append({"loss": sum(losses), "clip_rate": sum(r * n for r, n in rates) / sum(n for _, n in rates)})
    total, count = sum(value for value, _ in entropies), sum(n for _, n in entropies)
    record["entropy"] = total / count if count else None
    return record


def run_variant(model, tokenizer, name: str, settings: dict, functions: dict, *, log: Callable | None = None) -> dict:
    """One variant from the given model (trained in place): held-out exact match before and after, and
    per step what `update_step` measured."""
    import torch

    variant = VARIANTS[name]
    train, held_out = tasks_for(settings)
    settings = {**settings, "dynamic_budget": 2 * settings["prompts_per_step"]}
    torch.manual_seed(settings["seed"])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings["learning_rate"],
                                  weight_decay=0.0)
    before = greedy_exact_match(model, tokenizer, held_out, verify_integer_answer,
                                max_new_tokens=settings["max_new_tokens"])
    position = [0]

    def stream():
        task = train[position[0] % len(train)]
        position[0] += 1
        return task

    steps, budget = [], settings["steps"] * settings["prompts_per_step"]
    used = 0
    while used < budget:
        model.eval()
        collected = collect_groups(model, tokenizer, stream, {**settings, "dynamic_budget": min(
            settings["dynamic_budget"], budget - used)}, variant, functions, len(steps))
        used += collected["drawn"]
        model.train()
        steps.append(update_step(model, optimizer, tokenizer, collected, settings, variant, functions))
        if log:
            last = steps[-1]
            log(f"{name} step {len(steps) - 1}: reward {last['mean_reward']:.2f}, length {last['mean_length']:.2f}, "
                f"kept {last['groups_kept']}/{last['groups_drawn']}")
    model.eval()
    after = greedy_exact_match(model, tokenizer, held_out, verify_integer_answer, max_new_tokens=settings["max_new_tokens"])
    return {"variant": name, "variant_settings": variant, "settings": settings, "before": before, "after": after,
            "rollout_groups": used, "steps": steps, "tasks": {"train": len(train), "held_out": len(held_out)}}


def summary(record: dict) -> dict:
    """What the page and the effect tests read from a variant record."""
    steps = record["steps"]
    updates = [update for step in steps for update in step["updates"]]
    entropies = [step["entropy"] for step in steps if step["entropy"] is not None]
    wrong = [step["mean_length_wrong"] for step in steps if step["mean_length_wrong"] is not None]
    half = max(1, len(steps) // 2)
    return {"variant": record["variant"], "exact_match_before": record["before"]["exact_match"],
            "exact_match_after": record["after"]["exact_match"],
            "exact_match_gain": record["after"]["exact_match"] - record["before"]["exact_match"],
            "length_first": sum(step["mean_length"] for step in steps[:half]) / half,
            "length_last": sum(step["mean_length"] for step in steps[-half:]) / half,
            "length_wrong_last": sum(wrong[-half:]) / len(wrong[-half:]) if wrong else None,
            "clip_rate": sum(update["clip_rate"] for update in updates) / len(updates) if updates else None,
            "entropy": sum(entropies) / len(entropies) if entropies else None,
            "rollout_groups": record["rollout_groups"], "updates": len(updates), "steps": len(steps)}


def _measured(work: Callable[[], dict], device: str) -> dict:
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device="cuda" if cuda else "cpu")
    started = time.perf_counter()
    try:
        with sampler:
            body = {"status": "ok", "error": None, **work()}
    except torch.OutOfMemoryError as error:
        body = {"status": "oom", "error": str(error).splitlines()[0]}
    return {**body, "seconds": time.perf_counter() - started,
            "peak_allocated_mib": torch.cuda.max_memory_allocated() / MIB if cuda else None,
            "sampled": {**peaks(sampler.snapshot()), **sampler.summary()}}


def _sampler_gap(model, sampler_model, tokenizer, problems, settings: dict, temperature: float, functions: dict) -> dict:
    """Replies drawn by `sampler_model` at `temperature`, with the log-probabilities it reported, against the
    trainer's (float32 `model`, temperature 1) on the same tokens; every correction mode's weights."""
    import torch

    groups = sample_replies(sampler_model, tokenizer, [prompt_of(task) for task in problems], settings["group_size"],
                            max_new_tokens=settings["max_new_tokens"], temperature=temperature, seed=settings["seed"])
    replies = [reply for group in groups for reply in group]
    batch = {key: value.to(next(model.parameters()).device) for key, value in
             pack([reply["prompt_ids"] for reply in replies], [reply["reply_ids"] for reply in replies],
                  tokenizer.pad_token_id).items()}
    mask = batch["completion_mask"].bool()
    sampler_logps = torch.zeros(mask.shape)
    for row, reply in enumerate(replies):
        sampler_logps[row, :len(reply["logprobs"])] = torch.tensor(reply["logprobs"])
    with torch.no_grad():
        trainer_logps, _ = logps_and_entropy(model.eval(), batch, 1.0)
    sampler_logps = sampler_logps.to(trainer_logps.dtype)
    gap = (trainer_logps - sampler_logps)[mask]
    modes = {}
    for mode in family_losses.IS_MODES:
        out = functions["importance_sampling_weights"](trainer_logps, sampler_logps, mask, mode, settings["clip_max"],
                                                       settings["clip_min"])
        weights = out["weights"][mask]
        modes[mode] = {"changed": out["changed"], "mean_weight": float(weights.mean()),
                       "zero_share": float((weights == 0).float().mean()), "max_weight": float(weights.max())}
    return {"replies": len(replies), "tokens": int(mask.sum()), "sampler_temperature": temperature,
            "gap": {"mean": float(gap.mean()), "mean_abs": float(gap.abs().mean()), "max_abs": float(gap.abs().max())},
            "sequence_gap_max_abs": float((trainer_logps - sampler_logps).masked_fill(~mask, 0).sum(dim=1).abs().max()),
            "modes": modes}


def mismatch(model, tokenizer, settings: dict, functions: dict) -> dict:
    """Two samplers against the float32 trainer (temperature 1) on their own replies: the model in bfloat16 (what
    an inference engine often runs) and the model itself sampling at a higher temperature (a sampler whose
    log-probabilities come from another distribution)."""
    import torch

    problems = lab_tasks.sample_problems(LAB_TASK, "train", settings["problems"], settings["seed"])
    low_precision = copy.deepcopy(model).to(torch.bfloat16).eval()
    return {"trainer": "float32, temperature 1",
            "samplers": {"bfloat16": _sampler_gap(model, low_precision, tokenizer, problems, settings, 1.0, functions),
                         f"temperature {settings['hot_temperature']}": _sampler_gap(
                             model, model, tokenizer, problems, settings, settings["hot_temperature"], functions)}}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: stage `compare` (one record per variant) or `mismatch` (one record)."""
    import torch

    stage = plan.stage or "compare"
    say = log or (lambda _: None)
    functions = {name: plan.mechanism.function(name, default) for name, default in MECHANISM_DEFAULTS.items()}
    described = plan.mechanism.describe(MECHANISM_DEFAULTS)
    if stage == "mismatch":
        settings = settings_for(plan.run_mode, dict(plan.options), MISMATCH_PLANS)
        if plan.seeds:
            settings["seed"] = plan.seeds[0]
        if not plan.writes:
            say(f"would score {settings['problems']} x {settings['group_size']} sampled replies of a bfloat16 sampler and "
                f"of a sampler at temperature {settings['hot_temperature']} with a float32 trainer on {plan.model}, and "
                f"weight them under {', '.join(family_losses.IS_MODES)}")
            return
        sink.require_new(["mismatch"])
        start, tokenizer, identity = load_quietly(plan.model, plan.model_source, plan.device)
        body = _measured(lambda: mismatch(start, tokenizer, settings, functions), plan.device)
        sink.save_record("mismatch", {"settings": settings, "model": identity, "mechanism": described,
                                      "cpu_numerics": cpu_numerics(), **body},
                         schema_version=MISMATCH_SCHEMA)
        return
    variants = tuple(plan.variants) or tuple(VARIANTS)
    settings = settings_for(plan.run_mode, dict(plan.options))
    if plan.seeds:
        settings["seed"] = plan.seeds[0]
    if not plan.writes:
        say(f"would run {', '.join(variants)} on {plan.model} ({plan.model_source}): {settings['steps']} steps x "
            f"{settings['prompts_per_step']} prompts x {settings['group_size']} replies at temperature "
            f"{settings['temperature']}, {settings['updates_per_batch']} updates per batch")
        return
    sink.require_new([f"variant_{name}" for name in variants])
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        start, tokenizer, identity = load_quietly(plan.model, plan.model_source, plan.device)
        for name in variants:
            say(f"variant {name}")
            body = _measured(lambda name=name: run_variant(copy.deepcopy(start), tokenizer, name, settings, functions,
                                                           log=say), plan.device)
            sink.save_record(f"variant_{name}", {"model": identity, "mechanism": described,
                                                 "cpu_numerics": cpu_numerics(), **body}, schema_version=SCHEMA)
    finally:
        torch.set_num_threads(threads)
