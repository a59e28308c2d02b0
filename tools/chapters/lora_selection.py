"""Project 63 (LoRA variant selection): what the notebook shows around its three gates.

The learner writes the gates (`comparable_candidates`, `gate_candidates`, `choose_candidate`); the
selection stage (`tools.experiments.sft_chain.selection`) trains the matrix and decides with them (the
notebook passes its functions through the plan's mechanism). This module reads the matrix back,
re-decides it (with another memory budget too), draws it, words the findings (`lesson_text`, section
`lora_selection`), and checks the gates' statistics and the memory metric against well-kept
implementations. Nothing here prints.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, Mapping

from tools.chapters import lesson_text
from tools.core.effects import describe as describe_effect
from tools.experiments.sft_chain import selection as stage
from tools.experiments.sft_chain.selection_gates import T95

CHAPTER_ID = stage.CHAPTER_ID


def runs_of(matrix: Mapping) -> list[dict]:
    return list(matrix["runs"])


def matrix_table(matrix: Mapping) -> str:
    """The base, every run and every control: rank, seed, steps, task and base-skill exact match, digit
    accuracy, memory, step time, undertrained."""
    metric = matrix["memory_metric"]
    base = matrix["base_metrics"]
    lines = [f"{'run':<20}{'rank':>5}{'seed':>5}{'steps':>6}{'task EM':>9}{'skill EM':>9}{'digits':>8}"
             f"{metric:>22}{'ms/step':>9}  undertrained",
             f"{'base (no adapter)':<20}{'-':>5}{'-':>5}{'-':>6}{base[stage.TASK_SET]['exact_match']:>9.3f}"
             f"{base[stage.SKILL_SET]['exact_match']:>9.3f}{base[stage.TASK_SET]['digit_accuracy']:>8.3f}"]
    for run in runs_of(matrix) + list(matrix.get("controls", [])):
        config = run["config"]
        memory = run.get(metric)
        lines.append(f"{run['name']:<20}{config['rank']:>5}{config['seed']:>5}{config['steps']:>6}"
                     f"{run['quality']:>9.3f}{run['regression']:>9.3f}"
                     f"{run['metrics'][stage.TASK_SET]['digit_accuracy']:>8.3f}"
                     f"{'-' if memory is None else memory:>22}{run['step_time_s'] * 1000:>9.1f}  {run['undertrained']}")
    return "\n".join(lines)


def _namespace(comparable_candidates: Callable, gate_candidates: Callable, choose_candidate: Callable):
    return SimpleNamespace(comparable_candidates=comparable_candidates, gate_candidates=gate_candidates,
                           choose_candidate=choose_candidate)


def recheck(matrix: Mapping, comparable_candidates: Callable, gate_candidates: Callable,
            choose_candidate: Callable, memory_budget: int | None = None) -> dict:
    """The record's matrix decided again with the given functions, under the record's memory budget or
    another one (no retraining: the measurements are the record's)."""
    data_sha256 = runs_of(matrix)[0]["config"]["data_sha256"]
    run_mode = "real_gpu" if matrix["memory_metric"] == "peak_allocated_bytes" else "cpu_smoke"
    budget = matrix["memory_budget"] if memory_budget is None else memory_budget
    return stage.gate(runs_of(matrix), run_mode, data_sha256, matrix["base_metrics"], budget,
                      _namespace(comparable_candidates, gate_candidates, choose_candidate))


def findings(matrix: Mapping) -> list[str]:
    """The page's sentences about the matrix (Simplified Chinese, from `lesson_text`)."""
    base = matrix["base_metrics"]
    lines = [lesson_text.text("lora_selection.baseline", task=base[stage.TASK_SET]["exact_match"],
                              skill=base[stage.SKILL_SET]["exact_match"])]
    gated = (matrix["gating"]["gated"] or {}).get("candidates", {})
    for rank in stage.RANKS:
        gain = matrix["effects"].get(f"rank_{rank}_task_gain")
        skill = matrix["effects"].get(f"rank_{rank}_base_skill_change")
        row = gated.get(str(rank)) or gated.get(rank)
        if gain is None or row is None:
            continue
        lines.append(lesson_text.text("lora_selection.rank", rank=rank, gain=describe_effect(gain),
                                      skill=describe_effect(skill), verdict=", ".join(row["reasons"]) or lesson_text.text("lora_selection.feasible")))
    control = matrix["effects"].get("no_replay_base_skill_change")
    if control is not None:
        key = "lora_selection.no_replay_forgets" if control["upper"] < -matrix["regression_tolerance"] else \
            "lora_selection.no_replay_inconclusive"
        lines.append(lesson_text.text(key, rank=stage.CONTROL_RANK, interval=describe_effect(control)))
    if matrix.get("warnings"):
        lines.append(lesson_text.text("lora_selection.undertrained", runs="；".join(matrix["warnings"])))
    return lines


def budget_lines(matrix: Mapping, comparable_candidates: Callable, gate_candidates: Callable,
                 choose_candidate: Callable) -> list[str]:
    """The same matrix decided under other memory budgets: one budget below each candidate's memory,
    the record's, and none at all (every candidate fits)."""
    gated = (matrix["gating"]["gated"] or {}).get("candidates", {})
    peaks = sorted({row["peak_memory_bytes"] for row in gated.values() if row["peak_memory_bytes"] is not None})
    budgets = sorted({peak - 1 for peak in peaks if peak > 0} | {matrix["memory_budget"], 10 ** 12})
    lines = []
    for budget in budgets:
        choice = recheck(matrix, comparable_candidates, gate_candidates, choose_candidate, budget)["choice"]
        lines.append(f"memory budget {budget:>15}: {choice['decision']}, chosen rank {choice['chosen']}")
    return lines


def framework_check(gate_candidates: Callable, model_id: str = stage.CPU_MODEL, example: Mapping | None = None) -> dict:
    """The numbers the gates read, against well-kept implementations.

    - the paired interval: `gate_candidates`' gain on the Step 2 example against the mean and the
      sample standard deviation of `statistics` (Python's standard library) and `numpy.std(ddof=1)`,
      and the critical values `T95` against `tools.core.effects.t_critical` (itself checked against
      the t density by quadrature); tolerance 1e-12;
    - the cpu_smoke memory metric: for each rank, the training state counted from the tensors after
      one AdamW step (`training.training_state_bytes`) against peft's count of trainable parameters
      (`get_nb_trainable_parameters`) and torch's AdamW state: 4 + 4 + 8 bytes per parameter plus one
      4-byte step per parameter tensor (exactly equal).
    """
    import copy
    import math
    import statistics

    import numpy
    import peft
    import torch

    from tools.core.effects import t_critical
    from tools.experiments.sft_chain.training import (TrainConfig, attach_adapter, load_base, one_thread_on_cpu,
                                                      training_state_bytes)

    example = EXAMPLE if example is None else example
    gated = gate_candidates(example_results(example), example["base"], 10 ** 9, 0.05, 0.05, T95)["candidates"]
    spread = []
    for rank, scores in example["quality"].items():
        differences = [q - example["base"]["quality"] for q in scores]
        mean, sd = statistics.mean(differences), statistics.stdev(differences)
        lower = mean - t_critical(0.95, len(differences) - 1) * sd / math.sqrt(len(differences))
        spread.append({"rank": rank, "ours": gated[rank]["gain_lower"], "statistics": lower,
                       "numpy_sd": float(numpy.std(differences, ddof=1)), "statistics_sd": sd})
    table_equal = all(abs(T95[df] - t_critical(0.95, df)) <= 1e-12 for df in T95)
    settings = stage.settings_for("cpu_smoke")
    rows = []
    with one_thread_on_cpu("cpu"):
        base, _, _ = load_base(model_id, "local", "float32", "cpu")
        for rank in stage.RANKS:
            config = TrainConfig(rank=rank, alpha=stage.SHARED["alpha"], target_modules=stage.SHARED["target_modules"],
                                 dropout=stage.SHARED["dropout"], steps=settings["steps"])
            model = attach_adapter(copy.deepcopy(base), config)
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
            ids = torch.arange(2, 18).reshape(2, 8)
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            trainable, _ = model.get_nb_trainable_parameters()
            tensors = sum(1 for p in model.parameters() if p.requires_grad)
            expected, measured = 16 * int(trainable) + 4 * tensors, training_state_bytes(model, optimizer)
            rows.append({"rank": rank, "peft_trainable": int(trainable), "tensors": tensors, "expected_bytes": expected,
                         "measured_bytes": measured, "equal": expected == measured})
    spread_equal = all(abs(row["ours"] - row["statistics"]) <= 1e-12 and abs(row["numpy_sd"] - row["statistics_sd"])
                       <= 1e-12 for row in spread)
    return {"peft": peft.__version__, "torch": torch.__version__, "numpy": numpy.__version__, "spread": spread,
            "table_equal": table_equal, "rows": rows,
            "equal": spread_equal and table_equal and all(row["equal"] for row in rows)}


def framework_lines(check: Mapping) -> str:
    lines = [f"numpy {check['numpy']}, statistics (stdlib): the lower end of each rank's gain interval on the example"]
    lines += [f"  rank {row['rank']:>2}: yours {row['ours']:.12f}  statistics + t {row['statistics']:.12f}  "
              f"(sd: numpy {row['numpy_sd']:.12f}, statistics {row['statistics_sd']:.12f})" for row in check["spread"]]
    lines.append(f"  T95 equals tools.core.effects.t_critical for every degree of freedom: {check['table_equal']}")
    lines.append(f"peft {check['peft']}, torch {check['torch']}: training state = 16 B x trainable parameters + "
                 "4 B x AdamW step tensors")
    lines += [f"  rank {row['rank']:>2}: peft counts {row['peft_trainable']:>6} trainable in {row['tensors']} tensors -> "
              f"{row['expected_bytes']} B; counted from the tensors {row['measured_bytes']} B; equal {row['equal']}"
              for row in check["rows"]]
    return "\n".join(lines)


def matrix_matches_framework(matrix: Mapping, check: Mapping) -> bool:
    """Every cpu_smoke run of a comparable rank recorded the training state the framework check expects."""
    expected = {row["rank"]: row["expected_bytes"] for row in check["rows"]}
    return all(run["training_state_bytes"] == expected[run["config"]["rank"]] for run in runs_of(matrix)
               if run["config"]["rank"] in expected)


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 63."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    lines.append(f"chosen rank {record['decision'].get('chosen_rank')}, ranking {record['decision'].get('ranking')}; "
                 f"memory metric {record.get('memory_metric')} (budget {record.get('memory_budget')})")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


