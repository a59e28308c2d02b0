"""What the four SFT project pages (64, 63, 65, 62) share: the upstream check of the setup cell, the
experiment plan of Step 5, the table of a manifest's gates and the sentences every page prints (which
functions ran, which numerics profile the figures came from). Each page's own pictures and checks
live in its own module; nothing here prints."""

from __future__ import annotations

from typing import Mapping

from tools.chapters import lesson_text
from tools.chapters.context import ChapterContext
from tools.core.handoff import Upstream
from tools.experiments.contract import Mechanism, Plan


def upstream_options(upstream_label: str | None, upstream_sha256) -> dict:
    """The plan options that carry the notebook's UPSTREAM_LABEL and UPSTREAM_SHA256."""
    return {"upstream_label": upstream_label, "upstream_sha256": upstream_sha256}


def require_upstream(run: ChapterContext, upstream_id: str, schema_version: str, *, upstream_label: str | None,
                     upstream_sha256, decisions=("accept",)) -> Upstream | None:
    """The setup cell's check of the upstream manifest (None in dry_run, which reads nothing): a promise
    (required in real_gpu), missing, promised sha256, seal, run mode and decision are checked before any
    of the page's work."""
    if not run.writes_records:
        return None
    from tools.experiments.sft_chain.manifests import read_upstream, require_promise

    options = upstream_options(upstream_label, upstream_sha256)
    require_promise(run.run_mode, options, (upstream_id,), run.chapter_id)
    return read_upstream(run.results_root, upstream_id=upstream_id, reader_id=run.chapter_id, run_mode=run.run_mode,
                         label=run.run_label, options=options, schema_version=schema_version, decisions=decisions)


def plan_for(experiment: str, run: ChapterContext, results_dir, model_source: str, *,
             upstream_label: str | None = None, upstream_sha256=None, mechanism: Mechanism | None = None,
             **options) -> Plan:
    """Step 5's plan: the page's experiment with the run parameters, the upstream options, the page's
    own options and the functions Step 5 runs (`tools.chapters.mechanism.step5_mechanism`)."""
    return Plan(experiment=experiment, chapter=run.chapter_id, run_mode=run.run_mode, label=run.run_label,
                results_dir=results_dir, model_source=model_source,
                options={**upstream_options(upstream_label, upstream_sha256), **options},
                mechanism=mechanism or Mechanism())


def _shown(value) -> str:
    if isinstance(value, str) and len(value) == 64:
        return f"{value[:12]}..."
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def gates_table(gates: list[Mapping]) -> str:
    """A manifest's gates: name, threshold, measured value, passed."""
    lines = [f"{'gate':<30}{'threshold':>26}{'measured':>26}  passed"]
    lines += [f"{gate['name']:<30}{_shown(gate['threshold']):>26}{_shown(gate['measured']):>26}  {gate['passed']}"
              for gate in gates]
    return "\n".join(lines)


def manifest_lines(record: Mapping) -> list[str]:
    """The head of any project manifest: evidence, decision, next action, inputs."""
    decision = record.get("decision", {})
    lines = [f"evidence level {record.get('evidence_level')}; decision {decision.get('decision')} "
             f"(reasons {decision.get('reasons')}); next: {record.get('next_action')}"]
    lines += [f"input {entry['role']}: {entry['path']} sha256 {entry['sha256'][:12]}"
              for entry in record.get("inputs", [])]
    return lines


def mechanism_line(record: Mapping) -> str:
    """Which gate functions the stage ran (the learner's, the reference, the package's), from a record."""
    functions = ", ".join(f"{name} ({entry['source']})" for name, entry in record.get("mechanism", {}).items())
    return lesson_text.text("sft_chain.mechanism", functions=functions)


def profile_line(record: Mapping) -> str:
    """Which numerics profile and which lab weights a record's figures came from, and what another machine sees."""
    numerics = record.get("numerics") or {}
    settings = numerics.get("cpu_numerics") or {}
    pinned = settings.get("aten_cpu_capability") == "avx2" and settings.get("mkl_cbwr") == "AVX2"
    weights = numerics.get("lab_models") or "committed"
    return lesson_text.text("sft_chain.profile", profile="pinned_avx2" if pinned else "generic",
                            capability=settings.get("torch_cpu_capability"),
                            weights=lesson_text.text("sft_chain.weights_committed") if weights == "committed"
                            else lesson_text.text("sft_chain.weights_built"))
