"""Chapter 75: the budget sensitivity of 76's strategies and the final choice 76 leaves to 75.

75 loads no model. It reads 76's decision record (`close`) of a label, checked before any work (present,
schema, run mode, label, the sha256 a caller promised), then 76's G0 record through the decision's lineage
and 73's baseline through G0's lineage (each by sha256). From them it builds one candidate table, each row
`{"name", "memory_mb", "memory_spread_mb", "samples_per_s"}`:

- `real_gpu` with 76's handoff ready: the baseline and 76's eligible strategies; memory is the device
  footprint 76's memory cap judges (`peak_reserved_mb + cuda_context_margin_mb`), its spread the reserved
  peak's range over the repeats;
- `cpu_smoke` (76's handoff is never ready without device memory): the baseline and every strategy that
  passed 76's gate except for the missing device peak (complete repeats, path verified); memory is a
  modelled footprint, the static training state of float32 AdamW (16 bytes per parameter, from 73's
  baseline) plus the activation bytes 76's hooks saw kept on the device. The record names the axis, and
  its decision stays `measure_on_gpu`: the chosen strategy is computed, never adopted.

Then the chapter's three functions (the notebook passes the learner's; `plan.mechanism`): the choice at the
target budget (`choose_under_budget`), the choice as a step function of the budget (`budget_sweep`: where it
flips, which strategies are never chosen) and the final decision at the target (`final_strategy_choice`:
adopt / keep_baseline / tune / no_fit). The package's copies of the three are here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tools.core.paths import chapter_record_path
from tools.core.records import lineage_entry, load_record, resolve_lineage, sha256_file
from tools.errors import ConfigError, UpstreamRecordError
from tools.experiments.memory_strategy import baseline as tb
from tools.experiments.memory_strategy import judge
from tools.experiments.memory_strategy.plan import DECISION_SCHEMA, REPEATS, RUN_SCHEMA

CHAPTER_ID, SLUG = "75", "75-memory-budget"
STAGE = "budget"
SCHEMA = "memory-budget-decision/v1"
MECHANISM = ("choose_under_budget", "budget_sweep", "final_strategy_choice")
MIB = 2**20
DECISIONS = ("adopt", "keep_baseline", "tune", "no_fit")
CPU_TARGET_RULE = "halfway between the static floor and the baseline's footprint"
AXES = {
    "real_gpu": ("device_footprint_mb", "peak_reserved_mb + cuda_context_margin_mb (76's memory-cap rule), MiB"),
    "cpu_smoke": ("modelled_footprint_mb", "16 bytes per parameter (float32 AdamW: weights, gradients, two moments) "
                                           "+ activation bytes kept on the device as 76's hooks saw them, MiB"),
}


# ---------------------------------------------------------------------------
# The package's copies of the chapter's exercises
# ---------------------------------------------------------------------------

def _number(name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _checked_candidates(candidates) -> list[dict]:
    if not isinstance(candidates, list) or not candidates:
        raise ValueError("candidates must be a non-empty list of dicts")
    names = []
    for item in candidates:
        if not isinstance(item, dict):
            raise ValueError(f"every candidate must be a dict, got {item!r}")
        name = item.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise ValueError(f"candidate names must be distinct non-empty strings, got {name!r}")
        _number(f"{name}: memory_mb", item.get("memory_mb"))
        _number(f"{name}: memory_spread_mb", item.get("memory_spread_mb"))
        _number(f"{name}: samples_per_s", item.get("samples_per_s"), positive=True)
        names.append(name)
    if names.count("baseline") != 1:
        raise ValueError("exactly one candidate must be named 'baseline'")
    return candidates


def _floor(min_throughput_ratio) -> float:
    value = _number("min_throughput_ratio", min_throughput_ratio)
    if value > 1:
        raise ValueError(f"min_throughput_ratio must be in [0, 1], got {min_throughput_ratio!r}")
    return value


def choose_under_budget(candidates, budget_mb, min_throughput_ratio=0.0):
    """The fastest admissible candidate within the budget (ties: less memory, then input order)."""
    _checked_candidates(candidates)
    budget = _number("budget_mb", budget_mb)
    floor = _floor(min_throughput_ratio)
    base = next(item for item in candidates if item["name"] == "baseline")["samples_per_s"]
    fits = [item for item in candidates if item["memory_mb"] <= budget]
    admissible = [item for item in fits if item["samples_per_s"] / base >= floor]
    best = min(admissible, key=lambda item: (-item["samples_per_s"], item["memory_mb"], candidates.index(item)),
               default=None)
    ratio = None if best is None else best["samples_per_s"] / base
    return {"budget_mb": budget, "fits": [item["name"] for item in fits],
            "admissible": [item["name"] for item in admissible], "choice": None if best is None else best["name"],
            "throughput_ratio": ratio, "throughput_cost": None if ratio is None else 1 - ratio,
            "headroom_mb": None if best is None else budget - best["memory_mb"]}


def budget_sweep(candidates, min_throughput_ratio=0.0):
    """The choice as a step function of the budget: the frontier of memory against throughput."""
    _checked_candidates(candidates)
    floor = _floor(min_throughput_ratio)
    base = next(item for item in candidates if item["name"] == "baseline")["samples_per_s"]
    order = sorted(range(len(candidates)), key=lambda i: (candidates[i]["memory_mb"], -candidates[i]["samples_per_s"], i))
    frontier, fastest = [], None
    for index in order:
        item = candidates[index]
        if item["samples_per_s"] / base < floor:
            continue
        if fastest is None or item["samples_per_s"] > fastest:
            frontier.append(item)
            fastest = item["samples_per_s"]
    segments = []
    if not frontier or frontier[0]["memory_mb"] > 0:
        segments.append({"from_mb": 0.0, "to_mb": float(frontier[0]["memory_mb"]) if frontier else None, "choice": None})
    for position, item in enumerate(frontier):
        upper = float(frontier[position + 1]["memory_mb"]) if position + 1 < len(frontier) else None
        segments.append({"from_mb": float(item["memory_mb"]), "to_mb": upper, "choice": item["name"]})
    chosen = {segment["choice"] for segment in segments}
    return {"segments": segments, "flip_points_mb": [segment["from_mb"] for segment in segments[1:]],
            "never_chosen": [item["name"] for item in candidates if item["name"] not in chosen]}


def _checked_segments(segments) -> list[dict]:
    if not isinstance(segments, list) or not segments:
        raise ValueError("segments must be a non-empty list of dicts")
    for position, segment in enumerate(segments):
        if not isinstance(segment, dict):
            raise ValueError(f"segment {position} must be a dict, got {segment!r}")
        start, end, choice = segment.get("from_mb"), segment.get("to_mb"), segment.get("choice")
        _number(f"segment {position} from_mb", start)
        last = position == len(segments) - 1
        if last and end is not None:
            raise ValueError("the last segment must end at None (no upper end)")
        if not last and (_number(f"segment {position} to_mb", end) <= start
                         or end != segments[position + 1].get("from_mb")):
            raise ValueError(f"segment {position} must end above its start, where the next one starts")
        if choice is not None and (not isinstance(choice, str) or not choice):
            raise ValueError(f"segment {position}: choice must be None or a non-empty str, got {choice!r}")
    if segments[0]["from_mb"] != 0:
        raise ValueError("the first segment must start at 0")
    return segments


def final_strategy_choice(segments, target_budget_mb, memory_spread_mb):
    """The decision at the target budget: the segment that holds it, its margin against the measured spread."""
    _checked_segments(segments)
    target = _number("target_budget_mb", target_budget_mb)
    if not isinstance(memory_spread_mb, dict):
        raise ValueError("memory_spread_mb must be a dict name -> spread")
    for name, spread in memory_spread_mb.items():
        _number(f"memory_spread_mb[{name!r}]", spread)
    segment = next(item for item in reversed(segments) if item["from_mb"] <= target)
    choice = segment["choice"]
    result = {"choice": choice, "headroom_mb": None, "spread_mb": None,
              "flip_below_mb": None if choice is None else segment["from_mb"], "flip_above_mb": segment["to_mb"]}
    if choice is None:
        return {**result, "decision": "no_fit", "next_action": "compress_the_static_state_or_shrink_the_workload"}
    if choice not in memory_spread_mb:
        raise ValueError(f"memory_spread_mb has no spread for the chosen {choice!r}")
    headroom, spread = target - segment["from_mb"], float(memory_spread_mb[choice])
    result.update(headroom_mb=headroom, spread_mb=spread)
    if headroom <= spread:
        return {**result, "decision": "tune", "next_action": "remeasure_or_leave_more_headroom"}
    if choice == "baseline":
        return {**result, "decision": "keep_baseline", "next_action": "train_without_a_memory_strategy"}
    return {**result, "decision": "adopt", "next_action": "train_with_the_chosen_strategy"}


def defaults() -> dict[str, Callable]:
    return {"choose_under_budget": choose_under_budget, "budget_sweep": budget_sweep,
            "final_strategy_choice": final_strategy_choice}


# ---------------------------------------------------------------------------
# 76's records, checked before any work
# ---------------------------------------------------------------------------

def decision_path(results_root: Path, label: str) -> Path:
    return chapter_record_path(results_root, tb.CHAPTER_SLUG, "close", label)


def upstream_command(run_mode: str, label: str) -> str:
    return (f"python -m tools.course run --chapter 73 --chapter 76 --chapter 75 --run-mode {run_mode} --label {label}"
            if run_mode == "cpu_smoke" else
            f"python -m tools.experiments.memory_strategy.stages --run-mode real_gpu --label {label} --stage close")


def read_upstream(results_root: Path, *, run_mode: str, label: str, upstream_label: str | None = None,
                  expected_sha256: str | None = None) -> dict:
    """76's decision, its G0 and 73's baseline, each checked; UpstreamRecordError before any work otherwise."""
    upstream_label = upstream_label or label
    path = decision_path(Path(results_root), upstream_label)
    if not path.is_file():
        raise UpstreamRecordError(f"chapter 76's decision record {path} is missing: 75 reads 76's decision of label "
                                  f"{upstream_label!r}. Run 73 and 76 first, e.g.\n  {upstream_command(run_mode, upstream_label)}")
    digest = sha256_file(path)
    if expected_sha256 is not None and digest != expected_sha256:
        raise UpstreamRecordError(f"{path.name} has sha256 {digest}, not the promised {expected_sha256}: the decision "
                                  "changed after it was handed over.")
    close = load_record(path, schema_version=DECISION_SCHEMA)
    found = (close.get("run_mode"), close.get("run_label"), close.get("stage"))
    if found != (run_mode, upstream_label, "close"):
        raise UpstreamRecordError(f"{path.name} holds run mode / label / stage {found}, expected "
                                  f"{(run_mode, upstream_label, 'close')}: a {found[0]} decision never feeds a "
                                  f"{run_mode} budget.")
    g0 = resolve_lineage(close.get("source_g0"), results_root, schema_version=RUN_SCHEMA)
    baseline = resolve_lineage(g0.get("source_baseline"), results_root, schema_version=tb.BASELINE_SCHEMA_VERSION)
    if g0.get("run_label") != upstream_label or baseline.get("run_label") != upstream_label:
        raise UpstreamRecordError(f"76's G0 or 73's baseline behind {path.name} belongs to another label.")
    if not isinstance(baseline.get("model_size"), Mapping) or not baseline["model_size"].get("parameters"):
        raise UpstreamRecordError(f"73's baseline {g0['source_baseline']['path']} has no model_size (written by an "
                                  "older version of chapter 73); run 73, 76 and 75 again with a new label.")
    return {"close": close, "close_path": path, "close_sha256": digest, "g0": g0, "baseline": baseline,
            "lineage": {"close": lineage_entry(path, results_root), "g0": dict(close["source_g0"]),
                        "baseline": dict(g0["source_baseline"])}}


def _candidate_row(candidate: Mapping[str, Any], memory_mb: float, spread_mb: float) -> dict:
    return {"name": candidate["name"], "memory_mb": memory_mb, "memory_spread_mb": spread_mb,
            "samples_per_s": candidate["samples_per_s"]}


def _device_bytes(candidate: Mapping[str, Any]) -> list[int]:
    return [run["saved_tensors"]["last_step"]["device_saved_bytes"] for run in candidate.get("runs", [])
            if run.get("status") == "ok"]


def candidate_table(upstream: Mapping[str, Any]) -> dict:
    """The candidates 75 chooses among, their memory axis, the throughput floor and the target budget."""
    close, g0, baseline = upstream["close"], upstream["g0"], upstream["baseline"]
    by_name = {candidate["name"]: candidate for candidate in g0["candidates"]}
    budget = g0["budget"]
    run_mode = close["run_mode"]
    axis, rule = AXES[run_mode]
    handoff = close["handoff"]
    if run_mode == "real_gpu":
        if not handoff.get("ready"):
            return {"axis": axis, "rule": rule, "candidates": [], "ready": False,
                    "not_ready": handoff["gate"]["status"], "static_floor_mb": None, "target_budget_mb": None,
                    "target_rule": None, "min_throughput_ratio": budget["min_throughput_ratio"]}
        margin = judge.context_margin_mb(budget)
        names = ["baseline", *handoff["gate"]["eligible_candidates"]]
        rows = [_candidate_row(by_name[name], by_name[name]["peak_reserved_mb"] + margin,
                               (by_name[name].get("stability") or {}).get("peak_reserved_range_mb") or 0.0)
                for name in names]
        return {"axis": axis, "rule": rule, "candidates": rows, "ready": True, "not_ready": None,
                "static_floor_mb": None, "target_budget_mb": float(budget["memory_cap_mb"]),
                "target_rule": "76's memory cap", "min_throughput_ratio": budget["min_throughput_ratio"]}
    static = baseline["model_size"]["parameters"] * baseline["model_size"]["static_bytes_per_parameter"]
    rows = []
    for name, candidate in by_name.items():
        if candidate.get("status") != "ok" or candidate.get("successful_runs", 0) < REPEATS \
                or candidate.get("execution_path_verified") is not True:
            continue
        kept = _device_bytes(candidate)
        rows.append(_candidate_row(candidate, (static + max(kept)) / MIB, (max(kept) - min(kept)) / MIB))
    base_row = next((row for row in rows if row["name"] == "baseline"), None)
    target = None if base_row is None else (static / MIB + base_row["memory_mb"]) / 2
    return {"axis": axis, "rule": rule, "candidates": rows, "ready": base_row is not None,
            "not_ready": None if base_row is not None else "baseline_incomplete", "static_floor_mb": static / MIB,
            "target_budget_mb": target, "target_rule": CPU_TARGET_RULE,
            "min_throughput_ratio": budget["min_throughput_ratio"]}


# ---------------------------------------------------------------------------
# The experiment contract's runner
# ---------------------------------------------------------------------------

def choose(plan, table: Mapping[str, Any], target: float) -> dict:
    """The learner's three functions on the table, plus the checks that tie them together."""
    functions = {name: plan.mechanism.function(name, default) for name, default in defaults().items()}
    rows, floor = [dict(row) for row in table["candidates"]], table["min_throughput_ratio"]
    at_target = functions["choose_under_budget"]([dict(row) for row in rows], target, floor)
    sweep = functions["budget_sweep"]([dict(row) for row in rows], floor)
    spreads = {row["name"]: row["memory_spread_mb"] for row in rows}
    final = functions["final_strategy_choice"]([dict(segment) for segment in sweep["segments"]], target, spreads)
    probes = sorted({0.0, target, *(row["memory_mb"] for row in rows),
                     *(row["memory_mb"] * 1.5 + 1.0 for row in rows)})
    disagreements = []
    for budget in probes:
        direct = functions["choose_under_budget"]([dict(row) for row in rows], budget, floor)["choice"]
        stepped = next(segment for segment in reversed(sweep["segments"]) if segment["from_mb"] <= budget)["choice"]
        if direct != stepped:
            disagreements.append({"budget_mb": budget, "choose_under_budget": direct, "budget_sweep": stepped})
    return {"at_target": at_target, "sweep": sweep, "final": final,
            "consistency": {"budgets_checked": len(probes), "disagreements": disagreements,
                            "final_matches_choice_at_target": final["choice"] == at_target["choice"]}}


