"""`python -m tools.course new-chapter ID`: a new chapter from the template, every tag in place.

For a catalog entry that is still `planned`, it writes the chapter notebook, its hidden tests and a
mutant folder, and marks the entry `implemented`. The template is a complete, working chapter (three
small exercises with a reference, visible, hidden and differential tests, eight mutants and a Step 5
that writes a cpu_smoke record), so `check`, `grading build`, `run` and `grading verify` work from the
first minute; every place the author must replace is marked `TEMPLATE`, and `check` refuses a
chapter that still has one. Nothing outside the chapter's own files and the catalog is touched.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tools.core.catalog import CATALOG_PATH, find_chapter
from tools.course.cells import COURSE_METADATA_VERSION, write_notebook
from tools.course.layout import hidden_tests_path, mutants_dir
from tools.errors import ConfigError

TEMPLATE_MARKER = re.compile(r"(?<!\w)TEMPLATE[:：]")
"""Every place of a scaffolded chapter that its author must replace carries `TEMPLATE:`."""


def _cell(kind: str, source: str, *tags: str, **course) -> nbformat.NotebookNode:
    make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
    cell = make(textwrap.dedent(source).strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    if course:
        cell.metadata["course"] = dict(course)
    return cell


def template_cells(chapter_id: str, title_zh: str) -> list:
    """The template chapter: three exercises around one small mechanism (a share, a ranking, a gate)."""
    return [
        _cell("markdown", f"""
            # {chapter_id} · {title_zh}

            TEMPLATE：用两三句话说明本章要让学习者亲手写出的机制，以及它在后训练流程中的位置。
            """),
        _cell("markdown", """
            ## 运行环境

            TEMPLATE：列出本章各部分需要的环境档案（PT-CPU 即可完成 Step 1–4）。
            """),
        _cell("code", '''
            RUN_MODE = "dry_run"  # dry_run | cpu_smoke | real_gpu
            RUN_LABEL = "replace_with_unique_label"  # a unique label, required unless RUN_MODE is dry_run
            RESULTS_DIR = None  # None: build/results (cpu_smoke) or benchmarks/results (real_gpu)
            ''', "parameters"),
        _cell("code", f'''
            import math

            from tools.chapters.context import open_chapter

            RUN = open_chapter("{chapter_id}", RUN_MODE, RUN_LABEL, RESULTS_DIR, stages=["check"])
            print(RUN.describe())
            '''),
        _cell("markdown", """
            ## Step 1–3：机制

            TEMPLATE：讲清机制、公式与判定规则；能画图的地方用 matplotlib 画图。
            """),
        _cell("markdown", "## Step 4：动手实现\n\nTEMPLATE：说明三个 TODO 分别要写出什么。"),
        _cell("code", '''
            def pass_share(outcomes):
                """Share of True among the boolean outcomes of one group (TEMPLATE: replace this exercise).

                Args:
                    outcomes: a non-empty list of bools.

                Returns:
                    A float in [0, 1]: the number of True values divided by len(outcomes).

                Raises:
                    ValueError: outcomes is not a non-empty list, or an item is not a bool (0/1 refused).
                """
                # YOUR CODE HERE
                raise NotImplementedError("TODO 1 pass_share: count the True outcomes and divide")
            ''', "exercise", exercise="pass_share"),
        _cell("code", '''
            def rank_groups(shares):
                """Group names by share, highest first; ties by name (TEMPLATE: replace this exercise).

                Args:
                    shares: a dict {name (non-empty str): share (finite float in [0, 1])}.

                Returns:
                    A list of every name: share descending, equal shares by name ascending.

                Raises:
                    ValueError: shares is not a dict, a name is not a non-empty str, or a share is not a
                        finite number in [0, 1] (bools refused).
                """
                # YOUR CODE HERE
                raise NotImplementedError("TODO 2 rank_groups: sort by share descending, then by name")
            ''', "exercise", exercise="rank_groups"),
        _cell("code", '''
            def gate(shares, minimum=0.5):
                """Admit the groups whose share is at least `minimum` (TEMPLATE: replace this exercise).

                Args:
                    shares: as for rank_groups.
                    minimum: a finite number in [0, 1] (bools refused).

                Returns:
                    {"decision": "accept" if any group is admitted else "reject",
                     "admitted": the admitted names in rank_groups order}.

                Raises:
                    ValueError: as rank_groups, or minimum out of range.
                """
                # YOUR CODE HERE
                raise NotImplementedError("TODO 3 gate: admit the groups at or above the minimum")
            ''', "exercise", exercise="gate"),
        _cell("code", '''
            def test_pass_share():
                assert pass_share([True, False, True, True]) == 0.75
                assert pass_share([False]) == 0.0
            test_pass_share()
            ''', "visible-tests", "raises-exception", exercise="pass_share", points=1),
        _cell("code", '''
            def test_rank_groups():
                assert rank_groups({"b": 0.5, "a": 0.5, "c": 1.0}) == ["c", "a", "b"]
                assert rank_groups({"x": 0.0}) == ["x"]
            test_rank_groups()
            ''', "visible-tests", "raises-exception", exercise="rank_groups", points=1),
        _cell("code", '''
            def test_gate():
                assert gate({"a": 0.25, "b": 0.75}) == {"decision": "accept", "admitted": ["b"]}
                assert gate({"a": 0.25}) == {"decision": "reject", "admitted": []}
            test_gate()
            ''', "visible-tests", "raises-exception", exercise="gate", points=1),
        _cell("markdown", "## 🛑 STOP HERE 🛑\n\n先独立完成上面的 TODO，让测试全部通过，再往下看参考实现。", "stop-here"),
        _cell("code", '''
            import math


            def pass_share(outcomes):
                """Share of True among the boolean outcomes of one group."""
                if not isinstance(outcomes, list) or not outcomes:
                    raise ValueError("outcomes must be a non-empty list")
                if any(not isinstance(item, bool) for item in outcomes):
                    raise ValueError("every outcome must be a bool")
                return sum(outcomes) / len(outcomes)


            def rank_groups(shares):
                """Group names by share, highest first; ties by name."""
                if not isinstance(shares, dict):
                    raise ValueError("shares must be a dict")
                for name, share in shares.items():
                    if not isinstance(name, str) or not name:
                        raise ValueError("every name must be a non-empty str")
                    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) \\
                            or not 0 <= share <= 1:
                        raise ValueError(f"share of {name} must be a finite number in [0, 1]")
                return sorted(shares, key=lambda name: (-shares[name], name))


            def gate(shares, minimum=0.5):
                """Admit the groups whose share is at least `minimum`."""
                if isinstance(minimum, bool) or not isinstance(minimum, (int, float)) or not math.isfinite(minimum) \\
                        or not 0 <= minimum <= 1:
                    raise ValueError("minimum must be a finite number in [0, 1]")
                admitted = [name for name in rank_groups(shares) if shares[name] >= minimum]
                return {"decision": "accept" if admitted else "reject", "admitted": admitted}
            ''', "reference-solution"),
        _cell("markdown", "### 解析\n\nTEMPLATE：逐个 TODO 说明机制、不变量和测试证据。"),
        _cell("code", "test_pass_share()\ntest_rank_groups()\ntest_gate()\nprint('reference ok')", "reference-check"),
        _cell("markdown", "## Step 5：实验\n\nTEMPLATE：说明实验比较什么；dry_run 只做预检，cpu_smoke 在小模型上跑通同一条代码路径。"),
        _cell("code", '''
            from tools.chapters.evidence import reported_block

            if RUN.writes_records:
                shares = {name: pass_share(outcomes) for name, outcomes in
                          {"group_a": [True, False, True, True], "group_b": [False, False, True, False]}.items()}
                path, digest = RUN.save_record("check", {"shares": shares, "decision": gate(shares)})
                print(f"wrote {path} (sha256 {digest[:12]}...), evidence level {RUN.run_mode}")
            else:
                print("dry_run: nothing is written; set RUN_MODE = 'cpu_smoke' to write this chapter's record")
            print(reported_block("CHAPTER_ID_PLACEHOLDER"))
            '''.replace("CHAPTER_ID_PLACEHOLDER", chapter_id), "gpu-stage"),
    ]


HIDDEN_TESTS = '''
# TEMPLATE: replace these hidden tests with the ones of your exercises (>= 12, each contract clause by name).
# Every invalid-input test also checks a valid call, and every differential test names the clauses its
# inputs must reach (notebooks/AUTHORING.md): a body that only raises must earn nothing.
# %% hidden exercise=pass_share points=1 name=refuses_ints_for_outcomes
# hint: an outcome is a bool; 0 and 1 are not outcomes.
assert pass_share([False, True]) == 0.5
for bad in ([1, 0], [True, 1], [], "TF", None):
    try:
        pass_share(bad)
    except ValueError:
        continue
    raise AssertionError(f"{bad!r} accepted")

# %% hidden exercise=pass_share points=1 name=returns_a_float_share
# hint: the share is a float even when it is 0 or 1.
assert type(pass_share([True, True])) is float and pass_share([True, True]) == 1.0

# %% hidden exercise=pass_share points=1 name=agrees_with_reference_on_generated_groups
# hint: any list, valid or not: the same share, or the same error.
from hypothesis import strategies as st
items = st.one_of(st.booleans(), st.integers(0, 1), st.none())
reference.agrees("pass_share", st.tuples(st.lists(items, max_size=6)), cases=80, clauses={
    "only bools (valid)": lambda outcomes: bool(outcomes) and all(type(item) is bool for item in outcomes),
    "an int outcome": lambda outcomes: any(type(item) is int for item in outcomes),
    "a None outcome": lambda outcomes: None in outcomes,
    "no outcome": lambda outcomes: outcomes == [],
})

# %% hidden exercise=pass_share points=1 name=counts_every_outcome
# hint: the denominator is every outcome of the group.
assert pass_share([True] + [False] * 3) == 0.25

# %% hidden exercise=rank_groups points=1 name=ties_by_name
# hint: equal shares are ordered by name.
assert rank_groups({"z": 0.5, "m": 0.5, "a": 0.5}) == ["a", "m", "z"]

# %% hidden exercise=rank_groups points=1 name=refuses_bad_shares
# hint: check every name and every share.
assert rank_groups({"a": 0.25, "b": 1}) == ["b", "a"]
for bad in ({"a": 1.5}, {"a": float("nan")}, {"": 0.5}, {"a": True}, [("a", 0.5)]):
    try:
        rank_groups(bad)
    except ValueError:
        continue
    raise AssertionError(f"{bad!r} accepted")

# %% hidden exercise=rank_groups points=1 name=agrees_with_reference_on_generated_shares
# hint: any dict, valid or not: the same order, or the same error.
from hypothesis import strategies as st
shares = st.dictionaries(st.sampled_from(["a", "b", "c", ""]), st.one_of(st.floats(-1, 2), st.booleans()), max_size=4)
reference.agrees("rank_groups", st.tuples(shares), cases=80, clauses={
    "an empty name": lambda shares: "" in shares,
    "a share outside [0, 1]": lambda shares: any(not isinstance(v, bool) and not 0 <= v <= 1 for v in shares.values()),
    "a bool share": lambda shares: any(isinstance(v, bool) for v in shares.values()),
    "tied shares": lambda shares: len(set(shares.values())) < len(shares),
})

# %% hidden exercise=rank_groups points=1 name=empty_is_an_empty_ranking
# hint: no group, no ranking.
assert rank_groups({}) == []

# %% hidden exercise=gate points=1 name=minimum_is_inclusive
# hint: a share equal to the minimum is admitted.
assert gate({"a": 0.5}, 0.5)["admitted"] == ["a"]

# %% hidden exercise=gate points=1 name=refuses_a_bad_minimum
# hint: the minimum is a finite number in [0, 1].
assert gate({"a": 0.5}, 0) == {"decision": "accept", "admitted": ["a"]}
for bad in (-0.1, 1.1, float("nan"), True):
    try:
        gate({"a": 0.5}, bad)
    except ValueError:
        continue
    raise AssertionError(f"{bad!r} accepted")

# %% hidden exercise=gate points=1 name=admitted_in_rank_order
# hint: admitted groups come in rank_groups order.
assert gate({"b": 0.6, "a": 0.9, "c": 0.6}, 0.6)["admitted"] == ["a", "b", "c"]

# %% hidden exercise=gate points=1 name=agrees_with_reference_on_generated_gates
# hint: any shares and minimum: the same decision, or the same error.
from hypothesis import strategies as st
shares = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.floats(0, 1), max_size=3)
reference.agrees("gate", st.tuples(shares, st.one_of(st.floats(-0.5, 1.5), st.booleans())), cases=80, clauses={
    "a minimum outside [0, 1]": lambda shares, minimum: not isinstance(minimum, bool) and not 0 <= minimum <= 1,
    "a bool minimum": lambda shares, minimum: isinstance(minimum, bool),
    "a share exactly at the minimum": lambda shares, minimum: minimum in shares.values(),
    "nothing admitted": lambda shares, minimum: not isinstance(minimum, bool) and 0 <= minimum <= 1 and all(
        v < minimum for v in shares.values()),
})
'''

MUTANTS = {
    "ints_accepted": ("pass_share", "accepts 0/1 for outcomes",
                      [('        raise ValueError("every outcome must be a bool")', "        pass")]),
    "empty_allowed": ("pass_share", "divides an empty group by zero instead of refusing it",
                      [("    if not isinstance(outcomes, list) or not outcomes:", "    if not isinstance(outcomes, list):")]),
    "integer_division": ("pass_share", "uses floor division",
                         [("    return sum(outcomes) / len(outcomes)", "    return sum(outcomes) // len(outcomes)")]),
    "ties_in_input_order": ("rank_groups", "keeps equal shares in input order",
                            [("key=lambda name: (-shares[name], name)", "key=lambda name: -shares[name]")]),
    "ascending": ("rank_groups", "ranks the lowest share first",
                  [("key=lambda name: (-shares[name], name)", "key=lambda name: (shares[name], name)")]),
    "range_unchecked": ("rank_groups", "does not check the share range",
                        [("or not 0 <= share <= 1:", ":")]),
    "strict_minimum": ("gate", "admits only shares above the minimum",
                       [("if shares[name] >= minimum]", "if shares[name] > minimum]")]),
    "minimum_unchecked": ("gate", "accepts any minimum", [('        raise ValueError("minimum must be a finite number in [0, 1]")',
                                                          "        pass")]),
}


@dataclass
class Scaffold:
    notebook: Path
    hidden_tests: Path
    mutants: Path


def _write_mutants(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (exercise, mistake, edits) in MUTANTS.items():
        body = "".join(f"@@ replace\n{old}\n@@ with\n{new}\n@@ end\n" for old, new in edits)
        (folder / f"{name}.mutant").write_text(
            f"# mutant: {name}\n# exercise: {exercise}\n# mistake: TEMPLATE: {mistake}\n{body}",
            encoding="utf-8")


def _mark_implemented(root: Path, chapter_id: str) -> None:
    """Set the catalog entry's status to implemented (text edit: comments and order stay)."""
    path = root / CATALOG_PATH
    text = path.read_text(encoding="utf-8")
    blocks = text.split("[[chapter]]")
    for index, block in enumerate(blocks):
        if re.search(rf'^id = "{re.escape(chapter_id)}"$', block, flags=re.M):
            block = re.sub(r'^status = "planned"$', 'status = "implemented"\ngpu_stage = "TEMPLATE: describe Step 5"',
                           block, count=1, flags=re.M)
            blocks[index] = block
    path.write_text("[[chapter]]".join(blocks), encoding="utf-8")


def new_chapter(root: Path, chapter_id: str) -> Scaffold:
    """Write a new chapter from the template for a planned catalog entry; refuse to overwrite anything."""
    chapter = find_chapter(chapter_id, root)
    if chapter.implemented:
        raise ConfigError(f"chapter {chapter.id} is already implemented ({chapter.notebook}).")
    notebook_path = root / "notebooks" / f"{chapter.slug}.ipynb"
    hidden = hidden_tests_path(root, chapter)
    mutants = mutants_dir(root, chapter)
    existing = [str(path) for path in (notebook_path, hidden, mutants) if path.exists()]
    if existing:
        raise ConfigError(f"refusing to overwrite {', '.join(existing)}; remove them or pick another chapter.")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = template_cells(chapter.id, chapter.title_zh)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["course"] = {"schema_version": COURSE_METADATA_VERSION, "chapter_id": chapter.id,
                                   "slug": chapter.slug}
    write_notebook(notebook, notebook_path)
    hidden.parent.mkdir(parents=True, exist_ok=True)
    hidden.write_text(HIDDEN_TESTS.lstrip("\n"), encoding="utf-8")
    _write_mutants(mutants)
    _mark_implemented(root, chapter.id)
    return Scaffold(notebook_path, hidden, mutants)
