"""`new-chapter`: a planned chapter is scaffolded, `check` names every placeholder, and once they are
replaced the chapter builds, runs and verifies without touching anything but its own files and the catalog."""

from __future__ import annotations

import difflib
import shutil

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import find_chapter
from tools.course.__main__ import main
from tools.course.grader.build import build_sources, clause_coverage, coverage_problems
from tools.course.grader.verify import verify_chapter
from tools.course.authoring.check import check_course
from tools.course.cells import read_notebook
from tools.course.runs.runner import run_chapter
from tools.course.authoring.scaffold import TEMPLATE_DIR, TEMPLATE_MARKER
from tools.errors import ConfigError

pytestmark = pytest.mark.integration

CHAPTER = "PT-SCAFFOLD-PROBE"
"""A planned mechanism chapter added to the copied catalog (every chapter of the real catalog is implemented)."""
PLANNED_ROW = f"""
[[chapter]]
id = "{CHAPTER}"
slug = "pt-scaffold-probe"
kind = "mechanism"
title_zh = "脚手架探针"
title_en = "Scaffold probe"
branch = "共同入口"
prerequisites = []
profiles = ["PT-CPU"]
fixed_inputs = "none"
compared_variable = "none"
status = "planned"
"""


@pytest.fixture
def course(tmp_path, monkeypatch):
    root = tmp_path / "course"
    for folder in ("notebooks", "grading", "benchmarks", "environment"):
        shutil.copytree(REPO_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("source", "release"))
    catalog = root / "notebooks" / "catalog.toml"
    catalog.write_text(catalog.read_text(encoding="utf-8") + PLANNED_ROW, encoding="utf-8")
    (root / "tools").mkdir()
    (root / "tools" / "project_runtime.py").write_text("# marker\n", encoding="utf-8")
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    return root


def fill(root):
    """What an author does: replace every TEMPLATE: placeholder (here: drop the marker)."""
    paths = [*sorted((root / "notebooks").glob("*.ipynb")), root / "notebooks" / "catalog.toml",
             *sorted((root / "grading").rglob("*.py")), *sorted((root / "grading").rglob("*.mutant"))]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if TEMPLATE_MARKER.search(text):
            path.write_text(TEMPLATE_MARKER.sub("", text), encoding="utf-8")


def changed_files(before: set, root) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - before


def test_a_planned_chapter_is_scaffolded_filled_and_verified(course, tmp_path):
    assert not find_chapter(CHAPTER, course).implemented
    before = {str(p.relative_to(course)) for p in course.rglob("*") if p.is_file()}
    assert main(["new-chapter", CHAPTER]) == 0
    chapter = find_chapter(CHAPTER, course)
    assert chapter.implemented
    added = changed_files(before, course)
    assert added == {chapter.notebook, f"grading/hidden_tests/{chapter.slug}.py",
                     *(f"grading/mutants/{chapter.slug}/{name}.mutant" for name in (
                         "ints_accepted", "empty_allowed", "integer_division", "ties_in_input_order", "ascending",
                         "range_unchecked", "strict_minimum", "minimum_unchecked"))}
    notebook = read_notebook(course / chapter.notebook)
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "{{" not in text and f'open_chapter("{chapter.id}"' in text and chapter.title_zh in text
    assert notebook.metadata["course"] == {"schema_version": 1, "chapter_id": chapter.id, "slug": chapter.slug}
    problems = [str(problem) for problem in check_course(course)]
    assert problems and all("TEMPLATE" in problem for problem in problems)
    fill(course)
    assert check_course(course) == []
    build_sources(course, [find_chapter(CHAPTER, course)])
    dry = run_chapter(course, chapter, run_mode="dry_run", label="scaffold_dry", results_dir=None,
                      output_dir=tmp_path / "dry")
    smoke = run_chapter(course, chapter, run_mode="cpu_smoke", label="scaffold_smoke",
                        results_dir=tmp_path / "results", output_dir=tmp_path / "smoke")
    assert dry.status == smoke.status == "passed", (dry.error, smoke.error)
    assert len(smoke.records_written) == 1
    assert coverage_problems(chapter.id, clause_coverage(course, chapter)) == []  # every named clause is reached
    report = verify_chapter(course, chapter, log_dir=tmp_path / "logs")
    planted = [o for o in report.outcomes if o.student.startswith("mutant_")]
    assert report.passed and len([o for o in planted if "+overwrite_" not in o.student]) == 8
    assert len([o for o in planted if "+overwrite_" in o.student]) == 8  # each mutant, its arguments overwritten
    assert {o.student for o in report.outcomes if o.expectation == "near_zero"} == {
        f"{kind}_{name}" for kind in ("raises", "constant") for name in ("pass_share", "rank_groups", "gate")}


def test_an_implemented_or_existing_chapter_is_never_overwritten(course):
    with pytest.raises(ConfigError, match="already implemented"):
        main_raises(["new-chapter", "33"])
    slug = find_chapter(CHAPTER, course).slug
    (course / "grading" / "hidden_tests" / f"{slug}.py").write_text("# mine\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        main_raises(["new-chapter", CHAPTER])
    assert not find_chapter(CHAPTER, course).implemented


def main_raises(argv):
    from tools.core.paths import resolve_project_root
    from tools.course.__main__ import build_parser

    args = build_parser().parse_args(argv)
    args.root = resolve_project_root()
    return args.handler(args)


def test_the_catalog_edit_changes_only_the_chapter_s_status_and_keeps_every_comment(course):
    before = (course / "notebooks" / "catalog.toml").read_text(encoding="utf-8")
    assert main(["new-chapter", CHAPTER]) == 0
    after = (course / "notebooks" / "catalog.toml").read_text(encoding="utf-8")
    changed = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ['-status = "planned"', '+status = "implemented"', '+gpu_stage = "TEMPLATE: describe Step 5"']
    assert [line for line in before.splitlines() if line.startswith("#")] == \
        [line for line in after.splitlines() if line.startswith("#")]


def test_the_template_is_files_not_code():
    """The template a chapter starts from is a notebook, a hidden-test file and mutant files, every
    chapter-specific value a placeholder."""
    notebook = (TEMPLATE_DIR / "chapter.ipynb").read_text(encoding="utf-8")
    assert all(placeholder in notebook for placeholder in ("{{CHAPTER_ID}}", "{{TITLE_ZH}}", "{{SLUG}}"))
    assert len(list((TEMPLATE_DIR / "mutants").glob("*.mutant"))) == 8
    assert (TEMPLATE_DIR / "hidden_tests.py.template").read_text(encoding="utf-8").count("# %% hidden ") >= 12
