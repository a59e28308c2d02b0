"""The dependency rule of `tools` (its package docstring) holds for every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tools
from chapter_factory import REPO_ROOT

TOOLS = REPO_ROOT / "tools"
LAYERS = {"errors": 0, "core": 1, "data": 2, "models": 3, "measure": 3, "experiments": 4, "chapters": 5, "course": 5}
EXPERIMENT_BASE = {"experiments.contract", "experiments.registry", "experiments.cli", "experiments.device_batch",
                   "experiments.__main__"}
"""The experiments' shared base (the contract, the registry, the one command line, the GPU batch): every
experiment may import it; it imports no experiment."""
FACADES = {"project_runtime", "model_runtime", "training_memory_runtime", "verl_mechanism_closure",
           "memory_strategy_runtime"}


def package_of(module: str) -> str:
    """`tools.experiments.verl_closure.record` -> `experiments.verl_closure`; `tools.core.paths` -> `core`."""
    parts = module.split(".")[1:]
    if not parts:
        return ""
    return ".".join(parts[:2]) if parts[0] == "experiments" and len(parts) > 1 else parts[0]


def layer_of(package: str) -> int | None:
    return LAYERS.get(package.split(".")[0])


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    relative = path.relative_to(root).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`: they never run, so they tie no modules together."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def imports_of(path: Path, *, runtime_only: bool = False) -> list[tuple[int, str]]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names if name.startswith("tools.") or name == "tools"]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("tools")]
    return found


def violations(tools_dir: Path = TOOLS) -> list[str]:
    problems = []
    for path in sorted(tools_dir.rglob("*.py")):
        name = module_name(path, tools_dir.parent)
        own = package_of(name)
        if own in FACADES or name == "tools":
            continue
        own_layer = layer_of(own)
        if own_layer is None:
            problems.append(f"{name}: not in a layer ({', '.join(LAYERS)}); move it into one")
            continue
        for line, imported in imports_of(path):
            target = package_of(imported)
            if target in FACADES:
                problems.append(f"{name}:{line} imports the facade tools.{target}; import its real module")
                continue
            if not target or target == own or target.split(".")[0] not in LAYERS:
                continue  # `import tools`, its own subpackage, or a module-level name of tools/
            target_layer = layer_of(target)
            if own.startswith("experiments.") and target in EXPERIMENT_BASE and own not in EXPERIMENT_BASE:
                continue  # an experiment uses the contract, the registry or the command line
            if own in EXPERIMENT_BASE and target.startswith("experiments.") and target not in EXPERIMENT_BASE:
                problems.append(f"{name}:{line} imports the experiment {imported}; the base imports no experiment")
                continue
            if own in EXPERIMENT_BASE and target in EXPERIMENT_BASE:
                continue
            if target_layer > own_layer or (target_layer == own_layer and target.split(".")[0] != own.split(".")[0]) \
                    or (target_layer == own_layer and own.startswith("experiments.") and target != own):
                problems.append(f"{name}:{line} imports {imported} (layer {target_layer} from layer {own_layer})")
    return problems


def test_every_module_follows_the_dependency_rule():
    assert violations() == []


def test_the_rule_is_the_one_the_package_documents():
    for package in ("errors", "core", "data", "models | measure", "experiments.<name>", "chapters | course"):
        assert package in tools.__doc__


def test_a_violation_is_reported(tmp_path):
    """On a tree of its own (writing into the real one would race the whole-tree test on another worker)."""
    (tmp_path / "tools" / "core").mkdir(parents=True)
    (tmp_path / "tools" / "core" / "paths.py").write_text("from tools.errors import ConfigError\n", encoding="utf-8")
    (tmp_path / "tools" / "core" / "_layer_probe.py").write_text("from tools.course.cells import read_notebook\n",
                                                                 encoding="utf-8")
    found = violations(tmp_path / "tools")
    assert found and all(line.startswith("tools.core._layer_probe:1 imports tools.course.cells") for line in found)
    assert "tools.core._layer_probe:1 imports tools.course.cells (layer 5 from layer 1)" in found


def prints_outside_the_command_line() -> list[str]:
    """`print` calls in library code: only command-line entry points (`__main__`/`cli` modules, the
    sandbox launcher script, functions named `main`) may print."""
    found = []
    for path in sorted(TOOLS.rglob("*.py")):
        if path.name in ("__main__.py", "cli.py", "sandbox_launch.py") or package_of(module_name(path)) in FACADES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name != "main"]:
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                    found.append(f"{module_name(path)}:{node.lineno} in {function.name}()")
    return sorted(set(found))


def test_library_code_is_silent():
    assert prints_outside_the_command_line() == []


@pytest.mark.slow
def test_importing_peft_after_tools_writes_nothing_to_stderr():
    """nbgrader scores a grade cell with stderr output 0: the course's imports must stay quiet."""
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-c", "import tools, peft, transformers"], capture_output=True,
                               text=True, cwd=REPO_ROOT)
    assert completed.returncode == 0 and completed.stderr == "", completed.stderr


