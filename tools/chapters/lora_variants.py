"""Pictures of chapter 31 (LoRA variants); the notebook keeps what the learner reads and writes.

* `first_step_sizes` / `draw_update_sizes`: the size of an adapter's first optimiser step (the change
  of the adapted weights, gamma * dB @ A) as the rank grows, measured by taking that step with AdamW
  (the course's optimiser) and with SGD, beside each variant's predicted `relative_update_size`.
* `sweep_rows` / `draw_rank_sweep`: Step 5's rank sweep read from its records: first update, loss
  curves, late training loss and held-out loss by rank and method.
* `draw_dora_geometry`: one weight row in two dimensions: LoRA moves it, DoRA splits the moved row
  into a unit direction and a trained length.
* `draw_budget`: trainable parameters of LoRA and DoRA by rank against a fixed budget.
* `draw_variant_results`: Step 5's variants side by side.
"""

from __future__ import annotations

import math

import torch

from tools.chapters.lora_common import draw_adapter_results as draw_variant_results  # noqa: F401 - Step 5's figure
from tools.chapters.lora_common import architecture, with_adapter
from tools.experiments.sft_training.first_update import first_step
from tools.experiments.sft_training.plans.ch_31 import RANK
from tools.models.architectures import LAB_MODEL_IDS
from tools.models.lab import recipe_for


def architecture_of(model_id: str) -> dict:
    """The config numbers of a record's model: a lab model's recipe, else the tiny model or Qwen2.5-0.5B."""
    return recipe_for(model_id).architecture() if model_id in LAB_MODEL_IDS else architecture(model_id)


def demo_batch(vocab_size: int, *, rows: int = 4, length: int = 16, seed: int = 0) -> dict:
    """A fixed batch of random token ids, every position supervised (Step 1's optimiser step)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab_size, (rows, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def first_step_sizes(model, ranks, methods, *, optimizer: str, alpha: float, learning_rate: float,
                     target_modules=("q_proj", "v_proj"), seed: int = 0) -> dict[str, list[float]]:
    """`{method: [|change of the adapted weights| after one step, per rank]}`: each rank gets a copy of
    `model` with a fresh adapter (seeded, so every method starts from the same A) and one `optimizer`
    step on `demo_batch`."""
    batch = demo_batch(model.config.vocab_size, seed=seed)
    sizes, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small only loses time to a second thread
    try:
        for method in methods:
            sizes[method] = [first_step(with_adapter(model, target_modules, rank, method, alpha=alpha, seed=seed),
                                        [batch], optimizer=optimizer, learning_rate=learning_rate)["delta_weight_norm"]
                             for rank in ranks]
    finally:
        torch.set_num_threads(threads)
    return sizes


def draw_update_sizes(ranks, measured: dict, predicted: dict):
    """`measured[optimizer][method]`: sizes by rank, drawn relative to LoRA's rank-1 step of the same
    optimiser (at rank 1 the variants coincide); `predicted[method]` (AdamW): relative_update_size."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(measured), figsize=(6.5 * len(measured), 4), squeeze=False)
    for ax, (optimizer, sizes) in zip(axes[0], measured.items()):
        reference = sizes["lora"][0]
        for method, values in sizes.items():
            line = ax.plot(ranks, [value / reference for value in values], marker="o", label=f"{method}: measured")[0]
            if optimizer == "adamw" and method in predicted:
                ax.plot(ranks, predicted[method], linestyle="--", color=line.get_color(),
                        label=f"{method}: scaling * sqrt(r) / alpha")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("rank r")
        ax.set_ylabel("|first update of the adapted weights|, rank 1 = 1")
        ax.set_title(f"one {optimizer} step from B = 0")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def late_loss(record: dict) -> float | None:
    """Mean training loss over the run's last pass through its training examples (every example once)."""
    losses = (record.get("measurements") or {}).get("losses") or []
    config, data = record.get("config") or {}, record.get("data") or {}
    per_step = (config.get("batch_size") or 0) * (config.get("grad_accumulation") or 1)
    examples = data.get("train_examples") or 0
    if not losses or not per_step or not examples:
        return None
    steps = min(len(losses), max(1, math.ceil(examples / per_step)))
    return sum(losses[-steps:]) / steps


