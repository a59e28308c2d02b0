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

from tools.chapters import lesson_text
from tools.core import effects
from tools.core.environment import installed_version
from tools.experiments.reward import bradley_terry
from tools.experiments.reward.heads import (  # noqa: F401 - load_reward_model serves the notebook
    conversation_ids,
    load_reward_model,
    pad_rows,
    quiet_transformers,
    readout_mask,
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


def _read_against_logits(model, tokenizer, rows, pairwise_reward_loss: Callable, pad_id: int, side: str) -> dict:
    """One padded batch: the loss function's rewards with the readout mask (the tokens that are not the pad
    id: the last 1 is the token transformers reads) and with the attention mask, each against the model's
    sequence-classification logits."""
    chosen_ids, chosen_attention = pad_rows([row["chosen_ids"] for row in rows], pad_id, side)
    rejected_ids, rejected_attention = pad_rows([row["rejected_ids"] for row in rows], pad_id, side)
    chosen_scores = token_scores(model, chosen_ids, chosen_attention)
    rejected_scores = token_scores(model, rejected_ids, rejected_attention)
    chosen_logits = model(input_ids=chosen_ids, attention_mask=chosen_attention).logits.squeeze(-1)
    rejected_logits = model(input_ids=rejected_ids, attention_mask=rejected_attention).logits.squeeze(-1)

    def difference(read: dict) -> float:
        return max(float((read["chosen_rewards"] - chosen_logits).abs().max()),
                   float((read["rejected_rewards"] - rejected_logits).abs().max()))

    ours = pairwise_reward_loss(chosen_scores, readout_mask(chosen_ids, pad_id), rejected_scores,
                                readout_mask(rejected_ids, pad_id))
    attention = pairwise_reward_loss(chosen_scores, chosen_attention, rejected_scores, rejected_attention)
    return {"max_abs_diff": difference(ours), "attention_mask_max_abs_diff": difference(attention),
            "positions": ours["positions"], "attention_mask_positions": attention["positions"]}


def compare_with_transformers(model, tokenizer, pairwise_reward_loss: Callable, pairs=FRAMEWORK_PAIRS) -> dict:
    """The given loss function's chosen and rejected rewards, read from the head's scores at every
    position, against transformers' sequence-classification logits of the same batch: padded on the right
    and on the left with the tokenizer's pad token, and once more with the pad token set to the
    end-of-sequence token on replies that end with it (the setting `load_reward_model` falls back to when
    a tokenizer has no pad token). The function gets the readout mask (`heads.readout_mask`); the record
    also keeps what reading the attention mask's last 1 would give, which differs only in the last case."""
    rows = tokenized_pairs(tokenizer, pairs)
    eos = tokenizer.eos_token_id
    ending_in_eos = [{key: ids[:max(i for i, token in enumerate(ids) if token == eos) + 1] for key, ids in row.items()}
                     for row in rows]
    result = {"tolerance": FRAMEWORK_TOLERANCE, "padding": {}}
    configured = model.config.pad_token_id
    with torch.no_grad():
        for side in ("right", "left"):
            result["padding"][side] = _read_against_logits(model, tokenizer, rows, pairwise_reward_loss,
                                                           tokenizer.pad_token_id, side)
        model.config.pad_token_id = eos
        try:
            result["padding"]["right, pad = eos"] = _read_against_logits(model, tokenizer, ending_in_eos,
                                                                         pairwise_reward_loss, eos, "right")
        finally:
            model.config.pad_token_id = configured
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
    """Lines that show a train_and_gate record: the pairs, both reward models per seed, the gates, the
    paired effects."""
    if record.get("status") != "ok":
        return [f"status {record.get('status')}: {record.get('error')}"]
    settings, split = record["settings"], record["settings"]["split"]
    first = record["per_seed"][0]
    lines = [f"{split['train']} training (train split), {split['calibration']} calibration (validation split) and "
             f"{split['hidden']} hidden pairs (heldout split) per seed from {record['model']['model_id']} "
             f"({record['model'].get('weights')}); rejected replies wrapped by {settings['train_templates']} in "
             f"training and calibration, by {settings['hidden_templates']} (never trained on) in the hidden pairs; "
             f"the control swaps {len(first['pairs']['flipped'])} of {split['train']} training pairs"]
    for entry in record["per_seed"]:
        for name in ("candidate", "control"):
            item, fitted, hidden = entry[name], entry[name]["calibration"], entry[name]["hidden_calibration"]
            lines.append(f"seed {entry['seed']} {name:<9} train loss {item['train_losses'][0]:.3f} -> "
                         f"{item['train_losses'][-1]:.3f}; hidden accuracy {item['hidden_accuracy']:.3f} (unseen "
                         f"templates), {item['hidden_accuracy_training_templates']:.3f} (training templates); "
                         f"temperature {fitted['temperature']:g} (fitted on calibration pairs), hidden-pair ECE "
                         f"{hidden['ece_before']:.3f} -> {hidden['ece_after']:.3f}")
        gate = entry["gate"]
        lines.append(f"seed {entry['seed']} gate: gap {gate['gap']:+.3f} (needs {settings['min_gap']}), reasons "
                     f"{gate['reasons']} -> {gate['decision']}")
    for key, found in (record.get("effects") or {}).items():
        lines.append(f"{key}: {effects.describe(found)}")
    lines.append(f"decision: {record['decision']['decision']} ({record['decision']['reason']})")
    return lines


def effect_sentences(record: Mapping) -> list[str]:
    """The page's sentences about the run's paired effects (lesson_text), chosen by what the record shows."""
    found = record.get("effects")
    if record.get("status") != "ok" or not found:
        return [lesson_text.text("pt_reward_model.no_interval", seeds=len(record.get("per_seed") or []))]
    gap = found["candidate_over_control"]
    key = ("pt_reward_model.gap_beyond_margin" if effects.holds(gap, record["settings"]["min_gap"]) else
           "pt_reward_model.gap_above_zero" if effects.holds(gap, 0.0) else "pt_reward_model.gap_not_shown")
    overlap = found["unseen_over_seen_templates"]
    controls = [entry["control"]["hidden_accuracy"] for entry in record["per_seed"]]
    return [lesson_text.text(key, effect=effects.describe(gap), margin=record["settings"]["min_gap"]),
            lesson_text.text("pt_reward_model.templates", effect=effects.describe(overlap)),
            lesson_text.text("pt_reward_model.control_spread", low=min(controls), high=max(controls),
                             pairs=record["settings"]["split"]["hidden"],
                             chance_sd=0.5 / record["settings"]["split"]["hidden"] ** 0.5)]


def draw_gate(record: Mapping, reported: Mapping[str, float] | None = None):
    """Figure: both reward models' training losses per seed, and per seed their hidden accuracy (unseen
    templates) beside the original course's reported figures (labelled `reported`)."""
    import matplotlib.pyplot as plt

    fig, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    labels, heights, colors = [], [], []
    for entry in record["per_seed"]:
        for name, color in (("candidate", "tab:green"), ("control", "tab:red")):
            loss_ax.plot(entry[name]["train_losses"], color=color, alpha=0.7,
                         label=name if entry is record["per_seed"][0] else None)
            labels.append(f"{name}\nseed {entry['seed']}")
            heights.append(entry[name]["hidden_accuracy"])
            colors.append(color)
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("Bradley-Terry loss")
    loss_ax.legend(fontsize=8)
    for name, value in (reported or {}).items():
        labels.append(f"{name}\n(reported)")
        heights.append(value)
        colors.append("lightgray")
    accuracy_ax.bar(labels, heights, color=colors)
    accuracy_ax.axhline(0.5, color="black", ls="--", lw=1, label="chance")
    accuracy_ax.set_ylim(0, 1.05)
    accuracy_ax.set_ylabel("hidden-pair accuracy (unseen templates)")
    accuracy_ax.tick_params(axis="x", labelsize=7)
    accuracy_ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
