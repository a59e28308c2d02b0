"""The learner's own functions in Step 5: kept before the reference solution redefines them.

A chapter notebook defines each exercise function twice: the learner's version in the TODO cell, and the
reference after STOP HERE, under the same name. So that Step 5 trains with what the learner wrote, the
cell right after STOP HERE (tag `keep-own`) calls `keep_own(CHAPTER_ID, globals())`, which keeps every
exercise function the learner has implemented; Step 5 then passes `step5_mechanism(CHAPTER_ID,
globals())` to its plan: the learner's function where one was kept, the reference otherwise, and the
records say which ran. A function counts as:

- a stub while its source still holds the TODO's `raise NotImplementedError("TODO ...")`;
- the reference when its source is the reference-solution cell's definition (a rerun of the
  `keep-own` cell after the reference cell keeps what was kept before);
- the learner's otherwise.

`make run` executes the notebooks with their stubs, so Step 5 there runs the references.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

from tools.chapters import lesson_text
from tools.core.catalog import find_chapter
from tools.core.paths import resolve_project_root
from tools.errors import ConfigError
from tools.experiments.contract import Mechanism

STUB_MARKER = 'raise NotImplementedError("TODO'

_kept: dict[str, dict[str, Callable]] = {}
"""chapter id -> the learner's functions kept in this kernel (a module global: one kernel, one learner)."""


def _notebook(chapter_id: str, root: Path | None) -> dict:
    root = root or resolve_project_root()
    return json.loads(find_chapter(chapter_id, root).notebook_path(root).read_text(encoding="utf-8"))


def _tagged(notebook: dict, tag: str) -> list[str]:
    return ["".join(cell["source"]) for cell in notebook["cells"] if tag in cell.get("metadata", {}).get("tags", [])]


def exercise_names(chapter_id: str, root: Path | None = None) -> list[str]:
    """The chapter's exercise functions, in notebook order."""
    notebook = _notebook(chapter_id, root)
    return [cell["metadata"]["course"]["exercise"] for cell in notebook["cells"]
            if "exercise" in cell.get("metadata", {}).get("tags", [])]


def _normalised(source: str) -> str:
    return "\n".join(line.rstrip() for line in textwrap.dedent(source).strip().splitlines())


def reference_sources(chapter_id: str, root: Path | None = None) -> dict[str, str]:
    """`{name: source}` of every function the reference-solution cells define (normalised)."""
    found = {}
    for source in _tagged(_notebook(chapter_id, root), "reference-solution"):
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = _normalised(ast.get_source_segment(source, node))
    return found


def classify(function, reference_source: str | None) -> str:
    """"missing" | "stub" | "reference" | "learner" (see the module docstring)."""
    if not callable(function):
        return "missing"
    try:
        source = _normalised(inspect.getsource(function))
    except (OSError, TypeError):
        return "learner"  # no source to compare: not ours
    if STUB_MARKER in source:
        return "stub"
    return "reference" if source == reference_source else "learner"


def keep_own(chapter_id: str, namespace: Mapping, *, root: Path | None = None) -> str:
    """Keep the learner's implemented exercise functions of `namespace` for Step 5; returns a line that
    says which Step 5 will run. A stub drops what was kept for it; the reference keeps it."""
    references = reference_sources(chapter_id, root)
    kept = _kept.setdefault(chapter_id, {})
    for name in exercise_names(chapter_id, root):
        status = classify(namespace.get(name), references.get(name))
        if status == "learner":
            kept[name] = namespace[name]
        elif status in ("stub", "missing"):
            kept.pop(name, None)
    return describe_kept(chapter_id, root=root)


def describe_kept(chapter_id: str, *, root: Path | None = None) -> str:
    kept = _kept.get(chapter_id, {})
    names = exercise_names(chapter_id, root)
    own = [name for name in names if name in kept]
    other = [name for name in names if name not in kept]
    parts = []
    if own:
        parts.append(f"Step 5 will run your {', '.join(own)}")
    if other:
        parts.append(f"the reference {', '.join(other)} (yours {'is' if len(other) == 1 else 'are'} not implemented)")
    return "; ".join(parts)


def step5_mechanism(chapter_id: str, namespace: Mapping, *, root: Path | None = None) -> Mechanism:
    """The exercise functions Step 5 runs: each kept learner function, else the one `namespace` holds now
    (the reference, once its cell ran). A stub there is refused, naming the TODO."""
    references = reference_sources(chapter_id, root)
    kept = _kept.get(chapter_id, {})
    functions, sources = {}, {}
    for name in exercise_names(chapter_id, root):
        if name in kept:
            functions[name], sources[name] = kept[name], "learner"
            continue
        current = namespace.get(name)
        status = classify(current, references.get(name))
        if status in ("stub", "missing"):
            raise ConfigError(f"{name} is not implemented and its reference has not run: finish the TODO, or run "
                              "the reference-solution cell after STOP HERE, before Step 5")
        functions[name], sources[name] = current, "learner" if status == "learner" else "reference"
    return Mechanism(functions, sources)


def forget(chapter_id: str) -> None:
    """Drop what was kept for a chapter (tests; a new learner in the same kernel)."""
    _kept.pop(chapter_id, None)


def ran_sentence(described: Mapping[str, Mapping]) -> str:
    """The page's sentence naming which functions a stage ran, from a record's `mechanism` field
    (`Mechanism.describe`): the learner's, the reference's and the package's, in that order."""
    grouped: dict[str, list[str]] = {}
    for name, item in sorted(described.items()):
        grouped.setdefault(item["source"], []).append(f"`{name}`")
    keys = {"learner": "mechanism.ran_learner", "reference": "mechanism.ran_reference",
            "package": "mechanism.ran_package"}
    separator = lesson_text.text("mechanism.separator")
    parts = [lesson_text.text(keys[source], names=lesson_text.text("mechanism.enumeration").join(grouped[source]))
             for source in ("learner", "reference", "package") if source in grouped]
    return lesson_text.text("mechanism.ran", parts=separator.join(parts))
