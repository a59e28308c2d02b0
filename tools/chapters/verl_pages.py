"""Step 5 that PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM share: one verl experiment, one record, two pages.

PT-ROLLOUT-LIFECYCLE runs the shared experiment and PT-RL-SYSTEM reads the same record (or the
other way round, whichever page runs first with a label). What both pages do lives here; what
only one page shows lives in its own module (`pt_rollout_lifecycle`, `pt_rl_system`).

    plan_closure(...)           the run parameters checked; the shared record's path and the tool's arguments
    run_or_read(plan)           dry_run: the tool's preflight of both plans; else read the record of this
                                label, or run the experiment once when there is none
    evidence_sentence / checks_sentence   what the record may stand for, from its own fields
    evidence_beside_reported    the learner's own run beside what the original course reported

Silent unless a caller passes `echo` (the notebooks pass `print`). The experiment runs as a separate
process (`python -m tools.experiments.verl_closure`), as on a GPU machine, so its memory is its own.
Sentences come from the course's string table (`tools/chapters/lesson_text.toml`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tools.chapters.evidence import reported_block
from tools.chapters.lesson_text import text
from tools.core.paths import default_results_dir, resolve_project_root, results_root_for
from tools.core.records import load_record, sha256_file
from tools.core.runs import validate_choice, validate_run_label, validate_run_mode
from tools.errors import ConfigError, StageFailedError, UpstreamRecordError
from tools.experiments.verl_closure.config import BACKENDS, MODEL_SOURCES
from tools.experiments.verl_closure.record import SCHEMA, read_summary

CLOSURE_FOLDER = "pt_verl_closure"
"""One shared record per label: `<results dir>/pt_verl_closure/<label>.json`."""

TOOL_MODULE = "tools.experiments.verl_closure"
STAGE = "verl_mechanism_closure"
PREVIEW_LABEL = "dry_run_preview"

PREFLIGHT_MEANING = {
    0: "ready (exit 0): every check passed. A ready environment is not a passed experiment.",
    2: "invalid arguments (exit 2): nothing was checked; fix the parameters above.",
    3: "blocked (exit 3): fix the checks marked !! above first; nothing was run or written.",
    4: ("only the model cache is missing (exit 4); every other check passed. Download the model with the "
        "command listed above, or set MODEL_SOURCE = 'random_init' (the record then says weights: random_init)."),
}
RUN_FAILURE_MEANING = {
    1: "a stage failed and no record was written",
    2: "invalid input; nothing was done",
    3: "the preflight blocked the run; nothing was done",
    4: "the model cache is missing: download the model or set MODEL_SOURCE = 'random_init'",
}

Echo = Callable[[str], None] | None


def _say(echo: Echo, line: str = "") -> None:
    if echo is not None:
        echo(line)


# ---------------------------------------------------------------------------
# The plan: paths and arguments
# ---------------------------------------------------------------------------

def closure_record_path(run_mode: str, run_label: str, results_dir=None, root: Path | None = None) -> Path:
    """`<results dir>/pt_verl_closure/<label>.json`; RESULTS_DIR wins over the run mode's default folder."""
    if validate_run_mode(run_mode) == "dry_run":
        raise ConfigError("dry_run has no shared record; plan a cpu_smoke or real_gpu run.")
    return results_root_for(run_mode, results_dir, root) / CLOSURE_FOLDER / f"{run_label}.json"


@dataclass(frozen=True)
class ClosurePlan:
    """One page's Step 5: the run parameters, checked, and where the shared record goes (None in dry_run)."""

    run_mode: str
    run_label: str
    results_dir: Any
    backend: str
    model_source: str
    verl_root: Path | None
    path: Path | None

    def arguments(self, run_mode: str) -> list[str]:
        """What the tool is asked for in `run_mode`: the tiny model through the torch backend on CPU
        (cpu_smoke, a code-path proof), or Qwen2.5-0.5B-Instruct on CUDA (real_gpu)."""
        if run_mode == "cpu_smoke":
            return ["--backend", "torch", "--model", "tiny", "--device", "cpu"]
        return (["--backend", self.backend, "--device", "cuda", "--model-source", self.model_source]
                + (["--verl-root", str(self.verl_root)] if self.verl_root else []))

    def describe(self) -> str:
        lines = [f"RUN_MODE = {self.run_mode}, RUN_LABEL = {self.run_label!r}"]
        if self.path is None:
            lines.append("shared record: none in dry_run (the next cell runs the preflight only and writes nothing)")
            return "\n".join(lines)
        lines += [f"shared record: {self.path}", "experiment arguments: " + shlex.join(self.arguments(self.run_mode))]
        if self.run_mode == "cpu_smoke":
            lines.append("cpu_smoke uses the tiny model on CPU; CLOSURE_BACKEND, MODEL_SOURCE and VERL_ROOT apply "
                         "to real_gpu only")
        return "\n".join(lines)