COURSE_SUBLAYERS = {"layout": 0, "cells": 0, "scratch": 0, "nbgrader_cli": 1, "ray_cluster": 1, "authoring": 2,
                    "grader": 2, "classroom": 3, "runs": 4, "__main__": 5}
"""The four subsystems of `tools.course` over their shared base (its package docstring): the path owner
`layout`, `cells` and `scratch` (temporary folders that outlive no one) at the bottom, `nbgrader_cli` (which
names its files through `layout`) and `ray_cluster` (the one way onto a Ray cluster, for both Ray executors)
above them."""


def course_sublayer_violations() -> list[str]:
    """Imports inside `tools.course` that go up a sub-layer, or sideways between two subsystems."""
    problems = []
    for path in sorted((TOOLS / "course").rglob("*.py")):
        name = module_name(path)
        parts = name.split(".")
        if len(parts) < 3:
            continue  # the package itself
        own = parts[2]
        if own not in COURSE_SUBLAYERS:
            problems.append(f"{name}: not in a sub-layer of tools.course ({', '.join(COURSE_SUBLAYERS)})")
            continue
        for line, imported in imports_of(path):
            target_parts = imported.split(".")
            if target_parts[:2] != ["tools", "course"] or len(target_parts) < 3:
                continue
            target = target_parts[2]
            if target == own or target not in COURSE_SUBLAYERS:
                continue
            if COURSE_SUBLAYERS[target] >= COURSE_SUBLAYERS[own]:
                problems.append(f"{name}:{line} imports {imported} (sub-layer {COURSE_SUBLAYERS[target]} from "
                                f"{COURSE_SUBLAYERS[own]})")
    return problems


def test_the_experiment_base_imports_no_experiment(monkeypatch):
    probe = TOOLS / "experiments" / "_base_probe.py"
    probe.write_text("from tools.experiments.verl_closure.config import TINY\n", encoding="utf-8")
    try:
        assert any("tools.experiments._base_probe:1 imports tools.experiments.verl_closure" in p for p in violations())
        monkeypatch.setitem(globals(), "EXPERIMENT_BASE", EXPERIMENT_BASE | {"experiments._base_probe"})
        assert any("the base imports no experiment" in p for p in violations())
    finally:
        probe.unlink()


def test_course_subsystems_import_only_downwards():
    assert course_sublayer_violations() == []


def test_a_sideways_import_between_course_subsystems_is_reported():
    probe = TOOLS / "course" / "authoring" / "_sublayer_probe.py"
    probe.write_text("from tools.course.grader.build import parse_hidden_tests\n", encoding="utf-8")
    try:
        assert any("tools.course.authoring._sublayer_probe:1 imports tools.course.grader.build" in p
                   for p in course_sublayer_violations())
    finally:
        probe.unlink()


def import_graph() -> dict[str, set[str]]:
    """`module -> the tools modules it imports`, at module level or inside a function alike (a lazy import
    still ties two modules together; an import only for type checkers does not). `from tools.a import b`
    names the module `tools.a.b` when there is one."""
    modules = {module_name(path): path for path in TOOLS.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, imported in imports_of(path, runtime_only=True):
            while imported not in modules and "." in imported:
                imported = imported.rsplit(".", 1)[0]
            if imported in modules and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted; [] when acyclic."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


KNOWN_CYCLES: dict[tuple[str, str], str] = {}
"""Cycles that exist today, each with why; no other may appear, and an entry goes when its cycle is broken."""


def test_no_two_modules_import_each_other():
    """No import cycle in `tools`, lazy imports included (`runs.registry` and `runs.profiles` were one),
    apart from the known cycles listed above; `tools.course` has none at all."""
    cycles = [tuple(cycle) for cycle in import_cycles(import_graph())]
    assert [cycle for cycle in cycles if cycle not in KNOWN_CYCLES] == []
    assert [cycle for cycle in KNOWN_CYCLES if cycle not in cycles] == [], "broken: remove it from KNOWN_CYCLES"
    assert not any(module.startswith("tools.course.") for cycle in KNOWN_CYCLES for module in cycle)


def test_a_cycle_through_a_lazy_import_is_reported(tmp_path):
    graph = import_graph()
    graph["tools.course.runs.profiles"] = graph["tools.course.runs.profiles"] | {"tools.course.runs.registry"}
    assert ["tools.course.runs.profiles", "tools.course.runs.registry"] in import_cycles(graph)
    probe = tmp_path / "probe.py"
    probe.write_text("def late():\n    from tools.course.runs import registry\n", encoding="utf-8")
    assert (2, "tools.course.runs.registry") in imports_of(probe)  # an import inside a function counts


def test_an_import_only_for_type_checkers_ties_no_modules_together(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tools.core.runs import RUN_MODES\n"
                     "from tools.errors import ConfigError\n", encoding="utf-8")
    assert [name for _, name in imports_of(probe, runtime_only=True)] == ["tools.errors", "tools.errors.ConfigError"]
    assert "tools.core.runs" in [name for _, name in imports_of(probe)]
