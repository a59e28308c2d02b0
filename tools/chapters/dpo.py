"""Chapter 17 (DPO): the figures of Steps 1-3 and the framework check against TRL.

The learner writes the mechanism (`sequence_logprobs`, `dpo_loss`, `judge_beta_sweep`); nothing here
implements it. The framework check takes the first two as arguments: TRL 1.16's `DPOTrainer` on the
course's tiny model takes one optimiser step, then TRL's loss on one batch is compared with the loss
the given functions compute from the same tensors, and the frozen reference is shown to have
received no gradient, from TRL's step and from ours. Nothing here prints.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from tools.chapters import framework_checks, lesson_text
from tools.chapters.framework_checks import functions_ran_line
from tools.data.arithmetic import generate_tasks
from tools.experiments.preference import dpo_sweep
from tools.experiments.preference.trl_runs import (
    quiet_trl,
    silence_printer,
    state_sha256,
    tiny_policy_and_reference,
    trainer_arguments,
    versions,
)

CHAPTER_ID = "17"
BETAS = (0.05, 0.10, 0.30)
"""The beta sweep of seed 001's DPO row."""
FRAMEWORK_TOLERANCE = 1e-5
"""Largest absolute difference allowed between our loss (and reward statistics) and TRL's on one batch
(float32 on CPU; TRL's fused LM head and our log-softmax differ only in the order of additions)."""
FRAMEWORK_BETA = 0.1
FRAMEWORK_PAIRS = 4
REWARD_KEYS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
"""The reward statistics TRL logs, compared one by one."""


# ---------------------------------------------------------------------------
# Steps 1-3: figures on hand-made numbers
# ---------------------------------------------------------------------------

STEP1_TOKENS = ["<q>", "3", "+", "4", "=", "7", "<end>", "<pad>", "<pad>"]
STEP1_REGIONS = ["prompt"] * 5 + ["response"] * 2 + ["padding"] * 2
STEP1_TOKEN_LOGPROBS = [None, -3.1, -1.2, -2.6, -0.4, -0.9, -0.2, -5.3, -6.0]
"""Step 1's picture: the log-probability each position gives the token that follows it (made up)."""


def draw_sequence_logprob(tokens=STEP1_TOKENS, regions=STEP1_REGIONS, logprobs=STEP1_TOKEN_LOGPROBS):
    """Figure: per-token log-probabilities of one row, coloured by region; only response tokens add up."""
    import matplotlib.pyplot as plt

    colours = {"prompt": "#fdd0a2", "response": "#74c476", "padding": "#d9d9d9"}
    fig, ax = plt.subplots(figsize=(10, 3.4))
    for position, (token, region, value) in enumerate(zip(tokens, regions, logprobs)):
        if value is None:
            ax.text(position, -1.0, "(nothing\npredicts it)", ha="center", va="top", fontsize=8)
        else:
            ax.bar(position, value, color=colours[region], edgecolor="black" if region == "response" else "none")
            ax.text(position, value - 0.15, f"{value:.1f}", ha="center", va="top", fontsize=8)
    ax.set_xticks(range(len(tokens)), [f"{token}\n{region}" for token, region in zip(tokens, regions)], fontsize=8)
    total = sum(value for value, region in zip(logprobs, regions) if region == "response")
    ax.set_ylabel("log p(token | earlier tokens)")
    ax.set_ylim(min(value for value in logprobs if value is not None) - 1.2, 0.5)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_title(f"log pi(response | prompt) = sum over the green bars = {total:.1f}")
    fig.tight_layout()
    return fig