def draw_matrix(matrix: Mapping):
    """Step 5: per rank, the task's exact match per seed (dots) over the base (red line), and the base
    skill per seed against the base and the tolerance; the leftover and the no-replay control apart."""
    import matplotlib.pyplot as plt

    base = matrix["base_metrics"]
    groups = [(f"rank {rank}", [r for r in runs_of(matrix) if r["config"]["rank"] == rank and r["name"].endswith(
        f"_s{r['config']['seed']}")]) for rank in stage.RANKS]
    groups.append(("leftover\n(excluded)", [r for r in runs_of(matrix) if r["name"].endswith("_leftover")]))
    groups.append((f"rank {stage.CONTROL_RANK}\nno replay", list(matrix.get("controls", []))))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for axis, key, title, baseline in ((axes[0], "quality", "task: sum plus one (validation)", base[stage.TASK_SET]),
                                       (axes[1], "regression", "base skill: plain sums (validation)",
                                        base[stage.SKILL_SET])):
        for position, (_, runs) in enumerate(groups):
            colour = "#2980b9" if position < len(stage.RANKS) else "#999999"
            axis.scatter([position] * len(runs), [r[key] for r in runs], color=colour, zorder=3)
        axis.axhline(baseline["exact_match"], color="#c0392b", label="base, no adapter")
        if key == "regression":
            axis.axhspan(baseline["exact_match"] - matrix["regression_tolerance"], baseline["exact_match"],
                         color="#f5b7b1", alpha=0.4, label=f"tolerance {matrix['regression_tolerance']}")
        axis.set_xticks(range(len(groups)), [label for label, _ in groups], fontsize=8)
        axis.set_title(title)
        axis.set_ylim(0, 1)
        axis.legend(fontsize=8)
    axes[0].set_ylabel("answer exact match")
    choice = matrix["gating"]["choice"]
    fig.suptitle(f"63 selection: {choice['decision']}, chosen rank {choice['chosen']}")
    fig.tight_layout()
    return fig


