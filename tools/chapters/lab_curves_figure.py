"""Step 5's figure for the SFT chapters that train the lab model (14, 15, 26): held-out exact-match and
held-out loss against the step, one line per variant (the mean over the seeds a record holds, with
their min-max band), and a third panel the chapter chooses (trainable counts, bytes, ...). It also
gives the numbers a notebook prints beside the figure (`curve_rows`), read from the record."""

from __future__ import annotations

from tools.experiments.sft_training.lab_curves import summary


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
        for ax, key in zip(axes, ("heldout_exact_match", "heldout_loss")):
            mean, low, high = _mean_band(curves, key)
            line = ax.plot(steps, mean, markersize=4, **style, label=f"{name} ({len(curves)} seed"
                           f"{'s' if len(curves) > 1 else ''})")[0]
            if len(curves) > 1:
                ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    axes[0].set_title("held-out exact-match (teacher-forced)")
    axes[0].set_ylim(0, 1)
    axes[1].set_title("held-out loss (reply tokens)")
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


def curve_rows(variants: dict) -> list[dict]:
    """Per variant: exact-match and loss at step 0 and at the end (mean, min, max over the seeds)."""
    rows = []
    for name, variant in variants.items():
        exact, loss = summary(variant["curves"]), summary(variant["curves"], "heldout_loss")
        rows.append({"variant": name, "seeds": exact["seeds"],
                     "exact_match_start": sum(c["heldout_exact_match"][0] for c in variant["curves"]) / len(exact["seeds"]),
                     "exact_match_end": exact["final_mean"], "exact_match_end_range": (exact["final_min"], exact["final_max"]),
                     "loss_start": sum(c["heldout_loss"][0] for c in variant["curves"]) / len(exact["seeds"]),
                     "loss_end": loss["final_mean"], "loss_end_range": (loss["final_min"], loss["final_max"]),
                     "trainable_parameters": variant["curves"][0]["trainable_parameters"]})
    return rows


def curve_table(variants: dict) -> str:
    """The rows of `curve_rows` as a fixed-width table (a notebook prints it under the figure)."""
    lines = [f"{'variant':<24}{'seeds':>6}{'trainable':>11}{'exact@0':>9}{'exact@end':>11}{'(min..max)':>14}"
             f"{'loss@0':>9}{'loss@end':>10}{'(min..max)':>16}"]
    for row in curve_rows(variants):
        low, high = row["exact_match_end_range"]
        loss_low, loss_high = row["loss_end_range"]
        lines.append(f"{row['variant']:<24}{len(row['seeds']):>6}{row['trainable_parameters']:>11,}"
                     f"{row['exact_match_start']:>9.3f}{row['exact_match_end']:>11.3f}{f'{low:.3f}..{high:.3f}':>14}"
                     f"{row['loss_start']:>9.3f}{row['loss_end']:>10.3f}{f'{loss_low:.3f}..{loss_high:.3f}':>16}")
    return "\n".join(lines)


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
