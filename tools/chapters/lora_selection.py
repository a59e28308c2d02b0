"""Project 63 (LoRA variant selection): what the notebook shows around its three gates.

The learner writes the gates (`comparable_candidates`, `gate_candidates`, `choose_candidate`); the
selection stage (`tools.experiments.sft_chain.selection`) trains the matrix and decides with the
library's gates. This module reads the matrix back, re-decides it with the notebook's functions,
draws it, and checks the memory metric against peft's count of trainable parameters and torch's
AdamW state. Nothing here prints.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, Mapping

from tools.experiments.sft_chain import selection as stage

CHAPTER_ID = stage.CHAPTER_ID


def runs_of(matrix: Mapping) -> list[dict]:
    return list(matrix["runs"])


def matrix_table(matrix: Mapping) -> str:
    """Every run: name, rank, seed, steps, exact match, token accuracy, eval loss, memory, step time."""
    metric = matrix["memory_metric"]
    lines = [f"{'run':<18}{'rank':>5}{'seed':>5}{'steps':>6}{'exact match':>12}{'token acc':>10}{'eval loss':>10}"
             f"{metric:>22}{'ms/step':>9}"]
    for run in runs_of(matrix):
        config = run["config"]
        memory = run.get(metric)
        lines.append(f"{run['name']:<18}{config['rank']:>5}{config['seed']:>5}{config['steps']:>6}"
                     f"{run['exact_match']:>12.3f}{run.get('token_accuracy', float('nan')):>10.3f}{run['eval_loss']:>10.3f}"
                     f"{'-' if memory is None else memory:>22}"
                     f"{run['step_time_s'] * 1000:>9.1f}")
    return "\n".join(lines)


def recheck(matrix: Mapping, comparable_candidates: Callable, gate_candidates: Callable,
            choose_candidate: Callable) -> dict:
    """The record's matrix decided again with the given functions (the notebook's), for comparison."""
    namespace = SimpleNamespace(comparable_candidates=comparable_candidates, gate_candidates=gate_candidates,
                                choose_candidate=choose_candidate)
    data_sha256 = runs_of(matrix)[0]["config"]["data_sha256"]
    run_mode = "real_gpu" if matrix["memory_metric"] == "peak_allocated_bytes" else "cpu_smoke"
    return stage.gate(runs_of(matrix), run_mode, data_sha256, gates=namespace)


def framework_check(gate_candidates: Callable, model_id: str = "tiny", example: Mapping | None = None) -> dict:
    """The two numbers the gates read, against well-kept implementations.

    - the seed spread: `gate_candidates`' std_quality on the Step 3 example against
      `statistics.stdev` and `numpy.std(ddof=1)` (tolerance 1e-12);
    - the cpu_smoke memory metric: for each rank, the training state counted from the tensors after
      one AdamW step (`training.training_state_bytes`) against peft's count of trainable parameters
      (`get_nb_trainable_parameters`) and torch's AdamW state: 4 + 4 + 8 bytes per parameter plus one
      4-byte step per parameter tensor (exactly equal).
    """
    import copy
    import statistics

    import numpy
    import peft
    import torch

    from tools.experiments.sft_chain.training import (TrainConfig, attach_adapter, load_base, one_thread_on_cpu,
                                                      training_state_bytes)

    example = EXAMPLE if example is None else example
    results = {rank: [{"seed": seed, "status": "ok", "quality": q, "memory_bytes": 1}
                      for seed, q in enumerate(scores, start=1)] for rank, scores in example.items()}
    gated = gate_candidates(results, memory_budget=10, band_floor=0.0)["candidates"]
    spread = [{"rank": rank, "ours": gated[rank]["std_quality"], "statistics": statistics.stdev(scores),
               "numpy": float(numpy.std(scores, ddof=1))} for rank, scores in example.items()]
    settings = stage.settings_for("cpu_smoke")
    rows = []
    with one_thread_on_cpu("cpu"):
        base, _, _ = load_base(model_id, "local", "float32", "cpu")
        for rank in stage.RANKS:
            config = TrainConfig(rank=rank, alpha=settings["alpha"], target_modules=settings["target_modules"])
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
    spread_equal = all(abs(row["ours"] - row["statistics"]) <= 1e-12 and abs(row["ours"] - row["numpy"]) <= 1e-12
                       for row in spread)
    return {"peft": peft.__version__, "torch": torch.__version__, "numpy": numpy.__version__, "spread": spread,
            "rows": rows, "equal": spread_equal and all(row["equal"] for row in rows)}


def framework_lines(check: Mapping) -> str:
    lines = [f"numpy {check['numpy']}: sample standard deviation of each rank's made-up scores"]
    lines += [f"  rank {row['rank']:>2}: yours {row['ours']:.12f}  statistics.stdev {row['statistics']:.12f}  "
              f"numpy.std(ddof=1) {row['numpy']:.12f}" for row in check["spread"]]
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
    """Step 5: the quality per rank (each seed a dot, the band shaded) and the memory per rank against
    the budget; the excluded leftover trial drawn apart."""
    import matplotlib.pyplot as plt

    gating, metric = matrix["gating"], matrix["memory_metric"]
    gated = gating["gated"] or {"candidates": {}, "best_mean": None, "band": None}
    rows = {int(k): v for k, v in gated["candidates"].items()}
    excluded = {item["value"] for item in gating["comparability"]["excluded"]}
    ranks = sorted({run["config"]["rank"] for run in runs_of(matrix)})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for position, rank in enumerate(ranks):
        runs = [r for r in runs_of(matrix) if r["config"]["rank"] == rank]
        colour = "#bbbbbb" if rank in excluded else "#2980b9"
        left.scatter([position] * len(runs), [_quality(r) for r in runs], color=colour, zorder=3)
        if rank in rows and rows[rank]["mean_quality"] is not None:
            left.hlines(rows[rank]["mean_quality"], position - 0.25, position + 0.25, color="black")
        memory = [r.get(metric) for r in runs]
        if all(value is not None for value in memory):
            right.bar(position, max(memory), color=colour)
    if gated["best_mean"] is not None:
        left.axhspan(gated["best_mean"] - gated["band"], gated["best_mean"], color="#9ad19a", alpha=0.3,
                     label=f"equivalence band (width {gated['band']:.3f})")
        left.legend(fontsize=8)
    labels = [f"rank {rank}" + (" (excluded)" if rank in excluded else "") for rank in ranks]
    for axis in (left, right):
        axis.set_xticks(range(len(ranks)), labels, fontsize=8)
    right.axhline(_budget(matrix), color="#c0392b", linestyle="--", label="memory budget")
    right.legend(fontsize=8)
    left.set_ylabel(f"{matrix.get('quality_key', 'exact_match').replace('_', ' ')} on the frozen evaluation split")
    left.set_title("Quality per seed (dots) and mean (line)")
    right.set_ylabel(metric)
    right.set_title("Memory per rank (largest over seeds)")
    choice = gating["choice"]
    fig.suptitle(f"63 selection: {choice['decision']}, chosen rank {choice['chosen']}")
    fig.tight_layout()
    return fig


def _quality(run: Mapping) -> float:
    """The quality the gates read (records before the lab model read exact match)."""
    return run.get("quality", run["exact_match"])


def _budget(matrix: Mapping) -> float:
    run_mode = "real_gpu" if matrix["memory_metric"] == "peak_allocated_bytes" else "cpu_smoke"
    return stage.settings_for(run_mode)["memory_budget"]


def mean_quality(matrix: Mapping) -> dict[int, float]:
    """Mean quality per rank over its runs (every rank, the leftover too), for the effect test."""
    by_rank: dict[int, list[float]] = {}
    for run in runs_of(matrix):
        by_rank.setdefault(run["config"]["rank"], []).append(_quality(run))
    return {rank: sum(values) / len(values) for rank, values in by_rank.items()}


EXAMPLE = {4: [0.52, 0.58, 0.55], 8: [0.58, 0.60, 0.62], 16: [0.60, 0.61, 0.59]}
"""Step 3's illustration: exact match of three ranks over three seeds (made up for the picture)."""


