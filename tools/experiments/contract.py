"""The experiment contract: one plan type, one record sink, `run(plan, sink) -> records`.

Every experiment of `tools/experiments/` has the same shape:

    Plan          what one run is (experiment, chapter, stage, variants, seeds, run mode, label,
                  results dir, model, model source, device, limits, the experiment's own options,
                  and the chapter's mechanism functions); checked before any work, frozen
    Mechanism     the chapter functions a stage runs (the notebook passes the learner's exercise
                  functions), and where each came from; the records say which ran
    RecordSink    where the run's records go: names them, writes each once (header, runtime
                  snapshot, body) through `tools.core.records`, ties them by lineage, and keeps the
                  list of what it wrote or read back
    run           finds the plan's experiment in `tools.experiments.registry`, checks the plan
                  against it and calls its runner `runner(plan, sink, log=None)`; returns the sink's
                  records (`RecordRef`)

The one command line every experiment uses is `tools.experiments.cli`. This module imports no
experiment and no heavy library (torch, transformers): the registry, the device batch and the
command line read it on a machine that has only the standard library and the course's own code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core.paths import chapter_record_path, resolve_project_root, results_root_for
from tools.core.records import (
    lineage_entry,
    load_record,
    record_header,
    save_json_record_once,
    sha256_file,
)
from tools.core.runs import (
    evidence_level,
    require_finite,
    validate_choice,
    validate_run_label,
    validate_run_mode,
)
from tools.errors import ConfigError, RecordExistsError
from tools.experiments.registry import get_experiment, load_runner  # noqa: F401 - load_runner re-exported

TINY = "tiny"
REAL_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
MODEL_SOURCES = ("local", "random_init")
DEVICES = ("cpu", "cuda")
DEFAULT_MODELS = {"dry_run": REAL_MODEL, "cpu_smoke": TINY, "real_gpu": REAL_MODEL}
"""The model a run mode uses when the plan names none (dry_run describes the real_gpu run)."""
DEFAULT_DEVICES = {"dry_run": "cuda", "cpu_smoke": "cpu", "real_gpu": "cuda"}

Log = Callable[[str], None] | None


@dataclass(frozen=True)
class Limits:
    """What a run may use: `time_s` wall-clock seconds (the device batch passes the time left),
    `cpu_threads` torch threads on the CPU. None means no limit given; an experiment that cannot
    finish within `time_s` plans less (and records that it did) rather than being killed."""

    time_s: float | None = None
    cpu_threads: int | None = None

    def __post_init__(self) -> None:
        if self.time_s is not None:
            object.__setattr__(self, "time_s", require_finite("time limit (s)", self.time_s, positive=True))
        if self.cpu_threads is not None and (isinstance(self.cpu_threads, bool) or not isinstance(self.cpu_threads, int)
                                             or self.cpu_threads < 1):
            raise ConfigError(f"cpu_threads must be a positive integer, got {self.cpu_threads!r}")

    def public(self) -> dict:
        return {"time_s": self.time_s, "cpu_threads": self.cpu_threads}


def _tuple_of(name: str, values, kind: type) -> tuple:
    if values is None:
        return ()
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{name} must be a list of {kind.__name__}, got {values!r}")
    items = tuple(values)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise ConfigError(f"{name} must be a list of {kind.__name__}, got {values!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"{name} must not repeat an item, got {list(items)}")
    return items


MECHANISM_SOURCES = ("learner", "reference", "package")
"""Where a mechanism function came from: the learner's exercise cell, the notebook's reference solution,
or the package's own copy (the default of a run without a notebook: the command line, the GPU batch)."""