def plan_closure(run_mode: str, run_label: str, results_dir=None, *, backend: str = "verl",
                 model_source: str = "local", verl_root=None, root: Path | None = None) -> ClosurePlan:
    """Check a page's Step 5 parameters before any work and derive the shared record's path."""
    run_mode = validate_run_mode(run_mode)
    validate_choice("CLOSURE_BACKEND", backend, BACKENDS)
    validate_choice("MODEL_SOURCE", model_source, MODEL_SOURCES)
    folder = Path(verl_root).expanduser() if verl_root else None
    if folder is not None and not folder.is_dir():
        raise ConfigError(f"VERL_ROOT {folder} is not a folder: point it at a verl 0.9.1 checkout or set None")
    path = None
    if run_mode != "dry_run":
        run_label = validate_run_label(run_label)
        path = closure_record_path(run_mode, run_label, results_dir, root)
    return ClosurePlan(run_mode, run_label, results_dir, backend, model_source, folder, path)


# ---------------------------------------------------------------------------
# Running the tool, reading the record
# ---------------------------------------------------------------------------

def run_closure_tool(mode: str, label: str, output: Path, arguments: list[str], *, echo: Echo = None,
                     root: Path | None = None) -> int:
    """Run `python -m tools.experiments.verl_closure` from the project root; pass each line of its output
    to `echo`; return its exit code."""
    command = [sys.executable, "-m", TOOL_MODULE, "--mode", mode, "--run-label", label, "--output", str(output),
               *arguments]
    _say(echo, "$ python " + shlex.join(command[1:]))
    with subprocess.Popen(command, cwd=root or resolve_project_root(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace") as process:
        for line in process.stdout:
            _say(echo, line.rstrip("\n"))
    return process.returncode


def read_closure_record(path: Path, label: str, run_mode: str) -> dict:
    """The shared record at `path`; refused when its schema, its label or its evidence level does not fit."""
    record = load_record(path, schema_version=SCHEMA)
    if record.get("run_label") != label:
        raise UpstreamRecordError(f"{path} holds run label {record.get('run_label')!r}, not {label!r}.",
                                  stage=STAGE, fix="choose another RUN_LABEL, or RESULTS_DIR")
    if run_mode == "real_gpu" and record.get("evidence_level") != "real_gpu":
        raise UpstreamRecordError(
            f"{path} is {record.get('evidence_level')!r} evidence; a real_gpu run never reads it as a GPU result.",
            stage=STAGE, fix="choose a new RUN_LABEL for the GPU run")
    return record


@dataclass(frozen=True)
class SharedRecord:
    """The shared record a page uses: where, whether this page ran or read it, its sha256 and content."""

    path: Path
    origin: str
    sha256: str
    record: Mapping[str, Any]

    def summary(self, page: str) -> dict:
        return read_summary(self.path, page)


def preflight_plans(plan: ClosurePlan, *, echo: Echo = None, root: Path | None = None) -> dict[str, int]:
    """dry_run: the tool's preflight of the real_gpu and the cpu_smoke plan (loads no model, writes
    nothing); returns each plan's exit code (None where a record of the label already exists)."""
    try:
        label = validate_run_label(plan.run_label)
    except ConfigError as error:
        label = None
        _say(echo, f"{error}\nThe preflight below uses a stand-in label and a scratch output path.")
    codes = {}
    for planned in ("real_gpu", "cpu_smoke"):
        _say(echo, f"\n--- preflight of the {planned} plan (loads no model, writes nothing) ---")
        if label is None:
            this_label, output = PREVIEW_LABEL, Path(tempfile.gettempdir()) / CLOSURE_FOLDER / f"{PREVIEW_LABEL}.json"
        else:
            this_label, output = label, closure_record_path(planned, label, plan.results_dir, root)
        if output.exists():
            _say(echo, f"a record with this label already exists at {output}: RUN_MODE = {planned!r} reads it and "
                       "does not run the experiment again.")
            codes[planned] = None
            continue
        code = run_closure_tool("preflight", this_label, output, plan.arguments(planned), echo=echo, root=root)
        codes[planned] = code
        _say(echo, f"=> {planned}: " + PREFLIGHT_MEANING.get(code, f"unexpected exit code {code}; read the output above."))
        if code == 0:
            _say(echo, f"   Set RUN_MODE = {planned!r} (and a unique RUN_LABEL) to run it.")
        elif planned == "real_gpu" and code == 3:
            _say(echo, "   Without a GPU, RUN_MODE = 'cpu_smoke' runs the same code path with the tiny model on CPU.")
    return codes


def obtain_closure_record(plan: ClosurePlan, *, echo: Echo = None, root: Path | None = None) -> SharedRecord:
    """Read the shared record of this label, or run the experiment once when there is none.

    A record of another label, of another schema, or (in real_gpu) of cpu_smoke evidence is refused
    (UpstreamRecordError); a failed run raises StageFailedError with the exit code and the group logs.
    """
    if plan.path is None:
        raise ConfigError("dry_run reads and runs nothing; call preflight_plans instead.")
    if plan.path.exists():
        read_closure_record(plan.path, plan.run_label, plan.run_mode)
        origin = "read"
        _say(echo, f"The shared record of label {plan.run_label!r} already exists: it is read, and the experiment "
                   "is not run again.")
    else:
        _say(echo, f"No shared record of label {plan.run_label!r} yet: running the experiment once ({plan.run_mode}).")
        code = run_closure_tool("run", plan.run_label, plan.path, plan.arguments(plan.run_mode), echo=echo, root=root)
        if code != 0:
            logs = [str(plan.path.parent / f"{plan.run_label}_{group}.log") for group in ("release", "retain")]
            logs = [log for log in logs if Path(log).exists()]
            raise StageFailedError(
                f"the shared experiment exited with code {code} ({RUN_FAILURE_MEANING.get(code, 'unexpected exit code')})",
                stage=STAGE, cause=f"exit code {code}",
                fix="read the output above" + (f" and the group logs {logs}" if logs else "")
                    + "; fix the cause before running again")
        origin = "ran"
    record = read_closure_record(plan.path, plan.run_label, plan.run_mode)
    shared = SharedRecord(plan.path, origin, sha256_file(plan.path), record)
    _say(echo, f"shared record ({origin}): {plan.path}")
    _say(echo, f"  sha256 {shared.sha256}")
    _say(echo, f"  schema {record['schema_version']}, evidence level {record['evidence_level']}, backend "
               f"{record['backend']}, device {record['device']}, model {record['model'].get('model_id')} "
               f"(weights {record['model'].get('weights')}), status {record['system_decision']['status']}")
    return shared


def run_or_read(plan: ClosurePlan, *, echo: Echo = None, root: Path | None = None) -> SharedRecord | None:
    """Step 5's one call: the preflight in dry_run (returns None), else `obtain_closure_record`."""
    if plan.run_mode == "dry_run":
        preflight_plans(plan, echo=echo, root=root)
        return None
    return obtain_closure_record(plan, echo=echo, root=root)


# ---------------------------------------------------------------------------
# What both pages print
# ---------------------------------------------------------------------------

def value_or_null(value, digits: int = 1) -> str:
    """A sampled number, or null when nothing was sampled (never 0)."""
    return "null" if value is None else f"{value:.{digits}f}"


def header_line(summary: Mapping[str, Any]) -> str:
    return (f"label {summary['run_label']} | evidence {summary['evidence_level']} | backend {summary['backend']} | "
            f"model {summary['model_id']} (weights {summary['weights']}) | status {summary['status']}")


def check_lines(summary: Mapping[str, Any]) -> list[str]:
    return ["checks:"] + [f"  {'pass' if ok else 'FAIL'}  {name}" for name, ok in summary["checks"].items()]


def agreement_triple(entry: Mapping[str, float]) -> str:
    """mean / p99 / max of one same-version agreement entry."""
    return f"{entry['mean_abs_error']:.3g}/{entry['p99_abs_error']:.3g}/{entry['max_abs_error']:.3g}"


def figure_title(summary: Mapping[str, Any]) -> str:
    title = (f"{summary['run_label']}: evidence {summary['evidence_level']}, backend {summary['backend']}, "
             f"model {summary['model_id']}")
    return title + (" (cpu_smoke: not a GPU measurement)" if summary["evidence_level"] == "cpu_smoke" else "")


def backticked(names) -> str:
    """`a`、`b`: names in code style, enumerated as the lesson text does."""
    return text("verl.enumeration").join(f"`{name}`" for name in names)


def evidence_sentence(summary: Mapping[str, Any]) -> str:
    """What the record may stand for, built from its own fields."""
    source = text("verl.evidence_source", backend=summary["backend"], model_id=summary["model_id"],
                  weights=summary["weights"])
    if summary["evidence_level"] == "cpu_smoke":
        return text("verl.evidence_cpu_smoke", source=source)
    sentence = text("verl.evidence_gpu", evidence_level=summary["evidence_level"], source=source)
    if summary["weights"] == "random_init":
        sentence += text("verl.evidence_random_weights")
    return sentence


def checks_sentence(summary: Mapping[str, Any]) -> str:
    """How many of the record's checks passed, and which failed."""
    checks, failed = summary["checks"], summary["failed_checks"]
    counts = {"passed": len(checks) - len(failed), "total": len(checks), "status": summary["status"]}
    if not failed:
        return text("verl.checks_all_passed", **counts)
    return text("verl.checks_some_failed", **counts, failed=backticked(failed))


# ---------------------------------------------------------------------------
# The learner's own run beside what the original course reported
# ---------------------------------------------------------------------------

def latest_shared_record(run_mode: str = "cpu_smoke", root: Path | None = None) -> Path | None:
    """The newest shared record of `run_mode` in that mode's default results folder, or None."""
    folder = default_results_dir(run_mode, root) / CLOSURE_FOLDER
    found = []
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # not a record this block can show
        if isinstance(record, dict) and record.get("schema_version") == SCHEMA and record.get("run_mode") == run_mode:
            found.append((str(record.get("created_utc", "")), path.name, path))
    return max(found)[2] if found else None


def own_run_lines(path: Path) -> list[str]:
    """The figures of one shared record that the original course also reported, in its terms."""
    system, lifecycle = read_summary(path, "system"), read_summary(path, "lifecycle")
    gpu = system["sampler"]["gpu_source"] is not None
    key, unit = ("gpu_peak_mb", "GPU") if gpu else ("host_peak_mb", "host (no GPU sampled)")
    groups = system["groups"]
    return [
        f"  update-phase sampled peak MiB ({unit}): " + ", ".join(
            f"{g} {value_or_null(e['phases']['update'][key], 0)}" for g, e in groups.items()),
        "  update-phase seconds: " + ", ".join(f"{g} {e['phases']['update']['duration_s']:.3f}" for g, e in groups.items()),
        f"  whole-segment sampled peak MiB ({unit}): " + ", ".join(
            f"{g} {value_or_null((system['sampled_gpu_peak_mb'] if gpu else system['sampled_host_peak_mb'])[g], 0)}"
            for g in groups),
        "  changed parameter tensors per group: " + ", ".join(
            f"{g} {e['changed_tensor_count']}" for g, e in lifecycle["groups"].items()),
        "  same-version |error| after the sync, mean / p99 / max: " + ", ".join(
            f"{g} {agreement_triple(e['same_version_after_sync'])}" for g, e in lifecycle["groups"].items()),
        "  admitted / rejected per group: " + ", ".join(
            f"{g} {e['admitted']} / {e['rejected']}" for g, e in lifecycle["groups"].items()),
    ]


def _shown(path: Path, root: Path) -> str:
    """`path` relative to the project root when it lies inside it (records name no machine paths)."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def evidence_beside_reported(chapter_id: str, shared: SharedRecord | None, *, root: Path | None = None) -> str:
    """The learner's own shared record (this run's, or in dry_run the newest cpu_smoke one) beside the
    figures the original course reported for it, each labelled with its evidence level."""
    root = root or resolve_project_root()
    path = shared.path if shared is not None else latest_shared_record("cpu_smoke", root)
    if path is None:
        lines = ["your run: no cpu_smoke record of the shared experiment yet under "
                 f"{_shown(default_results_dir('cpu_smoke', root) / CLOSURE_FOLDER, root)}"]
    else:
        record = load_record(path, schema_version=SCHEMA)
        level = record["evidence_level"]
        note = "code path on this machine, not a GPU measurement" if level == "cpu_smoke" else "measured here"
        lines = [f"your run ({level}: {note}): label {record['run_label']}, backend {record['backend']}, model "
                 f"{record['model'].get('model_id')} (weights {record['model'].get('weights')}), status "
                 f"{record['system_decision']['status']}", *own_run_lines(path)]
    lines.append('produce your own: set RUN_MODE = "cpu_smoke" and a new RUN_LABEL, or run '
                 "`python -m tools.course run --chapter PT-ROLLOUT-LIFECYCLE --run-mode cpu_smoke --label <label>`; "
                 "on a GPU, RUN_MODE = \"real_gpu\"")
    return "\n".join(lines + ["", reported_block(chapter_id, root)])