def draw_band_example(gate_candidates: Callable, example: Mapping = EXAMPLE, band_floor: float = 0.01):
    """Step 3: the equivalence band drawn from `gate_candidates` on a small made-up example."""
    import matplotlib.pyplot as plt

    results = {rank: [{"seed": seed, "status": "ok", "quality": q, "memory_bytes": rank * 100}
                      for seed, q in enumerate(scores, start=1)] for rank, scores in example.items()}
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for axis, factor in zip(axes, (2.0, 0.5)):
        gated = gate_candidates(results, memory_budget=10_000, band_floor=band_floor, spread_factor=factor)
        for position, (rank, scores) in enumerate(example.items()):
            row = gated["candidates"][rank]
            colour = "#2980b9" if row["quality_passed"] else "#c0392b"
            axis.scatter([position] * len(scores), scores, color=colour, zorder=3)
            axis.hlines(row["mean_quality"], position - 0.25, position + 0.25, color="black")
        axis.axhspan(gated["best_mean"] - gated["band"], gated["best_mean"], color="#9ad19a", alpha=0.35)
        axis.set_xticks(range(len(example)), [f"rank {rank}" for rank in example])
        axis.set_title(f"spread_factor {factor}: band {gated['band']:.3f} (blue: inside, red: below)")
    axes[0].set_ylabel("exact match (made-up example)")
    fig.tight_layout()
    return fig
