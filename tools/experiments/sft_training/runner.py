"""Run a chapter's SFT variants one after another in one process; one write-once record per variant.

For each variant: load the base model (the tiny offline model in cpu_smoke; Qwen2.5-0.5B-Instruct
from the local cache, or its architecture with random weights, in real_gpu), attach the adapter
through peft, hash base and adapter tensors, train, evaluate, hash again, and write the record. An
out-of-memory error becomes a record with status `oom`; any other failure a record with status
`failed` and the error, and the next variant still runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from tools.core.catalog import find_chapter
from tools.core.environment import runtime_snapshot
from tools.core.paths import chapter_record_path
from tools.core.records import record_header, save_json_record_once
from tools.errors import ConfigError, RecordExistsError
from tools.experiments.sft_training.adapters import attach, hash_report, tensor_hashes, trainable_parameters
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import stage_split
from tools.experiments.sft_training.plans import Plan, plan_for, stage_config_for
from tools.experiments.sft_training.training import train_variant
from tools.measure.training import free_device_memory, out_of_memory_error
from tools.models.loading import load_causal_lm, model_identity, resolve_model

SCHEMA = "sft-training-variant/v1"
GIB = 2 ** 30


def model_for(config: StageConfig) -> Path:
    """The base model's folder: built offline for "tiny", from the cache or random_init otherwise."""
    return resolve_model(config.model_id, config.model_source)


def record_path(config: StageConfig, slug: str, variant: str) -> Path:
    return chapter_record_path(config.results_root, slug, f"sft_{variant}", config.run_label)


def check_hooks(variants: list[AdapterSpec], prepare: Callable | None, collate: Callable | None) -> None:
    """A quantised base needs the chapter's `prepare`, a packed variant its `collate`: refused before any work."""
    for spec in variants:
        if spec.base_quantisation is not None and prepare is None:
            raise ConfigError(f"variant {spec.name} asks for a {spec.base_quantisation} base: its chapter plan must "
                              "provide the `prepare` hook that quantises it")
        if spec.batching != "padded" and collate is None:
            raise ConfigError(f"variant {spec.name} packs its batches: its chapter plan must provide `collate`")


def planned_paths(config: StageConfig, variants: list[AdapterSpec]) -> dict[str, Path]:
    """Every record this run will write; refuses before any work when one exists or a name repeats."""
    names = [spec.name for spec in variants]
    if not variants or len(set(names)) != len(names):
        raise ConfigError(f"variants must be a non-empty list of distinct names, got {names}")
    slug = find_chapter(config.chapter).slug
    paths = {spec.name: record_path(config, slug, spec.name) for spec in variants}
    used = [path for path in paths.values() if path.exists()]
    if used:
        raise RecordExistsError(f"{used[0]} already exists: RUN_LABEL {config.run_label!r} was used before.")
    return paths


def run_variant(config: StageConfig, spec: AdapterSpec, *, prepare: Callable | None = None,
                measure: Callable | None = None, collate: Callable | None = None,
                accumulate: Callable | None = None, evaluate: Callable | None = None,
                attached: Callable | None = None) -> dict:
    """Train and measure one variant; returns the body of its record (status ok / oom / failed).

    `prepare(model, spec)` may change the base before the adapter is attached (e.g. quantise it);
    `attached(model, spec)` sees the adapter-wrapped model before its first step (e.g. keeps a snapshot);
    `measure(model, spec, split, config, tokenizer)` adds the chapter's own measurements after
    training (e.g. merge equivalence) under `chapter_measurements`; `collate`, `accumulate` and
    `evaluate` build the micro-batches, compute a step's gradient and evaluate (see
    training.train_variant)."""
    folder = model_for(config)
    model, tokenizer = load_causal_lm(folder, dtype="float32", device=config.device)
    split = stage_split(tokenizer, config, spec.max_length or config.max_length)
    body = {"variant": spec.public(), "model": model_identity(folder), "data": split.manifest()}
    oom = out_of_memory_error(torch)
    try:
        if prepare is not None:
            model = prepare(model, spec)
        model = attach(model, spec, config.seed)
        if attached is not None:
            attached(model, spec)
        before = tensor_hashes(model)
        body["parameters"] = trainable_parameters(model)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        body["measurements"] = train_variant(model, spec, split, config, pad_id, collate, accumulate=accumulate,
                                             evaluate_with=evaluate)
        body["hashes"] = hash_report(before, tensor_hashes(model))
        if measure is not None:
            body["chapter_measurements"] = measure(model, spec, split, config, tokenizer)
            if isinstance(body["chapter_measurements"], dict) and "decision" in body["chapter_measurements"]:
                body["decision"] = body["chapter_measurements"]["decision"]  # what the registry shows
        body["status"] = body["measurements"]["status"]
    except oom as error:
        body.update(status="oom", error=str(error).strip().splitlines()[0] if str(error).strip() else "out of memory")
    except Exception as error:  # recorded per variant: a failed variant is evidence too; the next one still runs
        body.update(status="failed", error=f"{type(error).__name__}: {error}")
    finally:
        model = None
        free_device_memory(torch)
    peak = (body.get("measurements") or {}).get("peak_allocated_mib")
    body["comparable"] = {} if peak is None else {"peak_allocated_gib": peak * 2 ** 20 / GIB}
    return body