def _code_sha256(function: Callable) -> str | None:
    """sha256 of a function's source text (None when Python cannot show it)."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Mechanism:
    """The chapter functions a stage runs in place of its package's own copies, and where each came from.

    A chapter's Step 5 passes its exercise functions (`tools.chapters.mechanism.step5_mechanism`), so a
    learner's bug shows in Step 5; a runner takes each with `function(name, default)`, and its records
    carry `describe(defaults)`: for every function the stage used, its source and the sha256 of its code.
    """

    functions: Mapping[str, Callable] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.functions, Mapping) or not isinstance(self.sources, Mapping):
            raise ConfigError("a mechanism is a mapping name -> function and a mapping name -> source")
        for name, function in self.functions.items():
            if not isinstance(name, str) or not callable(function):
                raise ConfigError(f"mechanism function {name!r} must be a callable under a str name, got {function!r}")
            if self.sources.get(name) not in MECHANISM_SOURCES:
                raise ConfigError(f"mechanism function {name!r} needs a source, one of {MECHANISM_SOURCES}; "
                                  f"got {self.sources.get(name)!r}")
        extra = sorted(set(self.sources) - set(self.functions))
        if extra:
            raise ConfigError(f"mechanism sources name functions it does not have: {extra}")
        object.__setattr__(self, "functions", dict(self.functions))
        object.__setattr__(self, "sources", dict(self.sources))

    def function(self, name: str, default: Callable) -> Callable:
        """The function passed under `name`, else the package's `default`."""
        return self.functions.get(name, default)

    def describe(self, defaults: Mapping[str, Callable]) -> dict:
        """`{name: {"source", "code_sha256"}}` for every function the stage runs (for a record)."""
        described = {}
        for name in sorted(set(defaults) | set(self.functions)):
            function = self.functions.get(name, defaults.get(name))
            described[name] = {"source": self.sources.get(name, "package"), "code_sha256": _code_sha256(function)}
        return described

    def sources_line(self, defaults: Mapping[str, Callable]) -> dict[str, list[str]]:
        """`{source: [names]}`: which functions came from where (what a page prints)."""
        grouped: dict[str, list[str]] = {}
        for name in sorted(set(defaults) | set(self.functions)):
            grouped.setdefault(self.sources.get(name, "package"), []).append(name)
        return grouped


@dataclass(frozen=True)
class Plan:
    """One run of one experiment, checked before any work.

    `model` and `device` default from the run mode (the tiny model on the CPU in cpu_smoke,
    Qwen2.5-0.5B-Instruct on CUDA in real_gpu and in the plan dry_run prints); `stage` None means
    the experiment's default stage; empty `variants` / `seeds` mean the experiment's own. `options`
    holds the experiment's own knobs (declared by its `add_arguments` on the command line).
    """

    experiment: str
    chapter: str
    run_mode: str
    label: str
    results_dir: Path | None = None
    stage: str | None = None
    variants: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    model: str | None = None
    model_source: str = "local"
    device: str | None = None
    model_cache: Path | None = None
    limits: Limits = field(default_factory=Limits)
    options: Mapping[str, Any] = field(default_factory=dict)
    mechanism: Mechanism = field(default_factory=Mechanism)

    def __post_init__(self) -> None:
        for name in ("experiment", "chapter"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"plan {name} must be a non-empty string, got {getattr(self, name)!r}")
        validate_run_mode(self.run_mode)
        if self.run_mode != "dry_run":
            validate_run_label(self.label)
        elif not isinstance(self.label, str):
            raise ConfigError(f"RUN_LABEL must be a string, got {self.label!r}")
        validate_choice("model source", self.model_source, MODEL_SOURCES)

        def set_(name: str, value: Any) -> None:  # a frozen dataclass fills its defaults here
            object.__setattr__(self, name, value)

        set_("model", self.model or DEFAULT_MODELS[self.run_mode])
        set_("device", self.device or DEFAULT_DEVICES[self.run_mode])
        validate_choice("device", self.device, DEVICES)
        if self.run_mode == "cpu_smoke" and self.device != "cpu":
            raise ConfigError("cpu_smoke runs on the CPU; use --run-mode real_gpu for a CUDA device.")
        set_("variants", _tuple_of("variants", self.variants, str))
        set_("seeds", _tuple_of("seeds", self.seeds, int))
        if self.stage is not None and (not isinstance(self.stage, str) or not self.stage):
            raise ConfigError(f"stage must be a stage name or None, got {self.stage!r}")
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"limits must be a Limits, got {self.limits!r}")
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"options must be a mapping, got {self.options!r}")
        if not isinstance(self.mechanism, Mechanism):
            raise ConfigError(f"mechanism must be a Mechanism, got {self.mechanism!r}")
        for name in ("results_dir", "model_cache"):
            value = getattr(self, name)
            set_(name, None if value in (None, "") else Path(value))

    @property
    def writes(self) -> bool:
        """False in dry_run: nothing is read, written or loaded."""
        return self.run_mode != "dry_run"

    @property
    def evidence_level(self) -> str | None:
        return evidence_level(self.run_mode)

    @property
    def results_root(self) -> Path | None:
        """The folder every record of the run goes under (None in dry_run)."""
        return results_root_for(self.run_mode, self.results_dir)

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def replace(self, **changes) -> Plan:
        """A copy with some fields changed, checked again."""
        return dataclasses.replace(self, **changes)

    def public(self) -> dict:
        """The plan as plain JSON values, machine paths reduced to folder names (for a record)."""
        return {
            "experiment": self.experiment, "chapter": self.chapter, "run_mode": self.run_mode, "label": self.label,
            "stage": self.stage, "variants": list(self.variants), "seeds": list(self.seeds), "model": self.model,
            "model_source": self.model_source, "device": self.device,
            "model_cache": None if self.model_cache is None else self.model_cache.name,
            "limits": self.limits.public(), "options": json.loads(json.dumps(dict(self.options), default=str)),
            "mechanism": {name: self.mechanism.sources[name] for name in sorted(self.mechanism.functions)},
        }


