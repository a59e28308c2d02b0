"""The project chain in batch runs: order by prerequisites, promised manifests, blocked downstream projects."""

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from chapter_factory import REPO_ROOT, code, make_toy_project
from tools.core.catalog import Chapter, load_catalog, order_by_prerequisites, project_chain
from tools.course.runs.runner import format_summary, run_chapters
from tools.errors import ConfigError

CATALOG = """
[[chapter]]
id = "M"
slug = "m-mechanism"
kind = "mechanism"
title_zh = "机制"
title_en = "Mechanism"
status = "implemented"

[[chapter]]
id = "C"
slug = "c-delivery"
kind = "project"
title_zh = "交付"
title_en = "Delivery"
prerequisites = ["B"]
status = "implemented"

[[chapter]]
id = "A"
slug = "a-data"
kind = "project"
title_zh = "数据"
title_en = "Data"
prerequisites = ["M"]
status = "implemented"

[[chapter]]
id = "B"
slug = "b-select"
kind = "project"
title_zh = "选型"
title_en = "Selection"
prerequisites = ["A"]
status = "implemented"

[[chapter]]
id = "D"
slug = "d-branch"
kind = "project"
title_zh = "分支"
title_en = "Branch"
prerequisites = ["A"]
status = "planned"
"""

PROJECT_CELL = '''
import json, pathlib
from tools.core.handoff import manifest_path, require_manifest, seal
from tools.core.records import record_header, save_json_record_once
ID, SLUG, UPSTREAM = {id!r}, {slug!r}, {upstream!r}
seen = None
if RUN_MODE != "dry_run":
    results = pathlib.Path(RESULTS_DIR)
    if UPSTREAM:
        promised = (UPSTREAM_SHA256 or {{}}).get(UPSTREAM[0])
        seen = require_manifest(results, chapter_id=UPSTREAM[0], slug=UPSTREAM[1], label=RUN_LABEL,
                                run_mode=RUN_MODE, promised_sha256=promised).sha256
    {fail}
    body = {{"inputs": [], "candidates": [], "gates": [], "decision": {{"decision": "accept"}},
            "next_action": "go on", "outputs": [], "promised": UPSTREAM_SHA256, "seen": seen}}
    record = {{**record_header(schema_version="toy/v1", chapter=ID, stage="manifest", run_mode=RUN_MODE,
                              run_label=RUN_LABEL), **body}}
    save_json_record_once(manifest_path(results, SLUG, RUN_LABEL), seal(record))
'''

UPSTREAMS = {"A": None, "B": ("A", "a-data"), "C": ("B", "b-select")}


def notebook(chapter_id, slug, upstream, fail=""):
    book = nbformat.v4.new_notebook()
    book.cells = [code('RUN_MODE = "dry_run"\nRUN_LABEL = "replace_with_unique_label"\nRESULTS_DIR = None\n'
                       'UPSTREAM_SHA256 = None', "parameters"),
                  code(PROJECT_CELL.format(id=chapter_id, slug=slug, upstream=upstream, fail=fail or "pass"))]
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.metadata["course"] = {"schema_version": 1, "chapter_id": chapter_id, "slug": slug}
    return book


@pytest.fixture
def chain_root(tmp_path):
    root = make_toy_project(tmp_path / "course")
    (root / "notebooks" / "catalog.toml").write_text(CATALOG, encoding="utf-8")
    mechanism = notebook("M", "m-mechanism", None)
    mechanism.cells = [mechanism.cells[0], code("x = 1")]
    nbformat.write(mechanism, str(root / "notebooks" / "m-mechanism.ipynb"))
    for chapter_id, slug in (("A", "a-data"), ("B", "b-select"), ("C", "c-delivery")):
        nbformat.write(notebook(chapter_id, slug, UPSTREAMS[chapter_id]), str(root / "notebooks" / f"{slug}.ipynb"))
    return root


