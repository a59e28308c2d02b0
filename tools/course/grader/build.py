"""Turn a chapter notebook plus its hidden tests into the nbgrader source notebook.

The build is an ordered list of small steps (`BUILD_STEPS`), each taking and returning the
notebook. The order matters: the graded part is cut first, solutions are filled before cells are
marked, and hidden tests are inserted after the visible tests they extend.

`clause_coverage` then runs the chapter's differential tests with the reference alone and counts,
for each contract clause a test names, how many of its seeded cases reach it; `coverage_problems`
says what fails the build (see `tools.course.grader.differential`).
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import io
import keyword
import re
import textwrap
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
from nbformat import NotebookNode

from tools.core.catalog import Chapter
from tools.course.cells import (
    SOLUTION_PLACEHOLDER,
    cells_with_role,
    course_meta,
    exercise_id,
    read_notebook,
    role,
)
from tools.course.grader.boundary import CHANGES_KEY
from tools.course.grader.differential import CallCoverage, run_clause_coverage
from tools.course.grader.reads_after import reads_after_call
from tools.errors import ConfigError
from tools.course.layout import GRADING_DIR, hidden_tests_path, mutants_dir, source_notebook_path  # noqa: F401 - re-exported

NBGRADER_SCHEMA_VERSION = 3
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"

_HIDDEN_HEADER = re.compile(r"^# %% hidden (.*)$")
_HEADER_FIELD = re.compile(r"(\w+)=(\S+)")


# ---------------------------------------------------------------------------
# Inputs: hidden tests, mutants, reference functions
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class HiddenTest:
    """One hidden grade cell of a chapter."""

    exercise: str
    name: str
    points: float
    hint: str
    source: str


@dataclass(frozen=True)
class Mutant:
    """A planted wrong solution of one exercise."""

    name: str
    exercise: str
    mistake: str
    source: str
    path: Path


def parse_hidden_tests(path: Path) -> list[HiddenTest]:
    """Blocks of `# %% hidden exercise=.. points=.. name=..` + `# hint: ..` + code."""
    if not path.is_file():
        raise ConfigError(f"hidden tests {path} do not exist; every graded chapter needs them.")
    blocks: list[tuple[int, str, list[str]]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _HIDDEN_HEADER.match(line)
        if match:
            blocks.append((number, match.group(1), []))
        elif blocks:
            blocks[-1][2].append(line)
        elif line.strip() and not line.startswith("#"):
            raise ConfigError(f"{path}:{number}: code before the first '# %% hidden' header")
    tests, names = [], set()
    for number, header, lines in blocks:
        fields = dict(_HEADER_FIELD.findall(header))
        missing = [key for key in ("exercise", "points", "name") if key not in fields]
        if missing:
            raise ConfigError(f"{path}:{number}: hidden test header lacks {', '.join(missing)}")
        hint_lines = [line for line in lines if line.startswith("# hint:")]
        if len(hint_lines) != 1:
            raise ConfigError(f"{path}:{number}: hidden test {fields['name']} needs exactly one '# hint:' line")
        code = "\n".join(line for line in lines if not line.startswith("# hint:")).strip("\n")
        try:
            ast.parse(code)
        except SyntaxError as error:
            raise ConfigError(f"{path}:{number}: hidden test {fields['name']} does not parse: {error}") from None
        if fields["name"] in names:
            raise ConfigError(f"{path}:{number}: duplicate hidden test name {fields['name']}")
        names.add(fields["name"])
        points = float(fields["points"])
        if points <= 0:
            raise ConfigError(f"{path}:{number}: points must be positive")
        tests.append(HiddenTest(fields["exercise"], fields["name"], points,
                                hint_lines[0][len("# hint:"):].strip(), code))
    return tests


MUTANT_SUFFIX = ".mutant"
_REPLACE, _WITH, _END = "@@ replace", "@@ with", "@@ end"


def parse_mutant_file(path: Path) -> tuple[dict, list[tuple[str, str]]]:
    """The `# key: value` header and the `(old, new)` edits of a mutant file.

    An edit is `@@ replace` + lines of the reference + `@@ with` + their replacement + `@@ end`.
    """
    header: dict[str, str] = {}
    edits: list[tuple[str, str]] = []
    part, old, new = None, [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        marker = line.strip()
        if marker == _REPLACE and part is None:
            part, old, new = "old", [], []
        elif marker == _WITH and part == "old":
            part = "new"
        elif marker == _END and part == "new":
            edits.append(("\n".join(old), "\n".join(new)))
            part = None
        elif marker in (_REPLACE, _WITH, _END):
            raise ConfigError(f"{path}:{number}: unexpected {marker!r}; an edit is {_REPLACE} / {_WITH} / {_END}")
        elif part == "old":
            old.append(line)
        elif part == "new":
            new.append(line)
        elif match := re.match(r"^# (mutant|exercise|mistake): (.+)$", line):
            header[match.group(1)] = match.group(2).strip()
        elif line.strip() and not line.startswith("#"):
            raise ConfigError(f"{path}:{number}: text outside an edit block")
    if part is not None:
        raise ConfigError(f"{path}: the last edit is not closed with {_END}")
    return header, edits


def apply_edits(source: str, edits: list[tuple[str, str]], where: Path) -> str:
    """Apply each `(old, new)` edit; `old` must stand exactly once in the current source."""
    for index, (old, new) in enumerate(edits, start=1):
        count = source.count(old) if old else 0
        if count != 1:
            raise ConfigError(f"{where}: edit {index} matches the reference {count} times (needs exactly once); "
                              "the reference changed: update the mutant")
        source = source.replace(old, new)
    return source


def _mutant_header(path: Path, header: dict) -> None:
    missing = [key for key in ("mutant", "exercise", "mistake") if key not in header]
    if missing:
        raise ConfigError(f"{path}: header lacks {', '.join('# ' + key + ':' for key in missing)}")
    if header["mutant"] != path.stem:
        raise ConfigError(f"{path}: '# mutant: {header['mutant']}' must equal the file name")


def _edited_reference(path: Path, chapter_notebook: NotebookNode) -> Mutant:
    header, edits = parse_mutant_file(path)
    _mutant_header(path, header)
    if not edits:
        raise ConfigError(f"{path}: has no edit, so it would be the reference itself")
    reference = reference_source(chapter_notebook, header["exercise"])
    source = apply_edits(reference, edits, path)
    try:
        ast.parse(source)
    except SyntaxError as error:
        raise ConfigError(f"{path}: the edited reference does not parse: {error}") from None
    if source == reference:
        raise ConfigError(f"{path}: the edits leave the reference unchanged")
    return Mutant(path.stem, header["exercise"], header["mistake"], source, path)


COPY_SIMILARITY = 0.5
"""A whole-implementation mutant whose exercise function shares at least this share of its code shape
with the reference is a slip in a copy of the reference: it must be stored as a `.mutant` edit."""


def code_shape(source: str, name: str) -> list[str]:
    """The token shape of the body of function `name` in `source`: names, strings and numbers replaced
    by one symbol each, docstring and comments dropped, so renaming variables does not hide a copy."""
    function = next((node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
                     and node.name == name), None)
    if function is None:
        return []
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    shape = []  # the body only: every implementation shares the signature
    for token in tokenize.generate_tokens(io.StringIO("\n".join(ast.unparse(node) for node in body)).readline):
        if token.type == tokenize.NAME:
            shape.append(token.string if keyword.iskeyword(token.string) else "NAME")
        elif token.type in (tokenize.STRING, tokenize.NUMBER):
            shape.append("LITERAL")
        elif token.type == tokenize.OP:
            shape.append(token.string)
    return shape


def copy_similarity(mutant_source: str, reference: str, name: str) -> float:
    """How much of function `name`'s code shape the mutant shares with the reference (0 to 1)."""
    return difflib.SequenceMatcher(None, code_shape(reference, name), code_shape(mutant_source, name),
                                   autojunk=False).ratio()


