"""The asset registry `benchmarks/results/REGISTRY.md`, generated from the catalog, the profiles and the records.

Nothing in it is typed by hand: every result cell is read from a JSON record under
`benchmarks/results/`, shown with its evidence level, a link and its sha256. A chapter without a
record says so; cpu_smoke records are listed apart from GPU evidence.
"""

from __future__ import annotations

from pathlib import Path

from tools.core.catalog import Chapter, load_catalog
from tools.core.environment import read_pins
from tools.core.reported import ReportedFigure, load_reported, measured_over_reported
from tools.course.runs.profiles import Profile, load_profiles
from tools.course.runs.result_records import RESULTS_DIR, RecordRef, discover_records
from tools.experiments.registry import all_experiments, device_steps

REGISTRY_PATH = RESULTS_DIR / "REGISTRY.md"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(_cell(value) for value in row) + " |" for row in rows)
    return lines


def _result_cell(chapter: Chapter, records: list[RecordRef]) -> str:
    gpu = [record for record in records if record.is_gpu and chapter.id in record.chapters]
    if gpu:
        return "<br>".join(f"real_gpu · `{r.run_label}` · {r.headline} · {r.link()}" for r in gpu)
    if not chapter.implemented:
        return "planned: not in the course yet; no record"
    gpu_profiles = [profile for profile in chapter.profiles if profile != "PT-CPU"]
    if gpu_profiles:
        return f"implemented; no real_gpu record yet ({', '.join(gpu_profiles)} run pending)"
    return "implemented; CPU exercises graded by nbgrader (no GPU stage)"


def _reported_cell(chapter: Chapter, reported: list[ReportedFigure], records: list[RecordRef]) -> str:
    """What the original course published for this chapter, apart from our measurements; with
    measured ÷ reported where a real_gpu record of ours carries the same quantity."""
    figures = [figure for figure in reported if chapter.id in figure.chapters]
    if not figures:
        return "—"
    gpu = [record for record in records if record.is_gpu and chapter.id in record.chapters]
    parts = []
    for figure in figures:
        text = f"{figure.quantity} {figure.shown()} (`{figure.label}`{', historical' if figure.historical else ''})"
        for record in gpu:
            ratio = measured_over_reported(dict(record.comparable).get(figure.quantity), figure)
            if ratio is not None:
                text += f"; ours ÷ reported = {ratio:.2f} (`{record.run_label}`)"
        parts.append(text)
    return "<br>".join(parts)


def profile_state(profile: Profile, chapters: list[Chapter], records: list[RecordRef],
                  reported: list[ReportedFigure]) -> str:
    """Derived from records, never typed: verified only once a real_gpu record exists."""
    served = [chapter.id for chapter in chapters if profile.name in chapter.profiles]
    if not profile.requires_cuda:
        return "verified on CPU by every `make test` (cpu_smoke)"
    gpu = [record for record in records if record.is_gpu and set(served) & set(record.chapters)]
    if gpu:
        state = "verified by real_gpu record(s) " + ", ".join(f"`{record.run_label}`" for record in gpu)
    else:
        state = "not yet verified here (no real_gpu record)"
    if any(set(served) & set(figure.chapters) for figure in reported):
        state += "; the original course reported runs (see the reported column)"
    return state


def _chapter_name(chapter: Chapter, root: Path) -> str:
    name = f"{chapter.id} · {chapter.title_zh} ({chapter.title_en})"
    if chapter.implemented and chapter.notebook:
        return f"[{name}](../../{chapter.notebook})"
    return name


def _shared_records(records: list[RecordRef]) -> list[str]:
    """One section per registered experiment whose record several chapters read (its `shared_by`)."""
    lines = []
    for experiment in all_experiments().values():
        if not experiment.shared_by:
            continue
        lines += ["", f"## Shared record · {experiment.name}", "", experiment.shared_by, ""]
        shared = [r for r in records if r.is_gpu and set(experiment.chapters) <= set(r.chapters)]
        if shared:
            lines += _table(["label", "evidence", "result", "record"],
                            [[f"`{r.run_label}`", r.evidence_level, r.headline, r.link()] for r in shared])
        else:
            lines.append(f"No real_gpu record of `{experiment.name}` yet; cpu_smoke runs "
                         f"(`python -m tools.experiments run {experiment.name} --run-mode cpu_smoke ...`) prove the "
                         "code path only.")
    return lines


def _experiments_section() -> list[str]:
    """Every registered experiment (tools/experiments/<name>/experiment.py) and its GPU-batch steps."""
    experiments = all_experiments()
    lines = ["", "## Experiments and the GPU batch", "",
             "Read from the experiment registry (`python -m tools.experiments list`); the GPU batch "
             "(`benchmarks/gpu/run_device_batch.sh`) runs the steps in this order.", ""]
    lines += _table(["experiment", "chapters", "stages", "run modes"],
                    [[f"`{e.name}`", ", ".join(e.chapters), ", ".join(e.stages), ", ".join(e.run_modes)]
                     for e in experiments.values()])
    lines += [""]
    lines += _table(["GPU batch step", "experiment", "stage", "chapter", "at most (s)"],
                    [[f"`{s.name}`", s.experiment, s.stage or "—", s.chapter or "—", f"{s.max_s:g}"]
                     for s in device_steps(experiments)])
    return lines


