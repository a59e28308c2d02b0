"""Pictures of chapter 31 (LoRA variants); the notebook keeps what the learner reads and writes.

* `measured_update_sizes` / `draw_update_sizes`: the size of scaling * B @ A @ x as the rank grows,
  measured on random factors, beside each variant's predicted `relative_update_size`.
* `draw_dora_geometry`: one weight row in two dimensions: LoRA moves it, DoRA splits the moved row
  into a unit direction and a trained length.
* `draw_budget`: trainable parameters of LoRA and DoRA by rank against a fixed budget.
* `draw_variant_results`: Step 5's variants side by side.
"""

from __future__ import annotations

import math

import torch

from tools.chapters.lora_common import draw_adapter_results as draw_variant_results  # noqa: F401 - Step 5's figure
from tools.experiments.sft_training.plans.ch_31 import RANK


def measured_update_sizes(ranks, scaling_of, *, width: int = 256, trials: int = 256, seed: int = 0) -> list[float]:
    """Root-mean-square |scaling(r) * B @ A @ x| over random x, with A and B of i.i.d. Gaussian entries,
    relative to rank 1."""
    generator = torch.Generator().manual_seed(seed)
    sizes = []
    for rank in ranks:
        a = torch.randn(rank, width, generator=generator) / math.sqrt(width)
        b = torch.randn(width, rank, generator=generator)
        x = torch.randn(width, trials, generator=generator)
        sizes.append(float((scaling_of(rank) * (b @ (a @ x))).square().sum(dim=0).mean().sqrt()))
    return [size / sizes[0] for size in sizes]


def draw_update_sizes(ranks, measured: dict, predicted: dict):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for method, values in measured.items():
        line = ax.plot(ranks, values, marker="o", label=f"{method}: measured")[0]
        ax.plot(ranks, predicted[method], linestyle="--", color=line.get_color(), label=f"{method}: predicted")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("rank r")
    ax.set_ylabel("|scaling * B A x|, relative to rank 1")
    ax.set_title("LoRA's alpha/r shrinks the update as r grows; rsLoRA's alpha/sqrt(r) keeps its size")
    ax.legend(fontsize=8)
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