def _whole_implementation(path: Path, chapter_notebook: NotebookNode) -> Mutant:
    text = path.read_text(encoding="utf-8")
    header = dict(re.findall(r"^# (mutant|exercise|mistake): (.+)$", text, flags=re.MULTILINE))
    _mutant_header(path, header)
    functions = [node.name for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)]
    if header["exercise"] not in functions:
        raise ConfigError(f"{path}: does not define the exercise function {header['exercise']}")
    similarity = copy_similarity(text, reference_source(chapter_notebook, header["exercise"]), header["exercise"])
    if similarity >= COPY_SIMILARITY:
        raise ConfigError(f"{path}: {similarity:.0%} of its code shape is the reference's; a slip in a copy of the "
                          f"reference is stored as a .mutant edit (notebooks/AUTHORING.md), not as a whole file")
    return Mutant(path.stem, header["exercise"], header["mistake"], text, path)


def load_mutants(directory: Path, chapter_notebook: NotebookNode) -> list[Mutant]:
    """The planted wrong solutions of a chapter, in two forms.

    `<name>.mutant`: the reference of one exercise with small edits applied (a slip in otherwise
    correct code); stored as edits, not a copy, so it follows the reference and fails loudly when
    the reference no longer contains what it changes. `<name>.py`: a whole wrong implementation,
    written the way a learner with the wrong idea would write it.
    """
    mutants = [_edited_reference(path, chapter_notebook) for path in sorted(directory.glob(f"*{MUTANT_SUFFIX}"))]
    mutants += [_whole_implementation(path, chapter_notebook) for path in sorted(directory.glob("*.py"))]
    names = [mutant.name for mutant in mutants]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"{directory}: mutant name(s) used twice: {', '.join(duplicates)}")
    return sorted(mutants, key=lambda mutant: mutant.name)