def render_registry(root: Path) -> str:
    """The full registry text."""
    chapters = load_catalog(root)
    profiles = load_profiles(root)
    records = discover_records(root)
    reported = load_reported(root)
    lines = [
        "# Asset registry · 后训练实验资产表",
        "",
        "Generated by `python -m tools.course registry` from `notebooks/catalog.toml`, `environment/profiles.toml`",
        "and the JSON records under `benchmarks/results/`. Do not edit by hand; CI runs `registry --check`.",
        "Every result cell is read from a record and shows its evidence level, a link and its sha256.",
        "The reported column holds what the original course published (RTX 5070 Ti, Qwen2.5-0.5B-Instruct;",
        "`benchmarks/reported/original_course.toml`, evidence level `reported`): shown for comparison only,",
        "never re-measured here and never an input to a decision. Where one of our real_gpu records carries the",
        "same quantity, the cell adds ours ÷ reported.",
        "",
        "## Environments",
        "",
    ]
    rows = []
    for profile in profiles.values():
        served = [c.id for c in chapters if profile.name in c.profiles]
        rows.append([
            profile.name + (f" ({', '.join(profile.aliases)})" if profile.aliases else ""),
            profile.title, ", ".join(served) or "—", profile.scope,
            "—" if not profile.requires_cuda else f"{profile.min_gpu_memory_gib:g} GiB" + (
                f" × {profile.min_gpus} GPUs" if profile.min_gpus > 1 else ""),
            profile_state(profile, chapters, records, reported), f"`{profile.requirements}`",
        ])
    lines += _table(["profile", "title", "chapters", "scope", "min GPU memory", "state", "install"], rows)
    lines += ["", "A passing preflight (`python -m tools.course preflight --profile P`) means the environment is ready,",
              "not that an experiment passed.", "", "## Mechanism experiments", ""]
    mechanism = [c for c in chapters if c.kind == "mechanism"]
    lines += _table(
        ["branch", "chapter", "profile and fixed inputs", "compared variable or check", "status",
         "measured here (real_gpu records)", "reported by the original course (not re-measured here)"],
        [[c.branch, _chapter_name(c, root), f"{', '.join(c.profiles)}; {c.fixed_inputs}", c.compared_variable,
          c.status, _result_cell(c, records), _reported_cell(c, reported, records)] for c in mechanism])
    lines += _shared_records(records)
    lines += _experiments_section()
    lines += ["", "## Projects", ""]
    projects = [c for c in chapters if c.kind in ("project", "neighbour")]
    lines += _table(
        ["order", "project", "fixed inputs and prerequisites", "verified object", "status",
         "measured here (real_gpu records)", "reported by the original course (not re-measured here)"],
        [[c.extra.get("order", "neighbour" if c.kind == "neighbour" else ""), _chapter_name(c, root),
          f"{c.fixed_inputs}; after {', '.join(c.prerequisites) or '—'}", c.compared_variable, c.status,
          _result_cell(c, records), _reported_cell(c, reported, records)] for c in projects])
    lines += ["", "## CPU smoke evidence (not GPU results)", ""]
    smoke = [r for r in records if r.evidence_level == "cpu_smoke"]
    if smoke:
        lines += _table(["chapter", "label", "stage", "result", "record"],
                        [[", ".join(r.chapters), f"`{r.run_label}`", r.stage, r.headline, r.link()] for r in smoke])
    else:
        lines.append("None committed: cpu_smoke records go to the git-ignored `build/results/` by default.")
    other = [r for r in records if r.evidence_level not in ("real_gpu", "cpu_smoke")]
    if other:
        lines += ["", "Other committed files with a schema (inputs, manifests):", ""]
        lines += _table(["schema", "label", "record"], [[r.schema_version, f"`{r.run_label}`", r.link()] for r in other])
    lines += ["", "## Versions and reproduction", ""]
    cpu_pins, verl_pins = read_pins(root / "requirements-cpu.txt"), read_pins(root / "requirements-verl.txt")
    lines += _table(["profile", "torch", "transformers", "peft", "verl", "vllm"], [
        ["PT-CPU", cpu_pins.get("torch", "—"), cpu_pins.get("transformers", "—"), cpu_pins.get("peft", "—"), "—", "—"],
        ["PT-VERL-CUDA", verl_pins.get("torch", "—"), verl_pins.get("transformers", "—"), verl_pins.get("peft", "—"),
         verl_pins.get("verl", "—"), verl_pins.get("vllm", "—")],
    ])
    lines += [
        "",
        "- A reproduction uses a new unique label; run the notebook's preflight (`dry_run`) first, then the real stage.",
        "- Records are write-once: a label already used is refused; change the label, never the file.",
        "- Changing the model, the inputs or the training dose keeps the old record and states the new comparison scope.",
        "- A missing measurement is `null`; an OOM or a failed stage is a recorded status.",
        "- The shared verl experiment is run by the lifecycle page; the system page reads the same record.",
        "",
        f"Records indexed: {len(records)} ({len([r for r in records if r.is_gpu])} real_gpu, {len(smoke)} cpu_smoke).",
        "",
    ]
    return "\n".join(lines)


def write_registry(root: Path, *, check: bool = False) -> bool:
    """Write the registry (or with `check` only compare); return True if the file was stale."""
    target = root / REGISTRY_PATH
    text = render_registry(root)
    current = target.read_text(encoding="utf-8") if target.is_file() else None
    if current == text:
        return False
    if not check:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return True