def sweep_rows(records: list[dict]) -> list[dict]:
    """One row per sweep record that ended ok (the budget variant is not part of the sweep):
    method, rank, scaling, first update (size and loss drop), late training loss, held-out loss after."""
    rows = []
    for record in records:
        variant = record.get("variant") or {}
        if record.get("status") != "ok" or variant.get("name", "").endswith("_budget"):
            continue
        first = (record.get("chapter_measurements") or {}).get("first_update") or {}
        rows.append({"name": variant["name"], "method": variant["method"], "rank": variant["rank"],
                     "scaling": variant["scaling"], "first_update": first.get("delta_weight_norm"),
                     "first_loss_drop": first.get("loss_drop"), "late_loss": late_loss(record),
                     "eval_loss_before": record["measurements"].get("eval_loss_before"),
                     "eval_loss_after": record["measurements"].get("eval_loss_after"),
                     "losses": list(record["measurements"].get("losses") or [])})
    return sorted(rows, key=lambda row: (row["method"], row["rank"]))


def draw_rank_sweep(rows: list[dict]):
    """Step 5's sweep: first update by rank, loss curves at the lowest and highest rank, late training
    loss and held-out loss by rank, one colour per method."""
    import matplotlib.pyplot as plt

    colors = {"lora": "#2171b5", "rslora": "#e6550d", "dora": "#31a354"}
    methods = [method for method in colors if any(row["method"] == method for row in rows)]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for method in methods:
        mine = [row for row in rows if row["method"] == method]
        ranks = [row["rank"] for row in mine]
        axes[0].plot(ranks, [row["first_update"] for row in mine], "o-", color=colors[method], label=method)
        for row, style in ((mine[0], ":"), (mine[-1], "-")):
            axes[1].plot(range(1, len(row["losses"]) + 1), row["losses"], style, color=colors[method],
                         label=f"{method} r{row['rank']}")
        axes[2].plot(ranks, [row["late_loss"] for row in mine], "o-", color=colors[method], label=f"{method}: late train")
        axes[2].plot(ranks, [row["eval_loss_after"] for row in mine], "s--", color=colors[method],
                     label=f"{method}: held-out after")
    before = next((row["eval_loss_before"] for row in rows if row["eval_loss_before"] is not None), None)
    if before is not None:
        axes[2].axhline(before, color="grey", linestyle=":", label="held-out before")
    axes[0].set_title("first AdamW update of the adapted weights")
    axes[0].set_yscale("log", base=2)
    axes[1].set_title("training loss per step (dotted: lowest rank)")
    axes[1].set_xlabel("step")
    axes[2].set_title("loss after training")
    for ax in (axes[0], axes[2]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rank r")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def draw_dora_geometry():
    """A weight row w0, its LoRA update w0 + dW, and DoRA's m * (w0 + dW) / |w0 + dW|."""
    import matplotlib.pyplot as plt

    w0, dw = torch.tensor([2.0, 0.6]), torch.tensor([-0.9, 1.1])
    moved = w0 + dw
    magnitude = 1.6
    dora = magnitude * moved / moved.norm()
    fig, ax = plt.subplots(figsize=(6, 5.5))
    for vector, color, label in ((w0, "#2171b5", "w0 (frozen row, length |w0|)"),
                                 (moved, "#fd8d3c", "w0 + dW (LoRA: length and direction move together)"),
                                 (dora, "#31a354", f"DoRA: m * (w0 + dW) / |w0 + dW|, m = {magnitude}")):
        ax.annotate("", xy=(float(vector[0]), float(vector[1])), xytext=(0, 0),
                    arrowprops={"arrowstyle": "->", "color": color, "lw": 2})
        ax.plot([], [], color=color, label=label)
    angles = torch.linspace(0, math.pi / 2, 50)
    ax.plot(float(w0.norm()) * torch.cos(angles), float(w0.norm()) * torch.sin(angles), ":", color="grey",
            label="circle of radius |w0| (DoRA's m starts here)")
    ax.set_xlim(-0.2, 2.6)
    ax.set_ylim(-0.2, 2.2)
    ax.set_aspect("equal")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.05))
    ax.set_title("One output row of a weight: direction and magnitude")
    fig.tight_layout()
    return fig


def draw_budget(count_at, ranks, budget: int):
    """Bars of count_at(method, rank) for LoRA and DoRA, and the budget line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    positions = list(range(len(ranks)))
    for offset, method, color in ((-0.2, "lora", "#6baed6"), (0.2, "dora", "#31a354")):
        counts = [count_at(method, rank) for rank in ranks]
        bars = ax.bar([p + offset for p in positions], counts, width=0.4, color=color, label=method)
        for bar, count in zip(bars, counts):
            if count > budget:
                bar.set_hatch("//")
    ax.axhline(budget, color="red", linestyle="--", label=f"budget {budget:,} (LoRA at rank {RANK})")
    ax.set_xticks(positions, [str(rank) for rank in ranks])
    ax.set_xlabel("rank")
    ax.set_ylabel("trainable parameters")
    ax.set_ylim(budget * 0.6, budget * 1.2)
    ax.set_title("A fixed budget: DoRA's magnitude vectors push rank 8 over it (hatched)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