def reference_functions(notebook: NotebookNode) -> dict[str, tuple[str, ast.FunctionDef]]:
    """`name -> (cell source, FunctionDef)` of every function of the reference-solution cells."""
    found = {}
    for index, cell in cells_with_role(notebook, "reference-solution"):
        tree = ast.parse(cell.source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = (cell.source, node)
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                raise ConfigError(
                    f"reference cell {index}: only imports and exercise functions may stand at top level "
                    f"(line {node.lineno}); nest helpers inside the exercise function."
                )
    return found


def reference_source(notebook: NotebookNode, name: str) -> str:
    """Full source of the reference implementation of exercise `name`."""
    functions = reference_functions(notebook)
    if name not in functions:
        raise ConfigError(f"the reference solution does not define {name}")
    source, node = functions[name]
    return ast.get_source_segment(source, node, padded=False)


def reference_body(source: str, node: ast.FunctionDef) -> str:
    """The body of a reference function without its docstring, dedented."""
    lines = source.splitlines()
    body = node.body
    has_docstring = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
        and isinstance(body[0].value.value, str)
    start = (body[0].end_lineno + 1) if has_docstring else body[0].lineno
    if has_docstring and len(body) == 1:
        raise ConfigError(f"reference {node.name} has only a docstring")
    if node.decorator_list:
        raise ConfigError(f"reference {node.name} must not be decorated")
    return textwrap.dedent("\n".join(lines[start - 1:node.end_lineno]))


# ---------------------------------------------------------------------------
# Build steps
# ---------------------------------------------------------------------------

@dataclass
class BuildContext:
    chapter: Chapter
    references: dict[str, tuple[str, ast.FunctionDef]]
    hidden_tests: list[HiddenTest]
    reference_cells: str = ""
    exercises: list[str] = field(default_factory=list)
    changes: dict[str, frozenset[str]] = field(default_factory=dict)  # exercise -> what its contract lets it change


def _nbgrader(cell: NotebookNode, grade_id: str, *, grade: bool, solution: bool, locked: bool,
              points: float | None = None) -> None:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": NBGRADER_SCHEMA_VERSION,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta


def keep_graded_part(notebook: NotebookNode, context: BuildContext) -> NotebookNode:
    """Keep the cells before STOP HERE: the reference, its explanation and Step 5 are not graded."""
    stops = [index for index, _ in cells_with_role(notebook, "stop-here")]
    if len(stops) != 1:
        raise ConfigError(f"{context.chapter.notebook}: needs exactly one stop-here cell to be graded")
    notebook.cells = notebook.cells[:stops[0]]
    context.exercises = [exercise_id(cell) for _, cell in cells_with_role(notebook, "exercise")]
    context.changes = {exercise_id(cell): frozenset(course_meta(cell).get(CHANGES_KEY) or ())
                       for _, cell in cells_with_role(notebook, "exercise")}
    if not context.exercises:
        raise ConfigError(f"{context.chapter.notebook}: has no exercise cells to grade")
    return notebook


def fill_solution_regions(notebook: NotebookNode, context: BuildContext) -> NotebookNode:
    """Put the reference body between solution markers where the stub says `# YOUR CODE HERE`."""
    for index, cell in cells_with_role(notebook, "exercise"):
        name = exercise_id(cell)
        if name not in context.references:
            raise ConfigError(f"cell {index}: the reference solution does not define {name}")
        lines = cell.source.splitlines()
        spots = [i for i, line in enumerate(lines) if line.strip() == SOLUTION_PLACEHOLDER]
        if len(spots) != 1:
            raise ConfigError(f"cell {index} ({name}): needs exactly one {SOLUTION_PLACEHOLDER!r} line")
        spot = spots[0]
        indent = lines[spot][: len(lines[spot]) - len(lines[spot].lstrip())]
        body = textwrap.indent(reference_body(*context.references[name]), indent)
        lines[spot:spot + 1] = [indent + BEGIN_SOLUTION, *body.splitlines(), indent + END_SOLUTION]
        cell.source = "\n".join(lines)
        _nbgrader(cell, name, grade=False, solution=True, locked=False)
    return notebook


def mark_visible_tests(notebook: NotebookNode, context: BuildContext) -> NotebookNode:
    """Visible tests become locked grade cells worth their metadata points."""
    for _, cell in cells_with_role(notebook, "visible-tests"):
        meta = course_meta(cell)
        _nbgrader(cell, f"test_{meta['exercise']}", grade=True, solution=False, locked=True,
                  points=float(meta["points"]))
    return notebook


def uses_reference(code: str) -> bool:
    """True when a hidden test reads the name `reference` (a differential test)."""
    return any(isinstance(node, ast.Name) and node.id == "reference" for node in ast.walk(ast.parse(code)))


def reference_preamble(reference_cells: str) -> str:
    """The line that gives a differential hidden test the chapter's reference implementations."""
    return ("from tools.course.grader.differential import Reference\n"
            f"reference = Reference({reference_cells!r}, globals())")


def hidden_test_cell(test: HiddenTest, reference_cells: str = "") -> NotebookNode:
    """A locked grade cell whose body is removed from the release by nbgrader."""
    code = test.source
    if uses_reference(code):
        code = reference_preamble(reference_cells) + "\n" + code
    source = "\n".join([
        f"# Hidden test `{test.name}` for {test.exercise} ({test.points:g} point(s)): runs when the instructor autogrades.",
        BEGIN_HIDDEN,
        code,
        END_HIDDEN,
    ])
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["raises-exception"]
    cell.metadata["course"] = {"exercise": test.exercise, "hidden_test": test.name, "hint": test.hint}
    _nbgrader(cell, f"hidden_{test.exercise}_{test.name}", grade=True, solution=False, locked=True,
              points=test.points)
    return cell


def hidden_test_reads(context: BuildContext) -> list[str]:
    """Every hidden test that compares a learner's result with an argument it read after the call
    (`reads_after.reads_after_call`), one line each."""
    learner = {name: tuple(argument.arg for argument in [*node.args.posonlyargs, *node.args.args])
               for name, (_, node) in context.references.items() if name in context.exercises}
    return [f"{context.chapter.id}, hidden test {test.name}: {finding.describe()}"
            for test in context.hidden_tests
            for finding in reads_after_call(test.source, learner, context.changes)]


def insert_hidden_tests(notebook: NotebookNode, context: BuildContext) -> NotebookNode:
    """Insert each exercise's hidden tests right after its last visible-tests cell (refused when one reads an
    argument after the call to compare with the result: `hidden_test_reads`)."""
    unknown = sorted({test.exercise for test in context.hidden_tests} - set(context.exercises))
    if unknown:
        raise ConfigError(f"hidden tests name unknown exercise(s): {', '.join(unknown)}")
    reads = hidden_test_reads(context)
    if reads:
        raise ConfigError(f"{len(reads)} hidden-test read(s) of an argument after the learner's function had it; "
                          "compute the expected value before the call, or pass a copy "
                          "(tools/course/grader/reads_after.py):\n" + "\n".join(reads))
    cells = []
    last_visible = {exercise_id(cell): index for index, cell in cells_with_role(notebook, "visible-tests")}
    for index, cell in enumerate(notebook.cells):
        cells.append(cell)
        for name, position in last_visible.items():
            if position == index:
                cells.extend(hidden_test_cell(test, context.reference_cells) for test in context.hidden_tests
                             if test.exercise == name)
    missing = [name for name in context.exercises if not any(t.exercise == name for t in context.hidden_tests)]
    if missing:
        raise ConfigError(f"exercise(s) without hidden tests: {', '.join(missing)}")
    notebook.cells = cells
    return notebook


def lock_other_cells(notebook: NotebookNode, context: BuildContext) -> NotebookNode:
    """Every other cell is locked, so autograde restores what a submission changed there."""
    for index, cell in enumerate(notebook.cells):
        if "nbgrader" not in cell.metadata:
            kind = role(cell) or cell.cell_type
            _nbgrader(cell, f"locked_{index:02d}_{kind}".replace("-", "_"), grade=False, solution=False, locked=True)
    return notebook


def clear_outputs(notebook: NotebookNode, context: BuildContext) -> NotebookNode:
    for cell in notebook.cells:
        cell.pop("id", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return notebook


BuildStep = Callable[[NotebookNode, BuildContext], NotebookNode]
BUILD_STEPS: tuple[BuildStep, ...] = (
    keep_graded_part,
    fill_solution_regions,
    mark_visible_tests,
    insert_hidden_tests,
    lock_other_cells,
    clear_outputs,
)


def build_source_notebook(root: Path, chapter: Chapter) -> NotebookNode:
    """The nbgrader source notebook of `chapter`, built in memory."""
    chapter_notebook = read_notebook(chapter.notebook_path(root))
    context = BuildContext(
        chapter=chapter,
        references=reference_functions(chapter_notebook),
        hidden_tests=parse_hidden_tests(hidden_tests_path(root, chapter)),
        reference_cells="\n\n".join(cell.source for _, cell in cells_with_role(chapter_notebook, "reference-solution")),
    )
    notebook = copy.deepcopy(chapter_notebook)
    for step in BUILD_STEPS:
        notebook = step(notebook, context)
    notebook.nbformat, notebook.nbformat_minor = 4, 5
    for cell in notebook.cells:
        cell.id = _stable_cell_id(cell)
    nbformat.validate(notebook)
    return notebook


def _stable_cell_id(cell: NotebookNode) -> str:
    """The grade id as a cell id (64 characters at most); a longer one keeps a hash of the whole id,
    so two long test names that share their first characters never get the same id."""
    cell_id = cell.metadata["nbgrader"]["grade_id"].replace("_", "-")
    if len(cell_id) <= 64:
        return cell_id
    return f"{cell_id[:55]}-{hashlib.sha1(cell_id.encode()).hexdigest()[:8]}"


def render_source_notebook(root: Path, chapter: Chapter) -> str:
    """The exact text `grading build` writes for `chapter`."""
    return nbformat.writes(build_source_notebook(root, chapter)) + "\n"


def build_sources(root: Path, chapters: list[Chapter], *, check: bool = False) -> list[str]:
    """Write (or with `check`, compare) every chapter's source notebook; return stale/written paths."""
    touched = []
    for chapter in chapters:
        target = source_notebook_path(root, chapter)
        text = render_source_notebook(root, chapter)
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current == text:
            continue
        touched.append(str(target.relative_to(root)))
        if not check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    return touched


# ---------------------------------------------------------------------------
# Clause coverage of the differential tests
# ---------------------------------------------------------------------------

def coverage_cells(source: NotebookNode) -> list[dict]:
    """The code cells of a source notebook that the coverage run executes, in order: every cell but
    the tests that do not use `reference` (the solution cells hold the reference)."""
    cells = []
    for cell in source.cells:
        if cell.cell_type != "code":
            continue
        meta, course = cell.metadata.get("nbgrader", {}), cell.metadata.get("course", {})
        differential = bool(course.get("hidden_test")) and "reference = Reference(" in cell.source
        if meta.get("grade") and not differential:
            continue
        cells.append({"source": cell.source, "name": meta.get("grade_id", ""),
                      "test": course.get("hidden_test") if differential else None,
                      "exercise": course.get("exercise") if differential else None})
    return cells


def clause_coverage(root: Path, chapter: Chapter) -> list[CallCoverage]:
    """What every `reference.agrees` call of `chapter`'s hidden tests reaches, with the reference alone."""
    cells = coverage_cells(build_source_notebook(root, chapter))
    if not any(cell["test"] for cell in cells):
        return []
    return run_clause_coverage(cells)


def coverage_problems(chapter_id: str, calls: list[CallCoverage]) -> list[str]:
    """What fails the build: a named clause no case reaches, a call that names no clause, a call
    whose cases the reference refuses every one of (a body that only raises would pass it)."""
    problems = []
    for call in calls:
        where = f"{chapter_id}, exercise {call.exercise}, hidden test {call.test}"
        if call.clauses is None:
            problems.append(f"{where}: reference.agrees({call.function!r}, ...) names no contract clause; "
                            "pass clauses={name: predicate} (notebooks/AUTHORING.md)")
        for clause, count in (call.clauses or {}).items():
            if count == 0:
                problems.append(f"{where}: no generated case reaches the clause {clause!r} "
                                f"({call.cases} cases drawn)")
        if call.valid == 0:
            problems.append(f"{where}: the reference refuses all {call.cases} generated cases; mix valid inputs in, "
                            "or a body that only raises passes this test")
    return problems


VALID_ROW, REFUSED_ROW = "(valid: the reference returns)", "(invalid: the reference raises)"


def coverage_rows(chapter_id: str, calls: list[CallCoverage]) -> list[tuple[str, str, str, str, int]]:
    """`(chapter, exercise, test, clause, cases)` for every named clause of every call, plus two rows
    per call: how many cases are valid input and how many the reference refuses."""
    rows = []
    for call in calls:
        rows.append((chapter_id, call.exercise, call.test, VALID_ROW, call.valid))
        rows.append((chapter_id, call.exercise, call.test, REFUSED_ROW, call.refused))
        rows.extend((chapter_id, call.exercise, call.test, clause, count) for clause, count in (call.clauses or {}).items())
    return rows


def hard_class_rows(chapter_id: str, calls: list[CallCoverage]) -> list[tuple[str, str, str, str, str]]:
    """`(chapter, exercise, test, clause, classes)`: the hard-value classes the cases reaching each named
    clause contain, and first, per call, those of all its cases and the classes none of them contains."""
    from tools.course.grader.differential import ALL_CASES
    from tools.course.grader.hard_values import HARD_CLASSES

    rows = []
    for call in calls:
        hard = call.hard or {}
        drawn = hard.get(ALL_CASES, [])
        rows.append((chapter_id, call.exercise, call.test, ALL_CASES, ", ".join(drawn) or "-"))
        rows.append((chapter_id, call.exercise, call.test, "(never drawn)",
                     ", ".join(name for name in HARD_CLASSES if name not in drawn) or "-"))
        rows.extend((chapter_id, call.exercise, call.test, clause, ", ".join(hard.get(clause, [])) or "-")
                    for clause in (call.clauses or {}))
    return rows


def format_coverage(rows: list[tuple], last: str = "cases") -> str:
    """The clause-coverage table (or, with `last="hard-value classes"`, the classes table), fixed width;
    a clause no case reaches is marked."""
    headers = ("chapter", "exercise", "hidden test", "clause", last)
    table = [headers, *[(*row[:4], f"{row[4]}" + ("  <- none" if row[4] == 0 and row[3] != REFUSED_ROW else ""))
                        for row in rows]]
    widths = [max(len(str(row[i])) for row in table) for i in range(4)]
    return "\n".join("  ".join([*(str(value).ljust(width) for value, width in zip(row[:4], widths)), str(row[4])])
                     for row in table)