def chapter(chapter_id, *prerequisites, kind="project"):
    return Chapter(chapter_id, chapter_id.lower(), kind, "z", "e", "implemented", prerequisites=prerequisites)


def test_order_by_prerequisites_is_stable_and_refuses_a_cycle():
    ordered = [chapter("M", kind="mechanism"), chapter("A", "M"), chapter("B", "A"), chapter("D", "A")]
    assert order_by_prerequisites(ordered) == ordered  # already in order: unchanged
    shuffled = [chapter("C", "B"), chapter("B", "A"), chapter("X"), chapter("A", "M")]
    assert [c.id for c in order_by_prerequisites(shuffled)] == ["X", "A", "B", "C"]  # M is not in the list
    with pytest.raises(ConfigError, match="form a cycle"):
        order_by_prerequisites([chapter("P", "Q"), chapter("Q", "P")])


def test_the_chain_of_a_project_is_its_upstream_projects_in_order(chain_root):
    assert [c.id for c in project_chain("C", chain_root)] == ["A", "B", "C"]
    assert [c.id for c in project_chain("b-select", chain_root)] == ["A", "B"]
    with pytest.raises(ConfigError, match="mechanism chapter"):
        project_chain("M", chain_root)
    with pytest.raises(ConfigError, match="still planned"):
        project_chain("D", chain_root)


def test_the_course_chain_of_62_is_64_63_65_62():
    catalog = {c.id: c for c in load_catalog(REPO_ROOT)}
    assert catalog["63"].prerequisites == ("64",) and catalog["62"].prerequisites == ("63", "65")
    assert catalog["65"].prerequisites == ("64",)
    if all(catalog[key].implemented for key in ("62", "63", "64", "65")):
        assert [c.id for c in project_chain("62", REPO_ROOT)] == ["64", "63", "65", "62"]


@pytest.mark.integration
def test_a_batch_runs_projects_after_their_upstream_and_promises_each_manifest(chain_root, tmp_path):
    results = tmp_path / "results"
    shuffled = [c for c in load_catalog(chain_root) if c.implemented]  # catalog order: M, C, A, B
    label, outcomes = run_chapters(chain_root, shuffled, run_mode="cpu_smoke", label="chain_run_1",
                                   results_dir=str(results), show_progress=False)
    assert [(o.chapter, o.status) for o in outcomes] == [("M", "passed"), ("A", "passed"), ("B", "passed"),
                                                         ("C", "passed")]
    summary = json.loads((chain_root / "build/runs/chain_run_1/summary.json").read_text(encoding="utf-8"))
    handoffs = summary["handoffs"]
    assert sorted(handoffs) == ["A", "B", "C"]
    manifest_b = json.loads((results / handoffs["B"]["path"]).read_text(encoding="utf-8"))
    manifest_c = json.loads((results / handoffs["C"]["path"]).read_text(encoding="utf-8"))
    assert manifest_b["promised"] == {"A": handoffs["A"]["sha256"]} == {"A": manifest_b["seen"]}
    assert manifest_c["promised"] == {"B": handoffs["B"]["sha256"]}


@pytest.mark.integration
def test_a_failing_upstream_blocks_its_downstream_without_running_it(chain_root, tmp_path):
    nbformat.write(notebook("A", "a-data", None, fail="raise RuntimeError('data broke')"),
                   str(chain_root / "notebooks" / "a-data.ipynb"))
    results = tmp_path / "results"
    _, outcomes = run_chapters(chain_root, project_chain("C", chain_root), run_mode="cpu_smoke", label="chain_run_2",
                               results_dir=str(results), show_progress=False)
    assert [(o.chapter, o.status) for o in outcomes] == [("A", "failed"), ("B", "blocked"), ("C", "blocked")]
    assert "upstream project(s) A did not pass" in outcomes[1].error
    assert "upstream project(s) B did not pass" in outcomes[2].error
    assert "BLOCKED B: not run" in format_summary(outcomes)
    assert not list(results.rglob("*.json"))