def run_stage(config: StageConfig, variants: list[AdapterSpec], *, prepare: Callable | None = None,
              measure: Callable | None = None, collate: Callable | None = None, accumulate: Callable | None = None,
              evaluate: Callable | None = None, attached: Callable | None = None,
              mechanism: dict | None = None) -> list[dict]:
    """Run every variant in order and write its record; returns `{variant, path, sha256, status}` per variant.
    `mechanism` (a bound plan's `described`) goes into every record: which chapter functions ran."""
    check_hooks(variants, prepare, collate)
    paths = planned_paths(config, variants)
    written = []
    threads = torch.get_num_threads()
    if config.device == "cpu":
        torch.set_num_threads(1)  # the tiny model gains nothing from a second thread on a shared 2-core machine
    try:
        for spec in variants:
            body = run_variant(config, spec, prepare=prepare, measure=measure, collate=collate,
                               accumulate=accumulate, evaluate=evaluate, attached=attached)
            record = {**record_header(schema_version=SCHEMA, chapter=config.chapter, stage=f"sft_{spec.name}",
                                      run_mode=config.run_mode, run_label=config.run_label),
                      "config": config.public(), **body, "mechanism": mechanism, "cpu_threads": torch.get_num_threads(),
                      "runtime": runtime_snapshot()}
            digest = save_json_record_once(paths[spec.name], record)
            written.append({"variant": spec.name, "path": paths[spec.name], "sha256": digest, "status": body["status"]})
    finally:
        torch.set_num_threads(threads)
    return written


def run_bound(config: StageConfig, plan: Plan, names: tuple[str, ...] = ()) -> list[dict]:
    """Run a bound chapter plan (Plan.bound) with `config`: every variant, or those named in `names`."""
    variants = [spec for spec in plan.variants(config.run_mode) if not names or spec.name in names]
    return run_stage(config, variants, prepare=plan.prepare, measure=plan.measure, collate=plan.collate,
                     accumulate=plan.accumulate, evaluate=plan.evaluate, attached=plan.attached,
                     mechanism=plan.described)


def run_plan(config: StageConfig, mechanism=None) -> list[dict]:
    """Run the plan of `config.chapter` with `config` and the chapter functions of `mechanism` (None:
    the package's copies); returns run_stage's list (one item per variant)."""
    return run_bound(config, plan_for(config.chapter).bound(mechanism))


def run(plan, sink, *, log=None) -> list[dict]:
    """The experiment contract's runner (tools.experiments.contract): the chapter's plan with the
    plan's run parameters; each variant's record is kept by the sink. `plan.variants` selects some."""
    plan_for(plan.chapter).check_mechanism(plan.mechanism)  # before any work, dry_run included
    if not plan.writes:
        if log is not None:
            log(f"sft_training (dry_run): chapter {plan.chapter} would train {', '.join(plan.variants) or 'every variant'}"
                f" of its plan on {plan.model} ({plan.model_source}); nothing is loaded or written")
        return []
    chapter_plan = plan_for(plan.chapter).bound(plan.mechanism)
    config = stage_config_for(plan.chapter, plan.run_mode, plan.label, sink.results_root,
                              model_source=plan.model_source, model_id=plan.model, device=plan.device)
    written = run_bound(config, chapter_plan, tuple(plan.variants))
    for item in written:
        sink.adopt(item["path"], stage=f"sft_{item['variant']}")
    return written
