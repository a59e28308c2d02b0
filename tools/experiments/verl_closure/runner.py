"""`run_experiment`: both groups in order, the resource sampler, the memory wait between groups, and
the write-once record. Silent unless the caller passes `echo` (each group's log is always written to
`<label>_<group>.log` beside the record)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from tools.core.environment import runtime_snapshot
from tools.data.arithmetic import build_task_pool
from tools.errors import RecordExistsError
from tools.experiments.verl_closure.backends import GroupRun, get_backend
from tools.experiments.verl_closure.comparisons import compare_lora_updates
from tools.experiments.verl_closure.config import ClosureConfig, group_settings, validate_config
from tools.experiments.verl_closure.protocol import FREE_CACHE_ENGINE, GROUPS, build_examples, build_requests
from tools.experiments.contract import RecordSink
from tools.experiments.verl_closure.record import CHAPTERS, STAGE, build_record
from tools.measure.sampler import ResourceSampler, gpu_memory_reader, wait_for_memory_settle

RECORD_FOLDER = "pt_verl_closure"
"""One shared record per label: `<results root>/pt_verl_closure/<label>.json`."""

PROBE_SEED_OFFSET = 10_000
"""The post-sync probe requests use seeds far from the frozen rollouts' seeds."""


class GroupLog:
    """Appends timestamped lines to `<label>_<group>.log` (UTF-8) and passes each to `echo` when given."""

    def __init__(self, path: Path, echo: Callable[[str], None] | None = None):
        self.path = path
        self.echo = echo
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(path, "a", encoding="utf-8")

    def __call__(self, line: str) -> None:
        stamp = _dt.datetime.now().strftime("%H:%M:%S.%f")[:-3]
        self._handle.write(f"{stamp} {line}\n")
        self._handle.flush()
        if self.echo is not None:
            self.echo(f"[{self.path.stem}] {line}")

    def failed(self, group: str, error: BaseException) -> None:
        self(f"group {group} FAILED: {type(error).__name__}: {error}")
        for line in traceback.format_exception(error):
            for part in line.rstrip().splitlines():
                self(part)

    def close(self) -> None:
        self._handle.close()


def create_cuda_context(device: str) -> None:
    """Create this process's CUDA context now (one small allocation), with torch's kernels for it."""
    import torch

    torch.zeros(1, device=device).add_(1)
    torch.cuda.synchronize(device)


def read_memory_baseline(gpu_reader: Callable[[], float] | None, *,
                         create_context: Callable[[], None] | None) -> tuple[float | None, bool]:
    """The device memory the groups must come back to: read after this process's own CUDA context
    exists (when it uses CUDA), since a context created later (about 0.5 GiB, plus lazily loaded
    kernels) would stay above a baseline read before it. Returns (MiB or None, context included)."""
    if gpu_reader is None:
        return None, False
    if create_context is not None:
        create_context()
    return float(gpu_reader()), create_context is not None


def _settling(reader, description: dict, config: ClosureConfig) -> dict:
    return {"measured": reader is not None, "source": description.get("gpu_source"),
            "device_uuid": description.get("gpu_device_uuid"), "margin_mb": config.memory_settle_margin_mb,
            "timeout_s": config.memory_settle_timeout_s, "baseline_mb": None,
            "baseline_includes_own_cuda_context": False, "before_group": {}}


def run_experiment(config: ClosureConfig, *, sampler: ResourceSampler | None = None,
                   clock: Callable[[], float] = time.monotonic, echo: Callable[[str], None] | None = None,
                   gpu_reader: Callable[[], float] | None = None, sleep: Callable[[float], None] = time.sleep,
                   sink: RecordSink | None = None) -> dict:
    """Run both groups and write the record once; returns `{path, sha256, record, groups, settings,
    overrides, update_comparison}` (`groups` holds the raw per-group measurements on the absolute clock).

    Before each group after the first, device memory must come back within the margin of the
    baseline read before the first group (NVML, with a timeout); what happened is recorded, and a
    group that starts unsettled fails a check. `gpu_reader` replaces the device reader (tests).

    Raises RecordExistsError before any work when the output exists, ConfigError on invalid input;
    a failed stage raises after logging to `<label>_<group>.log`, and no record is written. The
    record goes through `sink` (the contract's RecordSink of the run; default: one rooted at the
    output's folder).
    """
    validate_config(config)
    output = Path(config.output)
    if output.exists():
        raise RecordExistsError(f"record {output} already exists; records are write-once, use a new run label.")
    if sink is None:
        sink = RecordSink(run_mode=config.run_mode, run_label=config.run_label, results_root=output.parent,
                          chapter_id=CHAPTERS[0], slug=RECORD_FOLDER)
    backend = get_backend(config.backend)
    pool = build_task_pool(config.task_seed)
    tasks = {task.task_id: task for task in pool.tasks}
    use_torch = backend.parent_uses_cuda and config.device == "cuda"
    if gpu_reader is None:
        gpu_reader, gpu_description = gpu_memory_reader(config.device, use_torch=use_torch)
    else:
        gpu_description = {"gpu_source": "injected"}
    settling = _settling(gpu_reader, gpu_description, config)
    output.parent.mkdir(parents=True, exist_ok=True)
    groups: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        workspace = Path(tempfile.mkdtemp(prefix=f".{config.run_label}_work_", dir=output.parent))
        stack.callback(shutil.rmtree, workspace)
        runtime_details = stack.enter_context(backend.runtime_context(config))
        model = backend.prepare(config, workspace)
        tokenizer = model.tokenizer
        requests = build_requests(pool, tokenizer.prompt_ids, config.samples_per_task, config.sampling_seed)
        probe_requests = build_requests(pool, tokenizer.prompt_ids, 1, config.sampling_seed + PROBE_SEED_OFFSET,
                                        tag="probe")
        examples = build_examples(pool, tokenizer.prompt_ids, tokenizer.answer_ids)
        settings = {group: group_settings(config, group) for group in GROUPS}
        overrides = {group: backend.group_overrides(config, group, model) for group in GROUPS}
        overrides = None if any(value is None for value in overrides.values()) else overrides
        if sampler is None:
            sampler = ResourceSampler(interval_s=config.sample_interval_s, device=config.device, clock=clock,
                                      use_torch=use_torch)
        origin = clock()
        sampler.start()
        try:
            frozen = None
            settling["baseline_mb"], settling["baseline_includes_own_cuda_context"] = read_memory_baseline(
                gpu_reader, create_context=(lambda: create_cuda_context(config.device)) if use_torch else None)
            for index, group in enumerate(GROUPS):
                log = GroupLog(config.log_path(group), echo=echo)
                try:
                    if index > 0:
                        settling["before_group"][group] = (
                            wait_for_memory_settle(gpu_reader, baseline_mb=settling["baseline_mb"],
                                                   margin_mb=config.memory_settle_margin_mb,
                                                   timeout_s=config.memory_settle_timeout_s, clock=clock, sleep=sleep)
                            if gpu_reader is not None else {"settled": None, "reason": "no device memory reader"})
                        log(f"device memory before group {group}: {settling['before_group'][group]}")
                    log(f"run {config.run_label}: group {group} (backend {config.backend}, device {config.device}, "
                        f"model {config.model}, free_cache_engine={FREE_CACHE_ENGINE[group]})")
                    groups[group] = backend.execute_group(GroupRun(
                        group=group, config=config, model=model, overrides=None if overrides is None else overrides[group],
                        requests=requests, probe_requests=probe_requests, examples=examples, tasks=tasks,
                        frozen=frozen, clock=clock, log=log, workspace=workspace))
                except BaseException as error:
                    log.failed(group, error)
                    raise
                finally:
                    log.close()
                if group == "release":
                    frozen = groups[group]["frozen_rollouts"]
        finally:
            sampler.stop()
        tensors = {group: groups[group].pop("lora_tensors") for group in GROUPS}
        comparison = compare_lora_updates(tensors["release"], tensors["retain"])
        record = build_record(config=config, pool=pool, groups=groups, settings=settings, overrides=overrides,
                              sampler=sampler, origin=origin, model=model.identity, runtime=runtime_snapshot(),
                              backend_details={**backend.details(config, model), **runtime_details},
                              update_comparison=comparison, memory_settling=settling)
    digest = sink.save(output, record, stage=STAGE).sha256
    return {"path": output, "sha256": digest, "record": record, "groups": groups, "settings": settings,
            "overrides": overrides, "update_comparison": comparison}


def closure_config(plan, output: Path) -> ClosureConfig:
    """The ClosureConfig of a contract plan (tools.experiments.contract): its model, source and device,
    the backend from `plan.options` (default: torch on the CPU, verl on CUDA) and the other options."""
    options = dict(plan.options)
    backend = options.pop("backend", None) or ("torch" if plan.device == "cpu" else "verl")
    known = {"verl_root", "response_token_cap", "attn_implementation", "gpu_memory_utilization"}
    extra = {key: value for key, value in options.items() if key in known and value is not None}
    return ClosureConfig(run_label=plan.label, output=output, backend=backend, model=plan.model,
                         model_source=plan.model_source, device=plan.device, model_cache=plan.model_cache,
                         progress=bool(options.get("progress", False)), **extra)


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> dict | None:
    """The experiment contract's runner: both groups, the record written once under the sink's results root."""
    if not plan.writes:
        if log is not None:
            log(f"verl_closure (dry_run): would run both groups on {plan.model} ({plan.model_source}) on "
                f"{plan.device}; nothing is loaded or written")
        return None
    config = validate_config(closure_config(plan, sink.results_root / RECORD_FOLDER / f"{plan.label}.json"))
    return run_experiment(config, echo=log, sink=sink)
