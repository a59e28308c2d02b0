"""The dependency rule of `tools` (its package docstring) holds for every module."""

from __future__ import annotations

import ast
from pathlib import Path

import tools
from chapter_factory import REPO_ROOT

TOOLS = REPO_ROOT / "tools"
LAYERS = {"errors": 0, "core": 1, "models": 2, "data": 2, "measure": 2, "experiments": 3, "chapters": 4, "course": 4}
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


def module_name(path: Path) -> str:
    relative = path.relative_to(REPO_ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names if name.startswith("tools.") or name == "tools"]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("tools")]
    return found


def violations() -> list[str]:
    problems = []
    for path in sorted(TOOLS.rglob("*.py")):
        name = module_name(path)
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
    for package in ("errors", "core", "models | data | measure", "experiments.<name>", "chapters | course"):
        assert package in tools.__doc__


def test_a_violation_is_reported(tmp_path, monkeypatch):
    bad = TOOLS / "core" / "_layer_probe.py"
    bad.write_text("from tools.course.cells import read_notebook\n", encoding="utf-8")
    try:
        assert any("tools.core._layer_probe:1 imports tools.course.cells" in p for p in violations())
    finally:
        bad.unlink()


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


def test_importing_peft_after_tools_writes_nothing_to_stderr():
    """nbgrader scores a grade cell with stderr output 0: the course's imports must stay quiet."""
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-c", "import tools, peft, transformers"], capture_output=True,
                               text=True, cwd=REPO_ROOT)
    assert completed.returncode == 0 and completed.stderr == "", completed.stderr


COURSE_SUBLAYERS = {"cells": 0, "nbgrader_cli": 0, "layout": 0, "authoring": 1, "grader": 1, "classroom": 2,
                    "runs": 3, "__main__": 4}
"""The four subsystems of `tools.course` over their shared base (its package docstring)."""


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
