"""Chapter PT-KTO (binary-feedback alignment): the figures of Steps 1-3 and the framework check against TRL.

The learner writes the mechanism (`kto_reference_point`, `kto_loss`, `kto_class_weights`); nothing here
implements it. The framework check takes the first two as arguments: TRL 1.16's `KTOTrainer` on the
course's tiny model takes one optimiser step; then, on one batch, TRL's loss, KL estimate and reward
statistics are compared with what the given functions compute from the same model: the reference
point from the matrix of every prompt with every completion, the loss from the matched pairs.
Nothing here prints.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from tools.chapters import framework_checks, lesson_text
from tools.chapters.framework_checks import functions_ran_line
from tools.data.arithmetic import generate_tasks
from tools.experiments.preference import kto_runs
from tools.experiments.preference.logprobs import pack, response_logprobs
from tools.experiments.preference.trl_runs import (
    quiet_trl,
    silence_printer,
    state_sha256,
    tiny_policy_and_reference,
    trainer_arguments,
    versions,
)

CHAPTER_ID = "PT-KTO"
RATIO_RANGE = (1.0, 4 / 3)
"""The range KTO's paper recommends for lambda_D n_D / (lambda_U n_U)."""
FRAMEWORK_TOLERANCE = 1e-5
FRAMEWORK_BETA = 0.1
FRAMEWORK_WEIGHTS = {"desirable_weight": 1.5, "undesirable_weight": 1.0}
"""2 desirable and 3 undesirable examples: lambda_D n_D / (lambda_U n_U) = 1.5 * 2 / 3 = 1."""
COMPARED = ("loss", "kl", "rewards/chosen", "rewards/rejected")


# ---------------------------------------------------------------------------
# Steps 1-3: figures
# ---------------------------------------------------------------------------

def draw_value_and_loss(beta: float = 0.5, z0: float = 1.0):
    """Figure: KTO's per-example losses against the log-ratio r, for a desirable and an undesirable
    example, with the reference point z0 marked."""
    import matplotlib.pyplot as plt
    import torch

    r = torch.linspace(-8, 10, 361)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.plot(r, 1 - torch.sigmoid(beta * (r - z0)), color="#31a354", label="desirable: 1 - sigmoid(beta (r - z0))")
    ax.plot(r, 1 - torch.sigmoid(beta * (z0 - r)), color="#de2d26", label="undesirable: 1 - sigmoid(beta (z0 - r))")
    ax.axvline(z0, color="black", ls="--", lw=1)
    ax.text(z0 + 0.2, 0.92, f"z0 = {z0}", fontsize=9)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel("r = log pi(y|x) - log pi_ref(y|x)")
    ax.set_ylabel("loss of one example (weight 1)")
    ax.set_title(f"KTO: each example is judged against the reference point (beta = {beta})")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    return fig


