"""What the PT-REWARD-MODEL notebook runs around its three exercises.

The learner writes the mechanism: the Bradley-Terry pairwise loss on a scalar head read at the last
non-padding token, temperature calibration with the expected calibration error, and the gate that
compares a candidate with a mislabelled control. This module holds the rest: the fixed examples of
Steps 1-4, the figures (drawn with the stage's own `tools.experiments.reward.bradley_terry`, since
the learner's functions are still stubs while Steps 1-3 run), and the two framework checks, which
take the learner's loss function as an argument: the score of transformers' sequence-classification
head at the same token (right and left padding), and TRL's reward loss computed by its RewardTrainer.
Nothing here prints.
"""

from __future__ import annotations

import tempfile
from typing import Callable, Mapping, Sequence

import torch

from tools.core.environment import installed_version
from tools.experiments.reward import bradley_terry
from tools.experiments.reward.heads import (  # noqa: F401 - load_reward_model and pad_rows serve the notebook
    conversation_ids,
    load_reward_model,
    pad_rows,
    quiet_transformers,
    token_scores,
)
from tools.experiments.reward.masks import last_valid_positions

CHAPTER_ID = "PT-REWARD-MODEL"
FRAMEWORK_TOLERANCE = 1e-5
"""Largest absolute difference allowed against transformers and TRL (float32 forward passes on CPU)."""


# ---------------------------------------------------------------------------
# The fixed examples of Steps 1-4
# ---------------------------------------------------------------------------

def example_pairs() -> dict:
    """Three preference pairs as a reward head sees them: one score per position (float64) and the
    attention masks. Chosen: right-padded, left-padded, unpadded; rejected: unpadded, left-padded,
    right-padded. Padding positions hold large scores, as a real head produces garbage there."""
    chosen_scores = torch.tensor([[0.1, 0.4, 1.2, 5.0, 5.0],
                                  [-4.0, -4.0, 0.2, 0.3, 0.9],
                                  [0.0, -0.2, 0.1, 0.5, 0.7]], dtype=torch.float64)
    chosen_mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    rejected_scores = torch.tensor([[0.3, 0.2, -0.1, -0.6],
                                    [3.0, 0.1, 0.4, 1.1],
                                    [0.2, 0.5, -6.0, -6.0]], dtype=torch.float64)
    rejected_mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 0, 0]])
    return {"chosen_scores": chosen_scores, "chosen_mask": chosen_mask,
            "rejected_scores": rejected_scores, "rejected_mask": rejected_mask}


CALIBRATION_MARGINS = [4.0, 5.0, -3.0, 6.0, -5.0, 3.5, 4.5, -4.0, 2.5, -2.0, 5.5, -6.0]
CALIBRATION_LABELS = [True, True, True, False, False, True, False, True, True, False, True, False]
"""Twelve held-apart pairs of an over-confident reward model: margins r_a - r_b of 2 to 6 (a
probability of 0.92 to 0.998 at temperature 1), yet only 8 of the 12 are ranked the right way."""
TEMPERATURE_GRID = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]


# ---------------------------------------------------------------------------
# Figures of Steps 1-3
# ---------------------------------------------------------------------------

