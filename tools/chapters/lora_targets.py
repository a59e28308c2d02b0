"""Pictures and fixed inputs of chapter 14 (LoRA target modules); the notebook keeps what the learner reads.

* `draw_layer_shapes`: the seven linear layers of one Qwen2 decoder layer drawn to scale, with the
  LoRA factors a rank-r adapter adds beside each; grouped-query attention makes k_proj and v_proj
  narrow.
* `bf16_update_loss` / `draw_bf16_rounding`: how much of a small update W0 + dW survives rounding
  the merged weight to bfloat16, as the update shrinks relative to W0.
* `draw_target_results`: Step 5's variants side by side (trainable parameters, eval loss, bf16 drift).
"""

from __future__ import annotations

import torch

from tools.chapters.lora_common import draw_adapter_results as draw_target_results  # noqa: F401 - Step 5's figure


def draw_layer_shapes(layers: list[tuple[str, int, int]], rank: int, title: str):
    """Each linear layer as an in x out rectangle, with A (rank x in) and B (out x rank) beside it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 4.2))
    left, gap = 0.0, max(w for _, w, _ in layers) * 0.18
    strip = max(w for _, w, _ in layers) * 0.03
    for name, fan_in, fan_out in layers:
        ax.add_patch(plt.Rectangle((left, 0), fan_in, fan_out, color="#c6dbef", ec="#2171b5"))
        ax.add_patch(plt.Rectangle((left, -strip * 1.6), fan_in, strip, color="#fd8d3c"))
        ax.add_patch(plt.Rectangle((left + fan_in + strip * 0.5, 0), strip, fan_out, color="#e6550d"))
        ax.text(left + fan_in / 2, fan_out + strip, f"{name}\n{fan_in} -> {fan_out}", ha="center", va="bottom",
                fontsize=8)
        left += fan_in + gap
    ax.set_xlim(-gap * 0.2, left)
    top = max(out for _, _, out in layers)
    ax.set_ylim(-strip * 3, top * 1.25)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{title}: W (blue, in x out); LoRA A (rank {rank} x in, orange) and B (out x rank, red), "
                 "strips thickened to be seen")
    fig.tight_layout()
    return fig


def bf16_update_loss(relative_sizes, *, size: int = 256, seed: int = 0) -> list[float]:
    """For each |dW| / |W0| ratio, the share of update entries that rounding W0 + dW to bfloat16 erases
    (the merged entry equals the rounded W0 entry)."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(size, size, generator=generator) * 0.02
    direction = torch.randn(size, size, generator=generator)
    lost = []
    for ratio in relative_sizes:
        update = direction * base.abs().mean() * ratio
        merged = (base + update).to(torch.bfloat16)
        lost.append(float((merged == base.to(torch.bfloat16)).float().mean()))
    return lost


def draw_bf16_rounding(relative_sizes, lost):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.semilogx(relative_sizes, lost, marker="o")
    ax.axvline(2 ** -9, color="grey", linestyle="--", label="about half a bfloat16 step (2^-9 of the value)")
    ax.set_xlabel("size of the update relative to the base weight, |dW| / |W0|")
    ax.set_ylabel("share of update entries erased")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Merging into a bfloat16 weight rounds small updates away")
    ax.legend()
    fig.tight_layout()
    return fig