def draw_mismatched_pairs(n: int = 5):
    """Figure: the n x n grid of prompt i with completion j; the diagonal holds the examples, the pairs
    (i, i - 1 mod n) are the mismatched ones TRL uses for the reference point."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.4))
    for i in range(n):
        for j in range(n):
            colour, text = "#f0f0f0", ""
            if i == j:
                colour, text = "#fdd0a2", "example"
            elif j == (i - 1) % n:
                colour, text = "#6baed6", "KL pair"
            ax.add_patch(plt.Rectangle((j, n - 1 - i), 0.95, 0.95, color=colour))
            ax.text(j + 0.47, n - 1 - i + 0.47, text, ha="center", va="center", fontsize=7)
    ax.set_xticks([j + 0.47 for j in range(n)], [f"y{j}" for j in range(n)])
    ax.set_yticks([n - 1 - i + 0.47 for i in range(n)], [f"x{i}" for i in range(n)])
    ax.set_xlim(0, n)
    ax.set_ylim(0, n)
    ax.set_xlabel("completion")
    ax.set_ylabel("prompt")
    ax.set_title("prompt i with completion (i - 1) mod n")
    fig.tight_layout()
    return fig


def draw_class_shares(n_desirable: int = 10, n_undesirable: int = 90, weights=((1.0, 1.0), (9.0, 1.0), (12.0, 1.0))):
    """Figure: each class's share of the total loss weight lambda * n, for several weight settings."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.4))
    for index, (desirable_weight, undesirable_weight) in enumerate(weights):
        good, bad = desirable_weight * n_desirable, undesirable_weight * n_undesirable
        share = good / (good + bad)
        ax.barh(index, share, color="#31a354")
        ax.barh(index, 1 - share, left=share, color="#de2d26")
        ax.text(0.01, index, f"desirable {share:.0%}", va="center", color="white", fontsize=9)
        ax.text(0.99, index, f"ratio {good / bad:.2f}", va="center", ha="right", color="white", fontsize=9)
    ax.set_yticks(range(len(weights)), [f"lambda_D = {d:g}, lambda_U = {u:g}" for d, u in weights])
    ax.axvline(0.5, color="black", lw=0.8, ls="--")
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the total loss weight (lambda x count)")
    ax.set_title(f"{n_desirable} desirable vs {n_undesirable} undesirable examples")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check: TRL's KTOTrainer on the tiny model
# ---------------------------------------------------------------------------

def framework_examples(seed: int = 0) -> list[dict]:
    """The check's unpaired examples: five arithmetic prompts drawn with `seed` from the training generator
    (seed 101), two answered right (desirable) and three wrong (undesirable), in a seeded order."""
    rng = random.Random(f"framework-examples|{seed}")
    tasks = rng.sample(generate_tasks(seed=101, per_operation=8), 5)
    good = set(rng.sample(range(5), 2))
    return [{"prompt": task.prompt, "completion": str(task.label if index in good else task.label + rng.choice((-1, 1, 10))),
             "label": index in good} for index, task in enumerate(tasks)]


def framework() -> dict:
    """What the check compares with: the library, its version, the call and the tolerance."""
    found = versions()
    return {"library": "trl", "version": found["trl"], "transformers": found["transformers"],
            "reference_call": "KTOTrainer.compute_loss (loss_type 'kto', KL from completions rotated by one) "
                              "after one train() step",
            "beta": FRAMEWORK_BETA, **FRAMEWORK_WEIGHTS, "tolerance_abs": FRAMEWORK_TOLERANCE}


def run_trl_kto_step(*, seed: int = 0) -> dict:
    """One TRL KTO step on the tiny model, then TRL's loss, KL and reward statistics on one batch.

    Returns the policy, the reference, the tokenised examples (prompt ids, completion ids, labels, in
    the order TRL batches them), the batch, TRL's numbers, and what the step did to both models."""
    import torch
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    examples = framework_examples(seed)
    with quiet_trl():
        policy, reference, tokenizer = tiny_policy_and_reference(seed)
        reference_before, policy_before = state_sha256(reference), state_sha256(policy)
        arguments = trainer_arguments(KTOConfig, per_device_train_batch_size=len(examples), beta=FRAMEWORK_BETA,
                                      learning_rate=1e-2, seed=seed, **FRAMEWORK_WEIGHTS)
        trainer = KTOTrainer(model=policy, ref_model=reference, args=arguments,
                             train_dataset=Dataset.from_list(examples), processing_class=tokenizer)
        silence_printer(trainer)
        trainer.train()
        batch = next(iter(trainer.get_train_dataloader()))
        policy.eval()
        trainer._metrics["eval"].clear()
        with torch.no_grad():
            trl_loss = float(trainer.compute_loss(policy, batch))
        logged = {key: values[-1] for key, values in trainer._metrics["eval"].items()}
    data = trainer.train_dataset
    return {"policy": policy, "reference": reference, "batch": batch, "pad_id": tokenizer.pad_token_id,
            "prompt_ids": [list(ids) for ids in data["prompt_ids"]],
            "completion_ids": [list(ids) for ids in data["completion_ids"]], "labels": list(data["label"]),
            "trl": {"loss": trl_loss, **{key: float(logged[key]) for key in COMPARED if key != "loss"}},
            "policy_changed_by_trl_step": state_sha256(policy) != policy_before,
            "reference_unchanged": state_sha256(reference) == reference_before}


