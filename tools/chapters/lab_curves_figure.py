"""Step 5's figure and effect lines for the SFT chapters that train the lab model (14, 15, 26, 31).

The figure: validation exact-match and validation loss against the step, one line per variant (the
mean over the seeds a record holds, with their min-max band), and a third panel the chapter chooses
(trainable counts, bytes, ...). The table: per variant the baseline row (the input model: a LoRA
adapter starts as the identity) and the held-out split after training, with the regression check on
the task the model already knew. The effect lines: each comparison the page claims as a paired
difference over the record's seeds with its Student-t interval (tools.core.effects), judged against
the margin the chapter's effect test asserts, and the numerics profile the figures came from. The
sentences are entries of lesson_text.toml (section `sft_effects`); this module chooses and fills them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.chapters import lesson_text
from tools.core import effects
from tools.experiments.sft_training.lab_curves import paired, summary, value_of


def _mean_band(curves: list[dict], key: str) -> tuple[list[float], list[float], list[float]]:
    columns = list(zip(*(curve[key] for curve in curves)))
    return ([sum(c) / len(c) for c in columns], [min(c) for c in columns], [max(c) for c in columns])


def draw_curves(variants: dict, *, side_title: str | None = None, side_values: dict | None = None,
                side_label: str = "", title: str = ""):
    """`variants`: `{name: {"curves": [curve, ...]}}` as lab_curves.train_curve returns them. With
    `side_values` (`{name: number}`), a third panel of bars."""
    import matplotlib.pyplot as plt

    panels = 3 if side_values else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.8))
    for number, (name, variant) in enumerate(variants.items()):
        curves = variant["curves"]
        style = {"linestyle": ("-", "--", ":", "-.")[number % 4], "marker": "os^x"[number % 4]}
        steps = curves[0]["eval_steps"]
        for ax, key in zip(axes, ("validation_exact_match", "validation_loss")):
            mean, low, high = _mean_band(curves, key)
            line = ax.plot(steps, mean, markersize=4, **style, label=f"{name} ({len(curves)} seed"
                           f"{'s' if len(curves) > 1 else ''})")[0]
            if len(curves) > 1:
                ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    axes[0].set_title("validation exact-match (teacher-forced)")
    axes[0].set_ylim(0, 1)
    axes[1].set_title("validation loss (reply tokens)")
    for ax in axes[:2]:
        ax.set_xlabel("optimizer step")
        ax.legend(fontsize=8)
    if side_values:
        axes[2].bar(list(side_values), list(side_values.values()), color="#6baed6")
        axes[2].set_title(side_title or "")
        axes[2].set_ylabel(side_label)
        axes[2].tick_params(axis="x", labelsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def curve_rows(variants: dict) -> list[dict]:
    """Per variant, means over the seeds: the held-out exact match and loss of the input model (the
    baseline row) and after training (with the min..max over seeds), and the regression check."""
    rows = []
    for name, variant in variants.items():
        curves = variant["curves"]
        exact, loss = summary(curves), summary(curves, "heldout.loss")
        regression = [curve["regression"] for curve in curves if curve.get("regression")]
        rows.append({"variant": name, "seeds": exact["seeds"],
                     "exact_match_start": _mean([c["heldout"]["exact_match"][0] for c in curves]),
                     "exact_match_end": exact["final_mean"], "exact_match_end_range": (exact["final_min"], exact["final_max"]),
                     "loss_start": _mean([c["heldout"]["loss"][0] for c in curves]),
                     "loss_end": loss["final_mean"], "loss_end_range": (loss["final_min"], loss["final_max"]),
                     "regression_task": regression[0]["task"] if regression else None,
                     "regression_start": _mean([r["exact_match"][0] for r in regression]) if regression else None,
                     "regression_end": _mean([r["exact_match"][-1] for r in regression]) if regression else None,
                     "trainable_parameters": curves[0]["trainable_parameters"]})
    return rows


def curve_table(variants: dict) -> str:
    """The rows of `curve_rows` as a fixed-width table (a notebook prints it under the figure)."""
    lines = [f"{'variant':<24}{'seeds':>6}{'trainable':>11}{'EM base':>9}{'EM after':>10}{'(min..max)':>14}"
             f"{'loss base':>10}{'after':>8}{'regr. EM':>16}"]
    for row in curve_rows(variants):
        low, high = row["exact_match_end_range"]
        regression = ("-" if row["regression_task"] is None
                      else f"{row['regression_start']:.3f}->{row['regression_end']:.3f}")
        lines.append(f"{row['variant']:<24}{len(row['seeds']):>6}{row['trainable_parameters']:>11,}"
                     f"{row['exact_match_start']:>9.3f}{row['exact_match_end']:>10.3f}{f'{low:.3f}..{high:.3f}':>14}"
                     f"{row['loss_start']:>10.3f}{row['loss_end']:>8.3f}{regression:>16}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Claim:
    """One comparison a page claims: `treatment - control` of a held-out series after training, `kind`
    "greater" (a difference beyond `margin`) or "equivalent" (inside +-`margin`), as its effect test asserts
    with `test_seeds` seeds."""

    treatment: str
    control: str
    margin: float
    kind: str = "greater"
    key: str = "heldout.exact_match"
    test_seeds: int = 3


SENTENCES = {  # (claim kind, what the run shows) -> the lesson_text entry
    ("greater", "one_seed"): "sft_effects.one_seed_greater", ("equivalent", "one_seed"): "sft_effects.one_seed_equivalent",
    ("greater", True): "sft_effects.greater_met", ("greater", False): "sft_effects.greater_not_met",
    ("equivalent", True): "sft_effects.equivalent_met", ("equivalent", False): "sft_effects.equivalent_not_met",
}


def claim_lines(record: dict, claims: list[Claim]) -> list[str]:
    """One sentence per claim, from the record's curves: the paired difference and its interval over the
    record's seeds, whether that interval clears the margin here, and what the effect test asserts; then
    the numerics profile and lab weights the figures came from. With one seed no interval exists, and the
    sentence says so instead of showing a number as a result."""
    variants = record["variants"]
    lines = []
    for claim in claims:
        treatment, control = variants[claim.treatment]["curves"], variants[claim.control]["curves"]
        fields = {"treatment": claim.treatment, "control": claim.control, "metric": claim.key,
                  "margin": claim.margin, "test_seeds": claim.test_seeds}
        if len(treatment) < 2:
            difference = value_of(treatment[0], claim.key)[-1] - value_of(control[0], claim.key)[-1]
            lines.append(lesson_text.text(SENTENCES[claim.kind, "one_seed"], difference=difference, **fields))
            continue
        effect = paired(treatment, control, claim.key)
        met = (effects.holds(effect, claim.margin) if claim.kind == "greater" else effects.equivalent(effect, claim.margin))
        lines.append(lesson_text.text(SENTENCES[claim.kind, met], interval=effects.describe(effect), **fields))
    lines.append(profile_line(record))
    return lines


def profile_line(record: dict) -> str:
    """Which CPU numerics and which lab weights the record's figures came from."""
    numerics = record.get("cpu_numerics") or {}
    return lesson_text.text("sft_effects.profile", capability=numerics.get("torch_cpu_capability"),
                            mkl=numerics.get("mkl_cbwr"), onednn=numerics.get("onednn_max_cpu_isa"),
                            machine=numerics.get("machine"), lab_models=record.get("lab_models"))


def effect_record(run, stage: str, compute) -> tuple[dict | None, bool]:
    """(the record of the chapter's lab-model effect, whether this run wrote it). cpu_smoke computes it
    with `compute()` and writes it once under `stage`; dry_run and real_gpu (the curves are a CPU
    measurement on the lab model) read the newest cpu_smoke record of the stage, or None."""
    from tools.chapters.own_runs import latest_record

    if run.writes_records and run.run_mode == "cpu_smoke":
        body = {"measurement": "learning curves on the lab model (tools.experiments.sft_training.lab_curves)",
                **compute()}
        path, _ = run.save_record(stage, body)
        import json

        return json.loads(path.read_text(encoding="utf-8")), True
    found = latest_record(run.chapter_id, stage)
    return (found[1] if found else None), False


def effect_stages(stage: str, run_mode: str) -> list[str]:
    """The effect record is a cpu_smoke measurement: a notebook writes it in cpu_smoke only."""
    return [stage] if run_mode in ("cpu_smoke", "dry_run") else []
