"""Where the course lives: the project root, and the default results folder of each run mode."""

from __future__ import annotations

import os
from pathlib import Path

from tools.core.runs import validate_run_mode
from tools.errors import ConfigError

PROJECT_ROOT_ENV = "COURSE_PROJECT_ROOT"
"""Environment variable that overrides project-root discovery (e.g. on a cloud checkout)."""

ROOT_MARKERS = ("tools/project_runtime.py", "notebooks")

DEFAULT_RESULTS_DIRS = {"cpu_smoke": Path("build/results"), "real_gpu": Path("benchmarks/results")}


def _is_project_root(path: Path) -> bool:
    return all((path / marker).exists() for marker in ROOT_MARKERS)


def _package_checkout_root() -> Path | None:
    """The checkout this `tools` package was imported from (editable install), if it is one."""
    candidate = Path(__file__).resolve().parents[2]  # tools/core/paths.py -> the checkout
    return candidate if _is_project_root(candidate) else None


def resolve_project_root(start: str | os.PathLike | None = None) -> Path:
    """Return the repository root.

    Order: the `COURSE_PROJECT_ROOT` environment variable, then `start` (default: the current
    directory, which is the notebook's folder under JupyterLab and papermill) and its parents,
    then the checkout the `tools` package was imported from (so a kernel started in a temporary
    folder, e.g. by nbgrader's autograde, still finds the course).
    """
    configured = os.environ.get(PROJECT_ROOT_ENV)
    if configured:
        root = Path(configured).expanduser().resolve()
        if not _is_project_root(root):
            raise ConfigError(
                f"{PROJECT_ROOT_ENV}={configured!r} is not the course repository "
                f"(expected {', '.join(ROOT_MARKERS)} inside it); fix or unset the variable."
            )
        return root
    here = Path(start if start is not None else Path.cwd()).expanduser().resolve()
    for candidate in (here, *here.parents):
        if _is_project_root(candidate):
            return candidate
    package_root = _package_checkout_root()
    if package_root is not None:
        return package_root
    raise ConfigError(
        f"cannot find the course repository above {here}; open the notebook from the repository "
        f"or set {PROJECT_ROOT_ENV}=/path/to/the/repository."
    )


def default_results_dir(run_mode: str, root: Path | None = None) -> Path | None:
    """Where records of `run_mode` go: build/results (cpu_smoke), benchmarks/results (real_gpu)."""
    relative = DEFAULT_RESULTS_DIRS.get(validate_run_mode(run_mode))
    if relative is None:
        return None
    return (root or resolve_project_root()) / relative


def chapter_record_path(results_root: Path, slug: str, stage: str, run_label: str) -> Path:
    """`<results root>/<slug>/<slug>_<stage>_<label>.json`: where a chapter stage's record lives."""
    return Path(results_root) / slug / f"{slug}_{stage}_{run_label}.json"


def results_root_for(run_mode: str, results_dir: str | os.PathLike | None, root: Path | None = None) -> Path | None:
    """The results folder of a run: `results_dir` (relative to the project root when not absolute),
    else the default of the run mode; None for dry_run, which writes nothing."""
    if validate_run_mode(run_mode) == "dry_run":
        return None
    if results_dir:
        folder = Path(results_dir).expanduser()
        return folder if folder.is_absolute() else (root or resolve_project_root()) / folder
    return default_results_dir(run_mode, root)