@dataclass(frozen=True)
class RecordRef:
    """One record of a run: where it is, its sha256, and whether this run wrote it or found it."""

    stage: str
    path: Path
    sha256: str
    action: str  # "written" | "existing"
    status: str | None = None

    def load(self, schema_version: str | None = None) -> dict:
        """The record, its sha256 checked."""
        return load_record(self.path, schema_version=schema_version, expected_sha256=self.sha256)


def _status_of(record: Mapping[str, Any]) -> str | None:
    """A record's own status: `status`, else its decision's (`decision.decision`, `system_decision.status`)."""
    status = record.get("status")
    for key, field_name in (("decision", "decision"), ("system_decision", "status")):
        if status is None and isinstance(record.get(key), Mapping):
            status = record[key].get(field_name)
    return None if status is None else str(status)


class RecordSink:
    """Where one run's records go: `<results root>/<folder>/<folder>_<stage>_<label>.json`.

    It has the members of a notebook's `ChapterContext` (run_mode, run_label, results_root,
    chapter_id, slug, writes_records, record_path, save_record), so a stage written for one runs
    with the other. Every record goes through `tools.core.records` (write-once, atomic), and the
    sink keeps the `RecordRef` of each record written or read back, in order (`records`).
    """

    def __init__(self, *, run_mode: str, run_label: str, results_root: Path | None, chapter_id: str,
                 slug: str | None = None, project_root: Path | None = None,
                 runtime: Callable[[], dict] | None = None):
        self.run_mode = validate_run_mode(run_mode)
        self.run_label = run_label if self.run_mode == "dry_run" else validate_run_label(run_label)
        self.results_root = None if self.run_mode == "dry_run" or results_root is None else Path(results_root)
        if self.run_mode != "dry_run" and self.results_root is None:
            raise ConfigError(f"a {run_mode} run needs a results root")
        self.chapter_id = chapter_id
        self.slug = slug or chapter_id
        self.project_root = project_root
        self._runtime = runtime
        self.records: list[RecordRef] = []

    @classmethod
    def for_plan(cls, plan: Plan, *, slug: str | None = None) -> RecordSink:
        """The sink of a plan: its chapter's catalog slug names the record folder unless `slug` is given."""
        if slug is None and plan.writes:
            from tools.core.catalog import find_chapter

            slug = find_chapter(plan.chapter).slug
        return cls(run_mode=plan.run_mode, run_label=plan.label, results_root=plan.results_root,
                   chapter_id=plan.chapter, slug=slug)

    @classmethod
    def from_context(cls, context: Any) -> RecordSink:
        """The sink of a notebook's `ChapterContext` (the same paths, the same records)."""
        return cls(run_mode=context.run_mode, run_label=context.run_label, results_root=context.results_root,
                   chapter_id=context.chapter_id, slug=context.slug, project_root=context.project_root)

    @property
    def writes_records(self) -> bool:
        return self.run_mode != "dry_run"

    def _root(self) -> Path:
        if self.results_root is None:
            raise RecordExistsError("dry_run writes and reads no record")  # a caller bug: check writes_records
        return self.results_root

    def record_path(self, stage: str, *, folder: str | None = None) -> Path | None:
        """`<results root>/<folder>/<folder>_<stage>_<label>.json` (folder: this chapter's slug); None in dry_run."""
        if not self.writes_records:
            return None
        return chapter_record_path(self._root(), folder or self.slug, stage, self.run_label)

    def require_new(self, stages, *, folder: str | None = None) -> None:
        """Refuse, before any work, a label that already named one of these stages' records."""
        used = [path for path in (self.record_path(stage, folder=folder) for stage in stages)
                if path is not None and path.exists()]
        if used:
            raise RecordExistsError(f"{used[0]} already exists: RUN_LABEL {self.run_label!r} was used before. "
                                    "Records are write-once; choose a new RUN_LABEL.")

    def runtime(self) -> dict:
        """The runtime snapshot a record carries (interpreter, torch, CUDA, packages, git)."""
        if self._runtime is not None:
            return self._runtime()
        from tools.core.environment import runtime_snapshot

        return runtime_snapshot(self.project_root or resolve_project_root())

    def header(self, stage: str, schema_version: str, *, chapter: str | None = None) -> dict:
        """The fields every record starts with (schema, chapter, stage, label, run mode, evidence, time)."""
        return record_header(schema_version=schema_version, chapter=chapter or self.chapter_id, stage=stage,
                             run_mode=self.run_mode, run_label=self.run_label)

    def save_record(self, stage: str, body: Mapping[str, Any], *, schema_version: str | None = None,
                    chapter: str | None = None, folder: str | None = None) -> tuple[Path, str]:
        """Write `stage`'s record once: header, `runtime`, then `body`; returns (path, sha256)."""
        self._root()
        schema = schema_version or f"{folder or self.slug}-{stage}/v1"
        record = {**self.header(stage, schema, chapter=chapter), "runtime": self.runtime(), **body}
        ref = self.save(self.record_path(stage, folder=folder), record, stage=stage)
        return ref.path, ref.sha256

    def save(self, path: Path, record: Mapping[str, Any], *, stage: str | None = None) -> RecordRef:
        """Write a complete record once at `path` (under the results root); returns its RecordRef."""
        target = Path(path)
        self._check_inside(target)
        digest = save_json_record_once(target, record)
        return self._keep(RecordRef(stage or str(record.get("stage", target.stem)), target, digest, "written",
                                    _status_of(record)))

    def adopt(self, path: Path, *, stage: str, action: str = "written") -> RecordRef:
        """Keep a record a runner wrote itself (or found complete) under this sink's list."""
        target = Path(path)
        self._check_inside(target)
        record = load_record(target)
        return self._keep(RecordRef(stage, target, sha256_file(target), action, _status_of(record)))

    def read(self, stage: str, *, schema_version: str | None = None, folder: str | None = None,
             keep: bool = False) -> dict:
        """Read a record of this label (schema checked); with `keep`, list it as an existing record."""
        path = self.record_path(stage, folder=folder)
        record = load_record(path, schema_version=schema_version)
        if keep:
            self._keep(RecordRef(stage, path, sha256_file(path), "existing", _status_of(record)))
        return record

    def lineage(self, path: Path) -> dict:
        """`{path, sha256}` of an upstream record, relative to the results root."""
        return lineage_entry(path, self._root())

    def _check_inside(self, target: Path) -> None:
        root = self._root().resolve()
        if root not in target.resolve().parents:
            raise ConfigError(f"record {target} lies outside the results root {root}; keep every record of a run "
                              "under one results folder.")

    def _keep(self, ref: RecordRef) -> RecordRef:
        self.records.append(ref)
        return ref


def run(plan: Plan, sink: RecordSink | None = None, *, log: Log = None) -> list[RecordRef]:
    """Run `plan` through its registered experiment and return the records written or read back.

    The plan is checked against the experiment's declaration (chapter, stage, variants) before any
    work; `sink` defaults to `RecordSink.for_plan(plan)`. dry_run loads and writes nothing (the
    runner describes the plan through `log`) and returns [].
    """
    experiment = get_experiment(plan.experiment)
    plan = experiment.check_plan(plan)
    sink = sink if sink is not None else RecordSink.for_plan(plan, slug=experiment.record_folder)
    runner = load_runner(experiment.runner)
    with _cpu_threads(plan.limits.cpu_threads):
        runner(plan, sink, log=log)
    return list(sink.records)


@contextlib.contextmanager
def _cpu_threads(threads: int | None):
    """torch at `threads` CPU threads for the run (restored afterwards); nothing when None."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


FAILED_STATUSES = ("oom", "failed")
"""Record statuses that make a run's command exit 1 (the record still says what happened)."""


def failed_records(records: list[RecordRef]) -> list[RecordRef]:
    return [ref for ref in records if ref.status in FAILED_STATUSES]