EXAMPLE = {"base": {"quality": 0.15, "regression": 0.62},
           "quality": {4: [0.58, 0.61, 0.61], 8: [0.62, 0.66, 0.64], 16: [0.63, 0.70, 0.65]},
           "regression": {4: [0.60, 0.63, 0.61], 8: [0.61, 0.62, 0.60], 16: [0.52, 0.55, 0.57]},
           "memory": {4: 100, 8: 200, 16: 400}}
"""Step 2's illustration: three ranks over three seeds against a base (made up for the picture)."""


def example_results(example: Mapping = EXAMPLE) -> dict:
    return {rank: [{"seed": seed, "status": "ok", "quality": q, "regression": r, "memory_bytes": example["memory"][rank]}
                   for seed, (q, r) in enumerate(zip(example["quality"][rank], example["regression"][rank]), start=1)]
            for rank in example["quality"]}


def draw_interval_example(gate_candidates: Callable, example: Mapping = EXAMPLE):
    """Step 2: the three paired comparisons of `gate_candidates` on a made-up example: each rank's gain over
    the base, its change of the base skill, and its difference to the best admissible rank (interval and
    mean), with the lines each must clear."""
    import matplotlib.pyplot as plt

    gated = gate_candidates(example_results(example), example["base"], 10 ** 9, 0.05, 0.05, T95)
    rows = gated["candidates"]
    ranks = list(example["quality"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    panels = (("gain over the base", "gain_mean", "gain_lower", 0.0),
              ("base skill change (mean)", "regression_change", None, -0.05),
              (f"difference to the best (rank {gated['best']})", "versus_best_mean", "versus_best_lower", -0.05))
    for axis, (title, mean_key, lower_key, line) in zip(axes, panels):
        for position, rank in enumerate(ranks):
            row = rows[rank]
            if row[mean_key] is None:
                continue
            axis.plot([position], [row[mean_key]], "o", color="black")
            if lower_key is not None and row[lower_key] is not None:
                axis.vlines(position, row[lower_key], row[mean_key], color="#2980b9", linewidth=3)
        axis.axhline(line, color="#c0392b", linestyle="--")
        axis.set_xticks(range(len(ranks)), [f"rank {rank}" for rank in ranks])
        axis.set_title(title, fontsize=10)
    fig.suptitle("blue: from the interval's lower end to the mean; red: the line it must clear")
    fig.tight_layout()
    return fig