@pytest.mark.integration
def test_run_chain_from_the_command_line_runs_the_chain_only(chain_root, tmp_path):
    env = {**os.environ, "COURSE_PROJECT_ROOT": str(chain_root)}
    done = subprocess.run([sys.executable, "-m", "tools.course", "run", "--chain", "B", "--label", "chain_cli_1",
                           "--results-dir", str(tmp_path / "res"), "--no-progress"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(path.name for path in (tmp_path / "res").rglob("*.json")) == [
        "a-data_manifest_chain_cli_1.json", "b-select_manifest_chain_cli_1.json"]
    both = subprocess.run([sys.executable, "-m", "tools.course", "run", "--chain", "B", "--chapter", "A"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_the_course_batch_puts_every_project_after_its_upstream():
    """`make run` runs every implemented chapter in this order: the chain runs inside it."""
    ordered = [chapter.id for chapter in order_by_prerequisites(
        [chapter for chapter in load_catalog(REPO_ROOT) if chapter.implemented])]
    for upstream, downstream in (("64", "63"), ("64", "65"), ("63", "62"), ("32", "64")):
        if upstream in ordered and downstream in ordered:
            assert ordered.index(upstream) < ordered.index(downstream), (upstream, downstream)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xdist_group("course_run")
def test_the_sft_chain_runs_end_to_end_and_a_one_byte_change_stops_the_next_project(course_smoke_run, tmp_path):
    """In the course's cpu_smoke batch (`make run`, the shared course-run fixture) 64, 63, 65 and 62 pass,
    each reading the manifests the ones before sealed and the runner promised; then one changed byte in a
    copy of 63's manifest stops 62 in its setup cell, before any work, with the clear error, and 62 writes
    nothing."""
    from tools.course.runs.runner import run_chapter

    chain = project_chain("62", REPO_ROOT)
    assert [c.id for c in chain] == ["64", "63", "65", "62"]
    outcomes = [course_smoke_run.outcomes[c.id] for c in chain]
    assert [(o.chapter, o.status) for o in outcomes] == [("64", "passed"), ("63", "passed"), ("65", "passed"),
                                                         ("62", "passed")], format_summary(outcomes)
    handoffs = course_smoke_run.handoffs
    assert {"62", "63", "64", "65"} <= set(handoffs)
    delivered = json.loads((course_smoke_run.results / handoffs["62"]["path"]).read_text(encoding="utf-8"))
    assert delivered["decision"]["decision"] == "delivered"
    assert delivered["inputs"][0] == {"role": "upstream_manifest", **handoffs["63"]}
    assert delivered["inputs"][1] == {"role": "upstream_manifest", **handoffs["65"]}

    results = tmp_path / "results"  # a copy: the course run's records stay as written for the other tests
    for upstream in chain[:-1]:
        shutil.copytree(course_smoke_run.results / upstream.slug, results / upstream.slug)
    selection = results / handoffs["63"]["path"]
    data = bytearray(selection.read_bytes())
    data[data.index(b'"decision": "accept"') + len(b'"decision": "acce')] = ord("P")
    selection.write_bytes(bytes(data))
    again = run_chapter(REPO_ROOT, chain[-1], run_mode="cpu_smoke", label="pytest_chain_2", results_dir=results,
                        output_dir=tmp_path / "again",
                        extra_parameters={"UPSTREAM_LABEL": course_smoke_run.label,
                                          "UPSTREAM_SHA256": {"63": handoffs["63"]["sha256"],
                                                              "65": handoffs["65"]["sha256"]}})
    assert again.status == "failed" and again.failure["cell"] == 3
    assert "UpstreamRecordError" in again.error and "was promised when project 63 finished" in again.error
    assert not (results / "62-sft-delivery").exists() or not list((results / "62-sft-delivery").rglob("*"))