def logprob_matrices(step: Mapping) -> tuple:
    """`(policy, reference)`: [n, n] float32 tensors of log pi(completion j | prompt i), no graph."""
    prompts, completions = step["prompt_ids"], step["completion_ids"]
    n = len(prompts)
    grid = pack([prompts[i] for i in range(n) for _ in range(n)], [completions[j] for _ in range(n) for j in range(n)],
                step["pad_id"])
    return (response_logprobs(step["policy"], grid, frozen=True).reshape(n, n),
            response_logprobs(step["reference"], grid, frozen=True).reshape(n, n))


def compare_with_trl(step: Mapping, kto_reference_point: Callable, kto_loss: Callable) -> dict:
    """The loss, reference point and reward statistics the given functions compute on TRL's batch, against
    TRL's numbers."""
    import torch

    policy_matrix, reference_matrix = logprob_matrices(step)
    point = kto_reference_point(policy_matrix, reference_matrix)
    batch = step["batch"]
    rows = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
            "response_mask": batch["completion_mask"]}
    desirable = torch.as_tensor(batch["label"], dtype=torch.bool)
    result = kto_loss(response_logprobs(step["policy"], rows, frozen=True),
                      response_logprobs(step["reference"], rows, frozen=True), desirable, point["z0"],
                      FRAMEWORK_BETA, **FRAMEWORK_WEIGHTS)
    rewards = result["rewards"]
    ours = {"loss": float(result["loss"]), "kl": float(point["z0"]),
            "rewards/chosen": float(rewards[desirable].mean()), "rewards/rejected": float(rewards[~desirable].mean())}
    difference = max(abs(ours[key] - step["trl"][key]) for key in COMPARED)
    return {"ours": ours, "trl": dict(step["trl"]), "max_abs_diff": difference,
            "matches": difference <= FRAMEWORK_TOLERANCE, "raw_mean": point["raw_mean"], "kl_pairs": point["pairs"]}


def trl_kto_check(kto_reference_point: Callable, kto_loss: Callable, *, seed: int = 0) -> dict:
    """The whole framework check with the given functions (see `run_trl_kto_step`, `compare_with_trl`)."""
    step = run_trl_kto_step(seed=seed)
    return {"framework": framework(), "seed": seed, "examples": framework_examples(seed),
            "batch_shape": list(step["batch"]["input_ids"].shape),
            "policy_changed_by_trl_step": step["policy_changed_by_trl_step"],
            "reference_unchanged": step["reference_unchanged"],
            **compare_with_trl(step, kto_reference_point, kto_loss), "step": step}


def learner_comparison(step: Mapping, functions: Mapping[str, Callable]) -> dict:
    """The comparison with the learner's own functions, or why it could not run."""
    return framework_checks.learner_result(
        lambda: compare_with_trl(step, functions["kto_reference_point"], functions["kto_loss"]))