def run(plan, sink, *, log=None) -> dict:
    """Read 76's decision (checked), build the table, run the three functions, write the budget record."""
    if not plan.writes:
        if log is not None:
            log("75 (dry_run): would read 76's decision record of this label (sha256-checked), its G0 and 73's "
                "baseline, then choose a strategy per budget; no model is loaded, nothing is written")
        return {}
    if plan.seeds or plan.variants:
        raise ConfigError("chapter 75 reads 76's records; it takes no --seed or --variant.")
    sink.require_new([STAGE])
    upstream = read_upstream(sink.results_root, run_mode=plan.run_mode, label=plan.label,
                             upstream_label=plan.option("upstream_label"),
                             expected_sha256=plan.option("upstream_sha256"))
    table = candidate_table(upstream)
    target = plan.option("target_budget_mb")
    target = table["target_budget_mb"] if target is None else _number("target budget (MiB)", target)
    body = {
        "sources": upstream["lineage"],
        "upstream_decision": {"decision": upstream["close"]["decision"]["decision"],
                              "handoff_ready": bool(upstream["close"]["handoff"].get("ready")),
                              "gate_status": upstream["close"]["handoff"]["gate"]["status"]},
        "memory_axis": {"name": table["axis"], "rule": table["rule"], "static_floor_mb": table["static_floor_mb"]},
        "target": {"budget_mb": target, "rule": table["target_rule"] if plan.option("target_budget_mb") is None
                   else "given by the caller"},
        "min_throughput_ratio": table["min_throughput_ratio"],
        "candidates": table["candidates"],
        "mechanism": plan.mechanism.describe(defaults()),
    }
    if not table["ready"] or target is None:
        body.update(status="blocked_by_upstream", decision={"decision": "not_decided", "reason": table["not_ready"]})
    else:
        chosen = choose(plan, table, target)
        body.update(chosen, status="ok")
        if plan.run_mode == "real_gpu":
            body["decision"] = {"decision": chosen["final"]["decision"], "choice": chosen["final"]["choice"],
                                "reason": "76_handoff_ready"}
        else:
            body["decision"] = {"decision": "measure_on_gpu", "choice": None,
                                "reason": "cpu_smoke: no device memory was measured, the footprint is modelled",
                                "proxy_decision": chosen["final"]["decision"], "proxy_choice": chosen["final"]["choice"]}
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    if log is not None:
        log(f"wrote {path.name} (sha256 {digest[:12]}..., decision {body['decision']['decision']})")
    return {"path": path, "sha256": digest}


def plan_options(upstream_label: str | None = None, upstream_sha256: str | None = None,
                 target_budget_mb: float | None = None) -> dict:
    """The `Plan.options` of a 75 run (the notebook's parameters)."""
    return {"upstream_label": upstream_label, "upstream_sha256": upstream_sha256, "target_budget_mb": target_budget_mb}


def add_arguments(parser) -> None:
    parser.add_argument("--upstream-label", dest="upstream_label", default=None,
                        help="the label of 76's run to read (default: this run's label)")
    parser.add_argument("--upstream-sha256", dest="upstream_sha256", default=None,
                        help="the sha256 76's decision record must have")
    parser.add_argument("--target-budget-mb", dest="target_budget_mb", type=float, default=None,
                        help="the budget of the final choice (default: 76's memory cap in real_gpu)")

