"""The set-up works from the repo's own files alone: pinned requirements cover every import, and a clean
clone of HEAD holds everything the course checks need."""

import ast
import importlib.metadata
import os
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from chapter_factory import REPO_ROOT
from tools.core.environment import read_pins

MAKEFILE = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
INSTALLED_FILES = sorted(set(re.findall(r"-r ([\w./-]+\.txt)", MAKEFILE)))


def test_makefile_installs_only_from_repo_files_and_ci_calls_make_test():
    assert "requirements-cpu.txt" in INSTALLED_FILES
    for name in INSTALLED_FILES:
        assert (REPO_ROOT / name).is_file(), name
    ci = [line.strip() for line in (REPO_ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()]
    assert "make lint" in ci and "make test" in ci and ci.index("make lint") < ci.index("make test")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in readme and "make test" in readme


def test_the_linter_checks_for_defects_and_the_fast_loop_leaves_out_marked_tests():
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert {"F", "E9"} <= set(project["tool"]["ruff"]["lint"]["select"])
    assert "ruff" in dict(read_pins(REPO_ROOT / "requirements-cpu.txt"))
    markers = [line.split(":")[0] for line in project["tool"]["pytest"]["ini_options"]["markers"]]
    assert {"slow", "integration"} <= set(markers)
    fast = re.search(r"^test-fast:.*\n((?:\t.*\n)+)", MAKEFILE, flags=re.M).group(1)
    assert '-m "not slow and not integration"' in fast and " -n " not in fast


def test_every_requirement_is_pinned_and_torch_is_the_cpu_release():
    for name in INSTALLED_FILES:
        for line in (REPO_ROOT / name).read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                assert "==" in line, f"{name}: unpinned requirement {line!r}"
    assert read_pins(REPO_ROOT / "requirements-cpu.txt")["torch"] == "2.13.0"


def _closure(names):
    """Distributions reachable from `names` through installed metadata."""
    seen, todo = set(), [name.lower().replace("_", "-") for name in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for spec in requires:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name.lower().replace("_", "-"))
    return seen


def _imports(source):
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def _project_sources():
    for path in list((REPO_ROOT / "tools").rglob("*.py")) + list((REPO_ROOT / "tests").rglob("*.py")):
        yield path, path.read_text(encoding="utf-8")
    import nbformat

    for path in (REPO_ROOT / "notebooks").glob("*.ipynb"):
        notebook = nbformat.read(str(path), as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
                yield path, code


def test_every_third_party_import_comes_from_a_pinned_requirement():
    pinned = set()
    for name in INSTALLED_FILES:
        pinned.update(read_pins(REPO_ROOT / name))
    allowed = _closure(pinned)
    providers = importlib.metadata.packages_distributions()
    local = {"tools", "chapter_factory"} | {p.stem for p in (REPO_ROOT / "tests").rglob("*.py")}
    # imported only behind a guard, in the GPU profiles' environments (requirements-verl.txt and its deps)
    optional = {"verl", "vllm", "ray"}
    missing = []
    for path, source in _project_sources():
        for module in _imports(source):
            if module in sys.stdlib_module_names or module in local or module == "__future__":
                continue
            distributions = providers.get(module, [])
            if module in optional and not distributions:
                continue  # imported behind a guard for a profile this machine does not have
            if not distributions and module.lower().replace("_", "-") in pinned:
                continue  # pinned, not installed yet (the browser test's packages come with `make browser-deps`)
            if not any(dist.lower().replace("_", "-") in allowed for dist in distributions):
                missing.append(f"{path.relative_to(REPO_ROOT)} imports {module} ({distributions or 'not installed'})")
    assert not missing, "\n".join(sorted(set(missing)))


@pytest.mark.integration
@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="needs a git checkout")
def test_a_clean_clone_of_head_passes_the_course_checks(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    env = {**os.environ, "COURSE_PROJECT_ROOT": str(clone)}
    for command in (["check"], ["grading", "build", "--check"], ["registry", "--check"]):
        completed = subprocess.run([sys.executable, "-m", "tools.course", *command], cwd=clone,
                                   capture_output=True, text=True, env=env)
        assert completed.returncode == 0, f"{command}: {completed.stdout}{completed.stderr}"