def framework_lines(result: Mapping) -> list[str]:
    """The framework check as text."""
    check = result["framework"]
    labels = "".join("D" if example["label"] else "U" for example in result["examples"])
    lines = [
        (f"framework check: {check['library']} {check['version']} (transformers {check['transformers']}), "
         f"{check['reference_call']}, beta {check['beta']}, weights D {check['desirable_weight']} / "
         f"U {check['undesirable_weight']}, tolerance {check['tolerance_abs']:g} (absolute)"),
        f"  batch {result['batch_shape']}, labels {labels}; KL pairs (prompt, completion) {result['kl_pairs']}",
        f"  {'quantity':<20}{'ours':>14}{'TRL':>14}",
    ]
    for key in COMPARED:
        lines.append(f"  {key:<20}{result['ours'][key]:>14.8f}{result['trl'][key]:>14.8f}")
    lines += [(f"  max |difference| {result['max_abs_diff']:.2e} -> matches: {result['matches']}; mean log-ratio "
               f"of the KL pairs before the clamp {result['raw_mean']:.6f}"),
              (f"  TRL's step changed the policy: {result['policy_changed_by_trl_step']}; the reference is unchanged: "
               f"{result['reference_unchanged']}")]
    return lines


def framework_record(check: Mapping, learner: Mapping) -> dict:
    """The `framework_check` record's body (the header and runtime come from `save_record`)."""
    return framework_checks.record_body(check, learner)


def framework_summary(record: Mapping) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    return framework_checks.summary_lines(record, framework_lines)


# ---------------------------------------------------------------------------
# Step 5.2: binary labels on the lab model (records of tools.experiments.preference.kto_runs)
# ---------------------------------------------------------------------------

STEP5_CPU_MODEL = "lab"
"""cpu_smoke trains the course's lab model (python -m tools.models lab-build)."""
DECISION_STAGE = "weight_decision"
RUN_STAGES = ("data", *(f"kto_{name}" for name in kto_runs.VARIANTS))
CONTROL = kto_runs.CONTROL


def imbalanced_labels(records: Mapping[str, Mapping]) -> list[bool]:
    """The desirable / undesirable labels of the imbalanced set, in its order."""
    return [bool(example["label"]) for example in records["data"]["sets"]["imbalanced"]]


def decision_body(records: Mapping[str, Mapping]) -> dict:
    """The `weight_decision` record: what kto_class_weights said about the imbalanced set (in the run), beside
    what each run did on its training examples and on the held-out examples."""
    data = records["data"]
    runs = {stage: record for stage, record in records.items() if stage.startswith("kto_")}
    held = data["held_out_examples"]
    return {"model": data["model"], "sources": data["sources"], "mechanism": data.get("mechanism"),
            "held_out_exact_match_before": data["held_out_exact_match_before"],
            "held_out_examples": {"desirable": sum(example["label"] for example in held),
                                  "undesirable": sum(not example["label"] for example in held)},
            "weighting": data["weighting"],
            "runs": {stage: {"status": record["status"], "control": record.get("control", False),
                             "counts": record["counts"], "weights": record["weights"],
                             "weighted_ratio": record["weighted_ratio"],
                             "class_rewards": record.get("class_rewards"),
                             "held_out_rewards": record.get("held_out_rewards"),
                             "held_out_exact_match_after": (record.get("held_out_exact_match") or {}).get("after")}
                     for stage, record in runs.items()},
            "status": "ok"}


def _signed(value) -> str:
    return "      -" if value is None else f"{value:>+7.4f}"


def decision_lines(record: Mapping) -> list[str]:
    """The `weight_decision` record as text."""
    weighting = record["weighting"]
    weights = weighting["class_weights"]
    lines = [functions_ran_line(record["mechanism"])] if record.get("mechanism") else []
    lines.append(f"KTO on {record['model']['model_id']}: held-out exact match before "
                 f"{record['held_out_exact_match_before']:.3f}; own samples {record['sources']}; held-out examples "
                 f"{record['held_out_examples']['desirable']} D / {record['held_out_examples']['undesirable']} U "
                 "(never trained on; every reward is 0 before training)")
    if weights is not None:
        lines.append(f"  kto_class_weights on the imbalanced set ({weights['n_desirable']} D / {weights['n_undesirable']} U): "
                     f"desirable_weight {weights['desirable_weight']:.3f} (range {weights['desirable_range'][0]:.3f}"
                     f"-{weights['desirable_range'][1]:.3f}), ratio {weights['ratio']:.3f}")
    else:
        lines.append(f"  kto_class_weights gave no weights: {weighting['error']}")
    lines.append(f"  equal weights on the imbalanced set: {weighting['equal_weights_refused'] or 'accepted'}")
    lines.append(f"  {'run':<26}{'D/U':>7}{'ratio':>7}{'train D':>8}{'train U':>8}{'held D':>8}{'held U':>8}"
                 f"{'held gap':>9}{'exact match':>12}")
    for stage, run in record["runs"].items():
        train, held = run["class_rewards"] or {}, run["held_out_rewards"] or {}
        ratio = "-" if run["weighted_ratio"] is None else f"{run['weighted_ratio']:.2f}"
        exact = run["held_out_exact_match_after"]
        name = stage + (" (control)" if run["control"] else "")
        lines.append(f"  {name:<26}{run['counts']['desirable']:>3}/{run['counts']['undesirable']:<3}{ratio:>7}"
                     f"{_signed(train.get('desirable'))}{_signed(train.get('undesirable'))}"
                     f" {_signed(held.get('desirable'))}{_signed(held.get('undesirable'))} {_signed(held.get('gap'))}"
                     f"{'-' if exact is None else format(exact, '.3f'):>12}")
    return lines


def findings(record: Mapping) -> list[str]:
    """Sentences the page prints from this run's `weight_decision` record: only what the run measured."""
    runs = record["runs"]
    balanced, control = runs.get("kto_balanced"), runs.get(f"kto_{CONTROL}")
    weighted, unweighted = runs.get("kto_imbalanced_weighted"), runs.get("kto_imbalanced_unweighted")
    found = []
    if balanced and control and balanced["status"] == control["status"] == "ok":
        found.append(lesson_text.text("kto.held_out_gap", gap=f"{balanced['held_out_rewards']['gap']:+.4f}",
                                      control_gap=f"{control['held_out_rewards']['gap']:+.4f}"))
    if weighted and unweighted and weighted["status"] == unweighted["status"] == "ok":
        found.append(lesson_text.text(
            "kto.weights", weighted=f"{weighted['class_rewards']['desirable']:+.4f}",
            unweighted=f"{unweighted['class_rewards']['desirable']:+.4f}",
            held_weighted=f"{weighted['held_out_rewards']['desirable']:+.4f}",
            held_unweighted=f"{unweighted['held_out_rewards']['desirable']:+.4f}"))
    return found


def draw_runs(records: Mapping[str, Mapping]):
    """Left: the mean implicit reward of each class on the held-out examples after each run (0 before any
    training); right: held-out exact match before and after each run."""
    import matplotlib.pyplot as plt

    runs = [(stage, record) for stage, record in records.items()
            if stage.startswith("kto_") and record["status"] == "ok"]
    names = [stage.removeprefix("kto_") for stage, _ in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    positions = range(len(runs))
    left.bar([p - 0.2 for p in positions], [record["held_out_rewards"]["desirable"] for _, record in runs], width=0.4,
             label="desirable (D)", color="tab:green")
    left.bar([p + 0.2 for p in positions], [record["held_out_rewards"]["undesirable"] for _, record in runs],
             width=0.4, label="undesirable (U)", color="tab:red")
    left.axhline(0, color="black", linewidth=0.8)
    left.set_xticks(list(positions), names, fontsize=8)
    left.set(ylabel="mean implicit reward beta * log(pi / pi_ref)", title="rewards of held-out replies")
    left.legend()
    before = records["data"]["held_out_exact_match_before"]
    right.bar(["start"] + names, [before] + [record["held_out_exact_match"]["after"] for _, record in runs],
              color=["grey"] + ["tab:orange" if record.get("control") else "tab:blue" for _, record in runs])
    right.set(ylabel="held-out exact match (greedy)", ylim=(0, 1), title="held-out exact match")
    right.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig
