"""Measure a training step: time, throughput, last loss and CUDA memory; OOM as a status.

`measure_training_run` times any zero-argument `train_step` that returns the step's loss. On CUDA
it records both peaks of PyTorch's caching allocator, allocated (tensors) and reserved (what the
allocator holds from the driver, the figure an out-of-memory error is about), and the device
memory used outside the allocator (the CUDA context, library handles, other processes).
`run_with_oom_guard` turns an out-of-memory error, of the device or of host memory (a failed pinned
allocation), into a record and frees memory before the next candidate runs. `aggregate_runs` folds
repeated runs of one candidate into one record. Measurements that cannot be taken (device memory on
a CPU) are None, never 0.
"""

from __future__ import annotations

import gc
import math
import time
from typing import Any, Callable, Iterable, Mapping

from tools.errors import ConfigError

MIB = 2**20

RUN_STATUSES = ("ok", "oom", "failed")
AGGREGATE_STATUSES = ("ok", "partial_oom", "partial_failed", "oom", "failed")
MEAN_KEYS = ("step_time_ms", "samples_per_s", "loss", "eval_loss", "peak_memory_mb", "peak_reserved_mb",
             "device_overhead_mb")
OOM_KINDS = ("device_memory", "host_memory")
RANGE_KEYS = {
    "step_time_range_ms": "step_time_ms",
    "throughput_range_samples_per_s": "samples_per_s",
    "peak_memory_range_mb": "peak_memory_mb",
    "peak_reserved_range_mb": "peak_reserved_mb",
}


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _is_cuda(torch_module: Any, device: Any) -> bool:
    return torch_module.device(device).type == "cuda"


def _synchronize(torch_module: Any, device: Any) -> None:
    if _is_cuda(torch_module, device):
        torch_module.cuda.synchronize(device)


def measure_training_run(train_step: Callable[[], float], *, torch_module: Any, device: Any,
                         batch_size: int, warmup: int, iters: int) -> dict:
    """Run `warmup` untimed then `iters` timed calls of `train_step`; return the measurement.

    On CUDA the peak allocated / reserved memory is read with `torch.cuda.max_memory_*` after a
    reset taken once the warm-up is done, so it covers the steady-state timed steps only;
    `device_overhead_mb` is the driver's used memory minus what the allocator reserves, read after
    the timed steps (the CUDA context, library workspaces outside the allocator, other processes),
    and `device_total_mb` the device's size. On any other device all four are None. A non-finite
    last loss makes the run `failed`.
    """
    _require_int("batch_size", batch_size, 1)
    _require_int("warmup", warmup, 0)
    _require_int("iters", iters, 1)
    cuda = _is_cuda(torch_module, device)
    for _ in range(warmup):
        train_step()
    _synchronize(torch_module, device)
    if cuda:
        torch_module.cuda.reset_peak_memory_stats(device)
    loss = None
    started = time.perf_counter()
    for _ in range(iters):
        loss = train_step()
    _synchronize(torch_module, device)
    elapsed = time.perf_counter() - started
    result = {
        "status": "ok",
        "device": str(torch_module.device(device)),
        "batch_size": batch_size,
        "warmup": warmup,
        "iters": iters,
        "step_time_ms": elapsed * 1000.0 / iters,
        "samples_per_s": batch_size * iters / elapsed if elapsed > 0 else None,
        "loss": float(loss),
        "peak_memory_mb": torch_module.cuda.max_memory_allocated(device) / MIB if cuda else None,
        "peak_reserved_mb": torch_module.cuda.max_memory_reserved(device) / MIB if cuda else None,
        **_outside_allocator(torch_module, device, cuda),
    }
    if not math.isfinite(result["loss"]):
        result.update(status="failed", error=f"non-finite training loss {result['loss']!r}", loss=None)
    return result


def _outside_allocator(torch_module: Any, device: Any, cuda: bool) -> dict:
    if not cuda:
        return {"device_overhead_mb": None, "device_total_mb": None}
    free, total = torch_module.cuda.mem_get_info(device)
    reserved = torch_module.cuda.memory_reserved(device)
    return {"device_overhead_mb": max(total - free - reserved, 0) / MIB, "device_total_mb": total / MIB}


def allocator_outside_mb(torch_module: Any, device: Any) -> dict:
    """`{"device_overhead_mb", "device_total_mb"}` as `measure_training_run` reports them (None off CUDA)."""
    return _outside_allocator(torch_module, device, _is_cuda(torch_module, device))


def device_memory_mb(torch_module: Any, device: Any) -> dict | None:
    """`{"free_mb", "total_mb"}` of a CUDA device (driver view, all processes); None on other devices."""
    if not _is_cuda(torch_module, device):
        return None
    free, total = torch_module.cuda.mem_get_info(device)
    return {"free_mb": free / MIB, "total_mb": total / MIB}


def free_device_memory(torch_module: Any) -> None:
    """On a CUDA host: collect garbage (tensors held in reference cycles), then return the allocator's
    cached blocks to the driver. On a CPU-only host nothing: there is no device memory to give back,
    and a full collection there costs more than the training step it follows."""
    if torch_module.cuda.is_available():
        gc.collect()
        torch_module.cuda.empty_cache()


def out_of_memory_error(torch_module: Any) -> type:
    """The exception class torch raises when the device allocator runs out of memory."""
    error = getattr(torch_module, "OutOfMemoryError", None) or getattr(torch_module.cuda, "OutOfMemoryError", None)
    if error is None:
        raise ConfigError("this torch build exposes no OutOfMemoryError; upgrade torch to the pinned version.")
    return error


def run_with_oom_guard(run: Callable[[], Mapping[str, Any]], *, torch_module: Any,
                       context: Mapping[str, Any] | None = None) -> dict:
    """Call `run()`; an out-of-memory error becomes
    `{**context, "status": "oom", "oom_kind": "device_memory" | "host_memory", "error": <first line>}`.

    The device's OutOfMemoryError is `device_memory`; a MemoryError (host memory: a pinned or
    pageable buffer the offload hook could not allocate) is `host_memory`. Memory is freed after the
    exception has left scope (its traceback holds the frames that own the model's tensors), so the
    next candidate starts from a clean allocator. Other errors propagate.
    """
    oom_type = out_of_memory_error(torch_module)
    message, kind = None, None
    try:
        return dict(run())
    except oom_type as error:
        message, kind = _first_line(error), "device_memory"
    except MemoryError as error:
        message, kind = _first_line(error), "host_memory"
    free_device_memory(torch_module)
    return {**(context or {}), "status": "oom", "oom_kind": kind, "error": message}


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _mean(values: list) -> float | None:
    if not values or any(value is None for value in values):
        return None
    return sum(values) / len(values)


def _spread(values: list) -> float | None:
    if not values or any(value is None for value in values):
        return None
    return max(values) - min(values)


def _aggregate_status(statuses: list[str]) -> str:
    ok = statuses.count("ok")
    if ok == len(statuses):
        return "ok"
    others = {status for status in statuses if status != "ok"}
    if ok:
        return "partial_oom" if others == {"oom"} else "partial_failed"
    return "oom" if others == {"oom"} else "failed"


def aggregate_runs(name: str, runs: Iterable[Mapping[str, Any]]) -> dict:
    """Fold repeated runs of one candidate: means and ranges over successful runs, run counts, status.

    Status: `ok` (all runs ok), `partial_oom` / `partial_failed` (some ok), `oom` / `failed` (none).
    `execution_path_verified` is True only if there is a successful run and every successful run
    earned it. Fields that all successful runs share (seq_len, optimizer, ...) are kept.
    """
    runs = [dict(run) for run in runs]
    if not runs:
        raise ConfigError(f"candidate {name!r} has no runs to aggregate")
    for run in runs:
        if run.get("status") not in RUN_STATUSES:
            raise ConfigError(f"candidate {name!r} has a run with unknown status {run.get('status')!r}")
    successful = [run for run in runs if run["status"] == "ok"]
    record: dict[str, Any] = {"name": name}
    if successful:
        shared = set(successful[0]).difference(MEAN_KEYS, ("runs", "status", "error"))
        for key in sorted(shared):
            if all(run.get(key) == successful[0][key] for run in successful):
                record[key] = successful[0][key]
    record["name"] = name
    record["status"] = _aggregate_status([run["status"] for run in runs])
    record["repeat_count"] = len(runs)
    record["successful_runs"] = len(successful)
    record["oom_runs"] = sum(run["status"] == "oom" for run in runs)
    record["oom_kinds"] = sorted({run["oom_kind"] for run in runs if run["status"] == "oom" and run.get("oom_kind")})
    record["failed_runs"] = sum(run["status"] == "failed" for run in runs)
    for key in MEAN_KEYS:
        record[key] = _mean([run.get(key) for run in successful])
    record["stability"] = None if not successful else {
        range_key: _spread([run.get(key) for run in successful]) for range_key, key in RANGE_KEYS.items()
    }
    flags = [run.get("execution_path_verified") for run in successful]
    record["execution_path_verified"] = bool(flags) and all(flag is True for flag in flags)
    errors = [run.get("error") for run in runs if run["status"] != "ok" and run.get("error")]
    record["errors"] = errors
    record["runs"] = runs
    return record


def run_repeated(name: str, run: Callable[[], Mapping[str, Any]], *, repeats: int, torch_module: Any,
                 context: Mapping[str, Any] | None = None,
                 first_run: Mapping[str, Any] | None = None) -> dict:
    """Run a candidate `repeats` times under the OOM guard (reusing `first_run` if given) and aggregate."""
    _require_int("repeats", repeats, 1)
    runs = [] if first_run is None else [dict(first_run)]
    while len(runs) < repeats:
        runs.append(run_with_oom_guard(run, torch_module=torch_module, context={"name": name, **(context or {})}))
        free_device_memory(torch_module)
    return aggregate_runs(name, runs)