def draw_readout(example: Mapping):
    """Figure: each sequence's positions, padding in grey, the last non-padding token (read) in green
    and the tensor's last column in red where it is padding."""
    import matplotlib.pyplot as plt

    rows = [("chosen", index, example["chosen_scores"][index], example["chosen_mask"][index])
            for index in range(example["chosen_scores"].shape[0])]
    rows += [("rejected", index, example["rejected_scores"][index], example["rejected_mask"][index])
             for index in range(example["rejected_scores"].shape[0])]
    width = max(len(scores) for _, _, scores, _ in rows)
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.2))
    for line, (side, index, scores, mask) in enumerate(rows):
        y = len(rows) - 1 - line
        read = last_valid_positions(mask[None])[0]
        for position, (score, valid) in enumerate(zip(scores.tolist(), mask.tolist())):
            color = "#d9d9d9" if not valid else ("#74c476" if position == read else "#c6dbef")
            ax.add_patch(plt.Rectangle((position, y), 0.92, 0.8, color=color))
            ax.text(position + 0.46, y + 0.4, f"{score:+.1f}", ha="center", va="center", fontsize=8)
        if not mask[-1]:
            ax.add_patch(plt.Rectangle((len(scores) - 1, y), 0.92, 0.8, fill=False, ec="tab:red", lw=2))
        ax.text(-0.15, y + 0.4, f"{side} {index}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.8, width)
    ax.set_ylim(-0.2, len(rows))
    ax.axis("off")
    ax.set_title("green: the last non-padding token (the reward); grey: padding; red frame: last column is padding")
    fig.tight_layout()
    return fig


def draw_bradley_terry():
    """Figure: the pairwise loss and its gradient against the reward difference, with and without a margin."""
    import matplotlib.pyplot as plt

    differences = torch.linspace(-6, 6, 241, dtype=torch.float64)
    fig, (loss_ax, grad_ax) = plt.subplots(1, 2, figsize=(11, 3.4))
    for margin in (0.0, 1.0):
        losses = [float(bradley_terry.pairwise_loss(d[None], torch.zeros(1, dtype=torch.float64),
                                                    torch.tensor([margin], dtype=torch.float64))) for d in differences]
        loss_ax.plot(differences.tolist(), losses, label=f"margin {margin}")
        grad_ax.plot(differences.tolist(), torch.sigmoid(-(differences - margin)).tolist(), label=f"margin {margin}")
    loss_ax.set_xlabel("r_chosen - r_rejected")
    loss_ax.set_ylabel("-log sigmoid(difference - margin)")
    loss_ax.set_title("Bradley-Terry loss")
    grad_ax.set_xlabel("r_chosen - r_rejected")
    grad_ax.set_ylabel("|d loss / d difference|")
    grad_ax.set_title("Pairs already ranked by a wide gap stop pulling")
    for ax in (loss_ax, grad_ax):
        ax.axvline(0, color="gray", lw=0.6)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_reliability(margins: Sequence[float], labels: Sequence[bool], temperature: float, n_bins: int = 5):
    """Figure: reliability diagrams at temperature 1 and at `temperature`, with their ECE."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, shown in zip(axes, (1.0, temperature)):
        probabilities = [bradley_terry.sigmoid(m / shown) for m in margins]
        bins = bradley_terry.calibration_bins(probabilities, labels, n_bins)
        ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
        ax.bar([(item["bin"] + 0.5) / n_bins for item in bins], [item["frequency"] for item in bins],
               width=0.9 / n_bins, alpha=0.6, label="observed frequency")
        ax.plot([item["mean_probability"] for item in bins], [item["frequency"] for item in bins], "o", color="black",
                label="mean probability")
        ece = bradley_terry.expected_calibration_error(probabilities, labels, n_bins)
        ax.set_title(f"temperature {shown:g}: ECE {ece:.3f}")
        ax.set_xlabel("predicted P(first preferred)")
        ax.set_xlim(0, 1)
    axes[0].set_ylabel("share where the first was preferred")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def best_of_n_curve(correlation: float, sizes: Sequence[int], trials: int = 4000, seed: int = 0) -> dict:
    """Best-of-n selection by a proxy reward whose correlation with the true quality is `correlation`:
    the mean proxy score and the mean true quality of the selected response, for each n (simulated,
    standard normal quality and noise)."""
    generator = torch.Generator().manual_seed(seed)
    largest = max(sizes)
    quality = torch.randn(trials, largest, generator=generator, dtype=torch.float64)
    noise = torch.randn(trials, largest, generator=generator, dtype=torch.float64)
    proxy = correlation * quality + (1 - correlation ** 2) ** 0.5 * noise
    proxy_means, quality_means = [], []
    for size in sizes:
        picked = proxy[:, :size].argmax(dim=1)
        proxy_means.append(float(proxy[torch.arange(trials), picked].mean()))
        quality_means.append(float(quality[torch.arange(trials), picked].mean()))
    return {"sizes": list(sizes), "proxy": proxy_means, "quality": quality_means}


def draw_overoptimisation(sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), correlations=(0.9, 0.5, 0.0)):
    """Figure: under best-of-n selection the proxy score always rises; the true quality rises only as
    much as the proxy tracks it, and not at all for a reward model that learned noise."""
    import matplotlib.pyplot as plt

    fig, (proxy_ax, quality_ax) = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for correlation in correlations:
        curve = best_of_n_curve(correlation, sizes)
        proxy_ax.plot(curve["sizes"], curve["proxy"], "o-", label=f"corr {correlation}")
        quality_ax.plot(curve["sizes"], curve["quality"], "o-", label=f"corr {correlation}")
    for ax, title in ((proxy_ax, "reward model's score of the pick"), (quality_ax, "true quality of the pick")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (candidates per prompt)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    proxy_ax.set_ylabel("mean (standard units)")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Framework checks: transformers' sequence-classification head and TRL's reward loss
# ---------------------------------------------------------------------------

def framework() -> dict:
    """What Step 5 compares with: the libraries, their versions, the calls and the tolerance."""
    return {"libraries": {"transformers": installed_version("transformers"), "trl": installed_version("trl")},
            "reference_calls": ["AutoModelForSequenceClassification(...)(input_ids, attention_mask).logits",
                                "trl.RewardTrainer.compute_loss on its DataCollatorForPreference batch"],
            "tolerance_abs": FRAMEWORK_TOLERANCE}


FRAMEWORK_PAIRS = [
    ("Compute 12 + 30. Reply with the integer result only.", "42", "41"),
    ("Compute 81 - 47. Reply with the integer result only.", "34", "24"),
    ("Compute 17 * 3. Reply with the integer result only.", "51", "The answer is 52"),
]
"""Prompt, chosen and rejected answers of the framework checks (lengths differ, so padding differs)."""


def tokenized_pairs(tokenizer, pairs=FRAMEWORK_PAIRS) -> list[dict]:
    """Each pair as chat-formatted token ids of prompt + answer: {"chosen_ids", "rejected_ids"}."""
    return [{"chosen_ids": conversation_ids(tokenizer, prompt, chosen),
             "rejected_ids": conversation_ids(tokenizer, prompt, rejected)} for prompt, chosen, rejected in pairs]


def compare_with_transformers(model, tokenizer, pairwise_reward_loss: Callable, pairs=FRAMEWORK_PAIRS) -> dict:
    """The given loss function's chosen and rejected rewards, read from the head's scores at every
    position, against transformers' sequence-classification logits of the same batch, once padded
    on the right and once on the left."""
    rows = tokenized_pairs(tokenizer, pairs)
    result = {"tolerance": FRAMEWORK_TOLERANCE, "padding": {}}
    with torch.no_grad():
        for side in ("right", "left"):
            chosen_ids, chosen_mask = pad_rows([row["chosen_ids"] for row in rows], tokenizer.pad_token_id, side)
            rejected_ids, rejected_mask = pad_rows([row["rejected_ids"] for row in rows], tokenizer.pad_token_id, side)
            ours = pairwise_reward_loss(token_scores(model, chosen_ids, chosen_mask), chosen_mask,
                                        token_scores(model, rejected_ids, rejected_mask), rejected_mask)
            chosen_logits = model(input_ids=chosen_ids, attention_mask=chosen_mask).logits.squeeze(-1)
            rejected_logits = model(input_ids=rejected_ids, attention_mask=rejected_mask).logits.squeeze(-1)
            difference = max(float((ours["chosen_rewards"] - chosen_logits).abs().max()),
                             float((ours["rejected_rewards"] - rejected_logits).abs().max()))
            result["padding"][side] = {"max_abs_diff": difference, "positions": ours["positions"]}
    result["max_abs_diff"] = max(item["max_abs_diff"] for item in result["padding"].values())
    result["matches"] = result["max_abs_diff"] <= FRAMEWORK_TOLERANCE
    return result


def compare_with_trl(model, tokenizer, pairwise_reward_loss: Callable, pairs=FRAMEWORK_PAIRS,
                     margins: Sequence[float] = (0.5, 0.0, 1.0)) -> dict:
    """TRL's reward loss, computed by a RewardTrainer on its own collated batch (chosen rows first,
    then rejected, padded on the right, with margins), against the given loss function on the head's
    scores of the same batch."""
    import datasets
    from trl import RewardConfig, RewardTrainer

    rows = [{**row, "margin": float(margin)} for row, margin in zip(tokenized_pairs(tokenizer, pairs), margins)]
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # the trainer's dataset preparation shows none in the notebook
    try:
        with quiet_transformers(), tempfile.TemporaryDirectory(prefix="trl-reward-") as folder:
            args = RewardConfig(output_dir=folder, report_to=[], per_device_train_batch_size=len(rows), max_steps=1,
                                use_cpu=True, logging_strategy="no", save_strategy="no", disable_tqdm=True, seed=0)
            trainer = RewardTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(rows),
                                    processing_class=tokenizer)
            batch = trainer.data_collator([dict(row) for row in rows])
            with torch.no_grad():
                trl_loss = float(trainer.compute_loss(trainer.model, dict(batch)))
                scores = token_scores(model, batch["input_ids"], batch["attention_mask"])
    finally:
        if bars:
            datasets.enable_progress_bars()
    half = len(rows)
    ours = pairwise_reward_loss(scores[:half], batch["attention_mask"][:half], scores[half:],
                                batch["attention_mask"][half:], batch["margin"].to(scores.dtype))
    difference = abs(float(ours["loss"]) - trl_loss)
    return {"trl_loss": trl_loss, "our_loss": float(ours["loss"]), "abs_diff": difference,
            "margins": [float(margin) for margin in margins], "tolerance": FRAMEWORK_TOLERANCE,
            "matches": difference <= FRAMEWORK_TOLERANCE}



# ---------------------------------------------------------------------------
# Step 5: candidate vs mislabelled control (tools.experiments.reward.reward_model_stage)
# ---------------------------------------------------------------------------

STAGE = "train_and_gate"
STEP5_CPU_MODEL = "lab"
"""The model cpu_smoke trains reward models on."""
STEP5_CPU_SPLIT = {"train_pairs": 16, "calibration_pairs": 16, "hidden_pairs": 64}
"""cpu_smoke's pairs: more hidden pairs than the original course's 4, so that the control's accuracy is a
measurement (one pair moves it by 1/64, not by 1/4)."""


def gate_lines(record: Mapping) -> list[str]:
    """Lines that show a train_and_gate record: the pairs, both reward models, the gate."""
    if record.get("status") != "ok":
        return [f"status {record.get('status')}: {record.get('error')}"]
    pairs, split = record["pairs"], record["settings"]["split"]
    total = sum(split.values())
    lines = [f"{split['train']} training, {split['calibration']} calibration, {split['hidden']} hidden pairs from "
             f"{record['model']['model_id']} ({record['model'].get('weights')}); chosen: the model's own correct answer "
             f"for {pairs['sampled_chosen']}/{total} (the rest the label); rejected: the same integer wrapped in words; "
             f"control swaps {len(pairs['flipped'])} of {split['train']} training pairs"]
    for name in ("candidate", "control"):
        item, calibration = record[name], record[name]["calibration"]
        lines.append(f"{name:<10} train loss {item['train_losses'][0]:.3f} -> {item['train_losses'][-1]:.3f}, hidden "
                     f"accuracy {item['hidden_accuracy']:.3f} ({item['hidden_pairs']} pairs), temperature "
                     f"{calibration['temperature']:g}, ECE {calibration['ece_before']:.3f} -> {calibration['ece_after']:.3f}")
    decision = record["decision"]
    lines.append(f"gate: gap {decision['gap']:+.3f} (needs {decision['min_gap']}), reasons {decision['reasons']} -> "
                 f"{decision['decision']}")
    return lines


def draw_gate(record: Mapping, reported: Mapping[str, float] | None = None):
    """Figure: both reward models' training losses, and their hidden accuracy beside the original
    course's reported figures (labelled `reported`)."""
    import matplotlib.pyplot as plt

    fig, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, color in (("candidate", "tab:green"), ("control", "tab:red")):
        loss_ax.plot(record[name]["train_losses"], color=color, label=name)
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("Bradley-Terry loss")
    loss_ax.legend(fontsize=8)
    labels = ["candidate (yours)", "control (yours)"]
    heights = [record["candidate"]["hidden_accuracy"], record["control"]["hidden_accuracy"]]
    colors = ["tab:green", "tab:red"]
    for name, value in (reported or {}).items():
        labels.append(f"{name} (reported)")
        heights.append(value)
        colors.append("lightgray")
    accuracy_ax.bar(labels, heights, color=colors)
    accuracy_ax.axhline(0.5, color="black", ls="--", lw=1, label="chance")
    accuracy_ax.set_ylim(0, 1.05)
    accuracy_ax.set_ylabel("hidden-pair ranking accuracy")
    accuracy_ax.tick_params(axis="x", labelrotation=15, labelsize=8)
    accuracy_ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