def draw_dpo_loss_and_weight(betas=BETAS):
    """Figure: the DPO loss -log sigmoid(beta h) and the weight beta * sigmoid(-beta h) of its gradient,
    against the log-ratio margin h, for each beta."""
    import matplotlib.pyplot as plt
    import torch

    margin = torch.linspace(-40, 40, 401)
    fig, (loss_ax, weight_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    for beta in betas:
        loss_ax.plot(margin, -torch.nn.functional.logsigmoid(beta * margin), label=f"beta = {beta}")
        weight_ax.plot(margin, beta * torch.sigmoid(-beta * margin), label=f"beta = {beta}")
    loss_ax.set_xlabel("h = log-ratio margin (chosen minus rejected, in nats)")
    loss_ax.set_ylabel("loss")
    loss_ax.set_title("DPO loss: -log sigmoid(beta h)")
    weight_ax.set_xlabel("h")
    weight_ax.set_ylabel("gradient weight")
    weight_ax.set_title("how hard a pair still pushes: beta * sigmoid(-beta h)")
    for ax in (loss_ax, weight_ax):
        ax.axvline(0, color="grey", lw=0.6)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_kl_estimators():
    """Figure: the per-token KL estimators k1 = -d and k3 = exp(d) - 1 - d against d = log pi_ref - log pi."""
    import matplotlib.pyplot as plt
    import torch

    d = torch.linspace(-2.5, 2.5, 201)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(d, -d, label="k1 = log pi - log pi_ref = -d (can be negative)")
    ax.plot(d, torch.exp(d) - 1 - d, label="k3 = exp(d) - 1 - d (never negative)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel("d = log pi_ref(token) - log pi(token), for a token the policy sampled")
    ax.set_ylabel("estimate")
    ax.set_ylim(-2.6, 4)
    ax.legend(fontsize=8)
    ax.set_title("two unbiased per-token estimates of KL(pi || pi_ref)")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check: TRL's DPOTrainer on the tiny model
# ---------------------------------------------------------------------------

def framework_pairs(count: int = FRAMEWORK_PAIRS, seed: int = 0) -> list[dict]:
    """The check's preference pairs: `count` arithmetic prompts drawn with `seed` from the training generator
    (seed 101), each a correct answer against a wrong one drawn with the same seed."""
    rng = random.Random(f"framework-pairs|{seed}")
    tasks = rng.sample(generate_tasks(seed=101, per_operation=8), count)
    return [{"prompt": task.prompt, "chosen": str(task.label), "rejected": str(task.label + rng.choice((-11, -1, 1, 2, 10)))}
            for task in tasks]


def framework() -> dict:
    """What the check compares with: the library, its version, the call and the tolerance."""
    found = versions()
    return {"library": "trl", "version": found["trl"], "transformers": found["transformers"],
            "reference_call": "DPOTrainer.compute_loss (default sigmoid loss) after one train() step",
            "beta": FRAMEWORK_BETA, "tolerance_abs": FRAMEWORK_TOLERANCE}


def run_trl_dpo_step(*, seed: int = 0) -> dict:
    """One TRL DPO step on the tiny model; then TRL's loss and reward statistics on one batch.

    Returns the policy, the reference and the batch (for comparisons), TRL's numbers, and what the
    step did: whether it changed the policy, whether the reference's digest stayed the same and
    whether any reference parameter holds a gradient."""
    import torch
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    with quiet_trl():
        policy, reference, tokenizer = tiny_policy_and_reference(seed)
        reference_before, policy_before = state_sha256(reference), state_sha256(policy)
        arguments = trainer_arguments(DPOConfig, per_device_train_batch_size=FRAMEWORK_PAIRS, beta=FRAMEWORK_BETA,
                                      learning_rate=1e-2, seed=seed)
        trainer = DPOTrainer(model=policy, ref_model=reference, args=arguments,
                             train_dataset=Dataset.from_list(framework_pairs(seed=seed)), processing_class=tokenizer)
        silence_printer(trainer)
        trainer.train()
        batch = next(iter(trainer.get_train_dataloader()))
        policy.eval()
        trainer._metrics["eval"].clear()
        with torch.no_grad():
            trl_loss = float(trainer.compute_loss(policy, batch))
        logged = {key: values[-1] for key, values in trainer._metrics["eval"].items()}
    return {"policy": policy, "reference": reference, "batch": batch,
            "trl": {"loss": trl_loss, **{key: float(logged[key]) for key in REWARD_KEYS}},
            "policy_changed_by_trl_step": state_sha256(policy) != policy_before,
            "reference_unchanged": state_sha256(reference) == reference_before,
            "reference_grad_after_trl_step": any(parameter.grad is not None for parameter in reference.parameters())}


def compare_with_trl(step: Mapping, sequence_logprobs: Callable, dpo_loss: Callable) -> dict:
    """The loss and reward statistics the given functions compute from the batch of `step`, against TRL's;
    and the gradient evidence: the reference after our backward pass, and how many reference tensors get a
    gradient when its log-probabilities come with gradients on (through a loss without detach, and
    through the given `dpo_loss`)."""
    import torch

    policy, reference, batch = step["policy"], step["reference"], step["batch"]
    ids, attention, completion = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
    policy.zero_grad(set_to_none=True)
    policy_logps = sequence_logprobs(policy(input_ids=ids, attention_mask=attention).logits, ids, completion)
    with torch.no_grad():
        reference_logps = sequence_logprobs(reference(input_ids=ids, attention_mask=attention).logits, ids, completion)
    ours = dpo_loss(*policy_logps.chunk(2), *reference_logps.chunk(2), FRAMEWORK_BETA)
    ours["loss"].backward()
    policy_grads = sum(parameter.grad is not None for parameter in policy.parameters())
    reference_grad = any(parameter.grad is not None for parameter in reference.parameters())
    policy.zero_grad(set_to_none=True)
    shown = {"loss": float(ours["loss"].detach()), "rewards/chosen": float(ours["chosen_rewards"].mean()),
             "rewards/rejected": float(ours["rejected_rewards"].mean()),
             "rewards/margins": float(ours["margins"].mean()), "rewards/accuracies": float(ours["accuracy"])}
    difference = max(abs(shown[key] - step["trl"][key]) for key in shown)
    return {"ours": shown, "trl": dict(step["trl"]), "max_abs_diff": difference,
            "matches": difference <= FRAMEWORK_TOLERANCE, "policy_tensors_with_grad": int(policy_grads),
            "reference_grad_after_our_backward": reference_grad,
            "undetached_reference": _undetached_reference_grads(policy, reference, batch, sequence_logprobs, dpo_loss)}


def trl_dpo_check(sequence_logprobs: Callable, dpo_loss: Callable, *, seed: int = 0) -> dict:
    """The whole framework check with the given functions: TRL's step, then the comparison (see
    `run_trl_dpo_step` and `compare_with_trl`), with what the record keeps."""
    step = run_trl_dpo_step(seed=seed)
    batch = step["batch"]
    return {"framework": framework(), "seed": seed, "pairs": framework_pairs(seed=seed),
            "batch_shape": list(batch["input_ids"].shape),
            "response_tokens": int(batch["completion_mask"].sum()),
            **{key: step[key] for key in ("policy_changed_by_trl_step", "reference_unchanged",
                                          "reference_grad_after_trl_step")},
            **compare_with_trl(step, sequence_logprobs, dpo_loss), "step": step}


def learner_comparison(step: Mapping, functions: Mapping[str, Callable]) -> dict:
    """The comparison with the learner's own functions, or why it could not run (`not_implemented` while
    a TODO still raises NotImplementedError, `error` with its message). A loss that matches TRL's but lets
    a gradient reach the reference still `differs`."""
    def compare() -> dict:
        result = compare_with_trl(step, functions["sequence_logprobs"], functions["dpo_loss"])
        leaks = result["reference_grad_after_our_backward"] or result["undetached_reference"]["your_dpo_loss"] > 0
        return {**result, "matches": result["matches"] and not leaks}

    return framework_checks.learner_result(compare)


def framework_record(check: Mapping, learner: Mapping) -> dict:
    """The `framework_check` record's body (the header and runtime come from `save_record`)."""
    return framework_checks.record_body(check, learner)


def framework_summary(record: Mapping) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    return framework_checks.summary_lines(record, framework_lines)


def _undetached_reference_grads(policy, reference, batch, sequence_logprobs: Callable, dpo_loss: Callable) -> dict:
    """How many reference tensors get a gradient when its log-probabilities are computed with gradients
    on (the mistake the chapter warns about): through a loss written without detach, and through the
    given `dpo_loss`, which must detach them. The reference is restored afterwards."""
    import torch.nn.functional as F

    ids, attention, completion = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
    flags = [parameter.requires_grad for parameter in reference.parameters()]

    def reference_tensors_with_grad(loss_of) -> int:
        for parameter in reference.parameters():
            parameter.grad = None
            parameter.requires_grad_(True)
        policy_logps = sequence_logprobs(policy(input_ids=ids, attention_mask=attention).logits, ids, completion)
        reference_logps = sequence_logprobs(reference(input_ids=ids, attention_mask=attention).logits, ids,
                                            completion)
        loss = loss_of(*policy_logps.chunk(2), *reference_logps.chunk(2))
        if loss.requires_grad:
            loss.backward()
        return sum(parameter.grad is not None and bool(parameter.grad.abs().sum() > 0)
                   for parameter in reference.parameters())

    def without_detach(chosen, rejected, reference_chosen, reference_rejected):
        margin = (chosen - reference_chosen) - (rejected - reference_rejected)
        return -F.logsigmoid(FRAMEWORK_BETA * margin).mean()

    try:
        return {"loss_without_detach": reference_tensors_with_grad(without_detach),
                "your_dpo_loss": reference_tensors_with_grad(
                    lambda *logps: dpo_loss(*logps, FRAMEWORK_BETA)["loss"])}
    finally:
        for parameter, flag in zip(reference.parameters(), flags):
            parameter.grad = None
            parameter.requires_grad_(flag)
        policy.zero_grad(set_to_none=True)


def framework_lines(result: Mapping) -> list[str]:
    """The framework check as text."""
    check, undetached = result["framework"], result["undetached_reference"]
    lines = [
        (f"framework check: {check['library']} {check['version']} (transformers {check['transformers']}), "
         f"{check['reference_call']}, beta {check['beta']}, tolerance {check['tolerance_abs']:g} (absolute)"),
        (f"  batch {result['batch_shape']} ({len(result['pairs'])} pairs, chosen rows then rejected rows), "
         f"{result['response_tokens']} response tokens"),
        f"  {'quantity':<20}{'ours':>14}{'TRL':>14}",
    ]
    for key in result["ours"]:
        lines.append(f"  {key:<20}{result['ours'][key]:>14.8f}{result['trl'][key]:>14.8f}")
    lines += [
        f"  max |difference| {result['max_abs_diff']:.2e} -> matches: {result['matches']}",
        (f"  TRL's step changed the policy: {result['policy_changed_by_trl_step']}; the reference is unchanged: "
         f"{result['reference_unchanged']}; reference gradients after TRL's step: "
         f"{result['reference_grad_after_trl_step']}, after our backward: "
         f"{result['reference_grad_after_our_backward']} (policy tensors with a gradient: "
         f"{result['policy_tensors_with_grad']})"),
        (f"  reference log-probs computed with gradients on: {undetached['loss_without_detach']} reference tensors "
         f"get a gradient through a loss without detach, {undetached['your_dpo_loss']} through dpo_loss"),
    ]
    return lines


# ---------------------------------------------------------------------------
# Step 5.2: the beta sweep on the lab model (records of tools.experiments.preference.dpo_sweep)
# ---------------------------------------------------------------------------

STEP5_CPU_MODEL = "lab"
"""cpu_smoke trains the course's lab model (python -m tools.models lab-build); real_gpu its plan's model."""
SWEEP_MAX_KL = dpo_sweep.MAX_KL
"""The drift gate of Step 5.2: mean k3 per sampled token, in nats."""
SWEEP_MIN_MARGIN = dpo_sweep.MIN_MARGIN
"""The margin gate of Step 5.2: mean held-out log-ratio margin h, in nats."""
DECISION_STAGE = dpo_sweep.DECISION_STAGE
CONTROL = dpo_sweep.CONTROL


def sweep_records(records: Mapping[str, Mapping]) -> list[Mapping]:
    """The beta runs of one run that finished (not the control), beta ascending."""
    runs = [record for stage, record in records.items() if stage.startswith("sweep_") and record["status"] == "ok"
            and not record.get("control")]
    return sorted(runs, key=lambda record: record["beta"])


def control_record(records: Mapping[str, Mapping]) -> Mapping | None:
    """The mislabelled control's record when it finished, else None."""
    record = records.get(f"sweep_{CONTROL}")
    return record if record is not None and record["status"] == "ok" else None


def sweep_inputs(records: Mapping[str, Mapping]) -> list[dict]:
    """What `judge_beta_sweep` reads, one run per beta: the held-out margin and the drift samples."""
    return dpo_sweep.judge_inputs(list(sweep_records(records)))


def decision_body(records: Mapping[str, Mapping], judged: Mapping) -> dict:
    """A `beta_decision` body from the sweep's records and a judgement (the experiment writes its own)."""
    pairs = records["pairs"]
    runs = {record["variant"]: {**record, "variant": record["variant"]} for stage, record in records.items()
            if stage.startswith("sweep_")}
    return {**dpo_sweep.decision_body(pairs, runs, judged), "status": "ok"}


def _number(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def decision_lines(record: Mapping) -> list[str]:
    """The `beta_decision` record as text: the start (baseline row), every beta, the control, the judgement."""
    start = record.get("held_out_pairs_at_start") or {}
    lines = [functions_ran_line(record["mechanism"])] if record.get("mechanism") else []
    lines += [f"beta sweep on {record['model']['model_id']}: gates max_kl {record['gates']['max_kl']}, "
              f"min_margin {record['gates']['min_margin']}; pairs {record['pair_counts']}; "
              f"{start.get('pairs', 0)} held-out pairs (chance pair accuracy 0.5)",
              f"  {'run':<18}{'exact match':>12}{'pair acc':>9}{'margin h':>9}{'chosen':>8}{'rejected':>9}"
              f"{'kl (k3)':>9}  reasons"]
    lines.append(f"  {'start':<18}{record['held_out_exact_match_before']:>12.3f}{_number(start.get('pair_accuracy'), '.2f'):>9}"
                 f"{_number(start.get('margin'), '.3f'):>9}{_number(start.get('chosen_logratio'), '+.3f'):>8}"
                 f"{_number(start.get('rejected_logratio'), '+.3f'):>9}{'0':>9}  (every h = 0: "
                 f"{start.get('ties', 0)} ties)")
    judged = {entry["beta"]: entry for entry in record.get("judgement", {}).get("per_beta", [])}
    for run in record.get("runs", []):
        verdict = judged.get(run["beta"]) if run["variant"] != CONTROL else None
        reasons = "control (not a candidate)" if run["variant"] == CONTROL else (
            ", ".join(verdict["reasons"]) or "eligible" if verdict else run["status"])
        lines.append(f"  {run['variant']:<18}{_number(run['held_out_exact_match_after'], '.3f'):>12}"
                     f"{_number(run['held_out_pair_accuracy'], '.2f'):>9}{_number(run['held_out_margin'], '.3f'):>9}"
                     f"{_number(run['held_out_chosen_logratio'], '+.3f'):>8}"
                     f"{_number(run['held_out_rejected_logratio'], '+.3f'):>9}"
                     f"{_number(verdict['kl'] if verdict else None, '.4f'):>9}  {reasons}")
    if "judgement" in record:
        lines.append(f"  chosen beta: {record['judgement']['chosen_beta']} -> decision {record['decision']}")
    else:
        lines.append(f"  no decision: {record.get('status')} ({record.get('error')})")
    return lines


def findings(record: Mapping, beta: float = 0.10) -> list[str]:
    """Sentences the page prints from this run's `beta_decision` record: only what the run measured."""
    runs = {run["variant"]: run for run in record.get("runs", [])}
    treated, control = runs.get(f"beta_{beta:.2f}"), runs.get(CONTROL)
    found = []
    if treated and treated["status"] == "ok":
        before = record["held_out_exact_match_before"]
        found.append(lesson_text.text("dpo.exact_match", beta=f"{beta:.2f}", before=f"{before:.3f}",
                                      after=f"{treated['held_out_exact_match_after']:.3f}",
                                      change=f"{treated['held_out_exact_match_after'] - before:+.3f}"))
        if treated["held_out_chosen_logratio"] < 0 and treated["held_out_rejected_logratio"] < 0:
            found.append(lesson_text.text("dpo.displacement", chosen=f"{treated['held_out_chosen_logratio']:+.3f}",
                                          rejected=f"{treated['held_out_rejected_logratio']:+.3f}"))
        if control and control["status"] == "ok":
            found.append(lesson_text.text(
                "dpo.control", accuracy=f"{treated['held_out_pair_accuracy']:.2f}",
                control_accuracy=f"{control['held_out_pair_accuracy']:.2f}",
                exact=f"{treated['held_out_exact_match_after']:.3f}",
                control_exact=f"{control['held_out_exact_match_after']:.3f}"))
    return found


def draw_sweep(records: Mapping[str, Mapping], judged: Mapping | None = None):
    """Left: the mean implicit reward of the chosen and of the rejected training replies over the DPO steps (beta
    0.10 and the control; likelihood displacement shows as both falling); right: held-out exact match of the
    start, every beta and the control, with each run's held-out margin and drift written above its bar."""
    import matplotlib.pyplot as plt

    runs = sweep_records(records)
    control = control_record(records)
    kls = {entry["beta"]: entry["kl"] for entry in (judged or records.get(DECISION_STAGE, {}).get("judgement", {}))
           .get("per_beta", [])}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for record, style in [(run, "-") for run in runs if abs(run["beta"] - 0.10) < 1e-9] + \
            ([(control, "--")] if control else []):
        steps = [entry["step"] for entry in record["history"]]
        name = record["variant"]
        left.plot(steps, [entry["chosen_reward"] for entry in record["history"]], style, color="tab:green",
                  label=f"{name}: chosen")
        left.plot(steps, [entry["rejected_reward"] for entry in record["history"]], style, color="tab:red",
                  label=f"{name}: rejected")
    left.axhline(0, color="black", lw=0.6)
    left.set(xlabel="DPO step (measured before the update)", ylabel="mean beta * log(pi / pi_ref)",
             title="chosen and rejected rewards on the training pairs")
    left.legend(fontsize=8)
    shown = [*runs, *([control] if control else [])]
    names = ["start"] + [record["variant"] for record in shown]
    values = [records["pairs"]["held_out_exact_match_before"]] + [record["held_out_exact_match"]["after"]
                                                                  for record in shown]
    colours = ["grey"] + ["tab:blue"] * len(runs) + (["tab:orange"] if control else [])
    bars = right.bar(names, values, color=colours)
    for bar, record in zip(bars[1:], shown):
        margin = (record["held_out_pairs"] or record["train_pairs"])["margin"]
        kl = kls.get(record["beta"]) if not record.get("control") else None
        note = f"h {margin:.2f}" + (f"\nkl {kl:.3f}" if kl is not None else "")
        right.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 0.01, note, ha="center", va="bottom",
                   fontsize=8)
    right.set(ylabel="held-out exact match (greedy)", ylim=(0, 1), title="held-out exact match")
    right.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig
