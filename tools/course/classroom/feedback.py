"""Per-submission feedback that teaches without leaking hidden tests or carrying a script.

nbgrader's own feedback shows every grade cell with its source and traceback, hidden tests
included, and renders whatever HTML a learner's output holds. Here the autograded notebook is first
rewritten: each hidden-test cell becomes its name, points, pass/fail and the hint written for it
(from the trusted source notebook's `metadata.course`), with no source and no output; any other
output that quotes hidden-test code, or shows an input a hidden test sent to the learner's functions
(`hidden_inputs`), is withheld; what the learner's code displayed is kept as plain text (each output cut
to `OUTPUT_CHARS`) and PNG/JPEG images only (no HTML, SVG, JavaScript or Markdown output); cells the
learner added are shown as plain text, cut to `LEARNER_CELL_CHARS`, never highlighted, rendered as
Markdown or raw HTML; metadata comes from the trusted source. nbgrader's GenerateFeedback then renders
the HTML, and a JSON lists the per-exercise and per-test results. Before anything is written, both
files are scanned for the hidden-test lines of every chapter (`course_secret_lines`) and the hidden
inputs, and the page for anything active (scripts, event handlers, frames, `javascript:` links) beyond
what the feedback template itself puts in every page (`HtmlGuard`); a file that fails either check is
refused (`FeedbackLeakError`, `FeedbackUnsafeError`). An autograded notebook larger than the limit is not
rendered at all. The batch renders each submission's feedback in a process of its own with time and
memory limits (`feedback_render`).
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import html
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from tools.course.cells import read_notebook
from tools.course.classroom.hidden_inputs import find_inputs, normalize
from tools.course.grader.build import BEGIN_HIDDEN, END_HIDDEN
from tools.course.layout import CourseLayout, NbgraderCourse
from tools.errors import FeedbackLeakError, GradingError

FEEDBACK_SCHEMA = "course-feedback/v1"
MIN_SECRET_CHARS = 12
WITHHELD = "[output withheld: it quoted hidden-test code]\n"
WITHHELD_INPUTS = "[output withheld: it showed inputs of hidden tests]\n"
OUTPUT_CHARS = 64_000
"""What of one learner output's text the feedback shows (the rest is cut, marked)."""
LEARNER_CELL_CHARS = 4_000
"""What of a cell the learner added the feedback shows, as plain text."""
_TAG = re.compile(r"<[^>]*>")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class GradedTest:
    """A grade cell of the assignment, as the trusted source notebook defines it."""

    grade_id: str
    exercise: str
    kind: str  # "visible" | "hidden"
    name: str
    points: float
    hint: str | None


def _nbgrader(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def exercises_of(source: NotebookNode) -> list[str]:
    """Exercise (solution cell) ids in notebook order."""
    return [_nbgrader(cell)["grade_id"] for cell in source.cells if _nbgrader(cell).get("solution")]


def grade_cells(source: NotebookNode) -> list[GradedTest]:
    """Every grade cell of the source notebook with its exercise, kind, name, points and hint."""
    cells = []
    for cell in source.cells:
        meta = _nbgrader(cell)
        if not meta.get("grade") or meta.get("solution"):
            continue
        course = cell.metadata.get("course", {})
        hidden = course.get("hidden_test")
        cells.append(GradedTest(meta["grade_id"], course.get("exercise"), "hidden" if hidden else "visible",
                              hidden or meta["grade_id"], float(meta["points"]), course.get("hint") if hidden else None))
    return cells


def hidden_sources(source: NotebookNode) -> dict[str, str]:
    """`grade_id -> code between the hidden-test markers` of every hidden-test cell."""
    found = {}
    for cell in source.cells:
        if cell.get("metadata", {}).get("course", {}).get("hidden_test"):
            lines = cell.source.splitlines()
            begin, end = lines.index(BEGIN_HIDDEN), lines.index(END_HIDDEN)
            found[_nbgrader(cell)["grade_id"]] = "\n".join(lines[begin + 1:end])
    return found




def html_text(document: str) -> str:
    """The visible text of an HTML document (tags dropped, entities decoded)."""
    return html.unescape(_TAG.sub("", document))


def secret_lines(source: NotebookNode, *public: NotebookNode) -> list[str]:
    """Normalized hidden-test lines (of at least MIN_SECRET_CHARS) that no `public` notebook shows,
    e.g. the released assignment and the open chapter notebook."""
    seen = normalize("\n".join(cell.source for notebook in public for cell in notebook.cells))
    secrets = set()
    for code in hidden_sources(source).values():
        for line in code.splitlines():
            secret = normalize(line)
            if len(secret) >= MIN_SECRET_CHARS and secret not in seen:
                secrets.add(secret)
    return sorted(secrets)


def course_secret_lines(root: Path, chapter, source: NotebookNode, *public: NotebookNode) -> list[str]:
    """The secrets of every chapter, not only this one: the hidden-test lines of this chapter's source
    notebook and of every file in the course's hidden tests folder (test headers and hints, which
    feedback shows by design, aside), minus what any public notebook shows (`public`, e.g. this
    chapter's release, and every chapter notebook of the course)."""
    from tools.core.catalog import implemented_chapters

    notebooks = list(public)
    for other in implemented_chapters(root):
        path = other.notebook_path(root)
        if path.is_file():
            notebooks.append(read_notebook(path))
    seen = normalize("\n".join(cell.source for notebook in notebooks for cell in notebook.cells))
    lines = [line for code in hidden_sources(source).values() for line in code.splitlines()]
    folder = CourseLayout(root).hidden_tests(chapter.slug).parent
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        lines += [line for line in path.read_text(encoding="utf-8").splitlines()
                  if not line.startswith(("# %% hidden", "# hint:"))]
    secrets = {normalize(line) for line in lines}
    return sorted(secret for secret in secrets if len(secret) >= MIN_SECRET_CHARS and secret not in seen)


def secrets_for(secrets: list[str], autograded: NotebookNode) -> list[str]:
    """The secrets minus lines the student wrote in their own answers (showing those back leaks nothing)."""
    own = normalize("\n".join(cell.source for cell in autograded.cells if _nbgrader(cell).get("solution")))
    return [secret for secret in secrets if secret not in own]


def find_leaks(text: str, secrets: list[str]) -> list[str]:
    """The secrets that occur in `text` (already plain text, not yet normalized)."""
    flat = normalize(text)
    return [secret for secret in secrets if secret in flat]


def _output_text(output: NotebookNode) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return "\n".join([output.get("ename", ""), output.get("evalue", ""), *output.get("traceback", [])])
    data = output.get("data", {})
    return "\n".join(value if isinstance(value, str) else "\n".join(value)
                     for key, value in data.items() if key.startswith("text/") or key.endswith("json"))


def _first_error(cell: NotebookNode) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            message = f"{output.get('ename', '')}: {_ANSI.sub('', output.get('evalue', ''))}".strip(": ")
            return message[:300]
    return None


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

def cell_results(cells: list[GradedTest], scores: dict[str, tuple[float, float]]) -> list[dict]:
    """One entry per grade cell: `scores` maps grade_id -> (score, max score) from the gradebook."""
    results = []
    for cell in cells:
        score, max_score = scores[cell.grade_id]
        entry = {"exercise": cell.exercise, "kind": cell.kind, "name": cell.name, "points": max_score,
                 "score": score, "passed": score >= max_score}
        if cell.kind == "hidden":
            entry["hint"] = cell.hint
        results.append(entry)
    return results


def exercise_summary(exercises: list[str], results: list[dict]) -> list[dict]:
    """Per exercise: score, max score, passed (full marks) and its tests."""
    summary = []
    for exercise in exercises:
        tests = [result for result in results if result["exercise"] == exercise]
        score, max_score = sum(t["score"] for t in tests), sum(t["points"] for t in tests)
        summary.append({"exercise": exercise, "score": score, "max_score": max_score,
                        "passed": bool(tests) and score >= max_score, "tests": tests})
    return summary


# ---------------------------------------------------------------------------
# Sanitizing and writing
# ---------------------------------------------------------------------------

def hidden_cell_text(cell: GradedTest, result: dict) -> str:
    verdict = "PASSED" if result["passed"] else "FAILED"
    return "\n".join([
        f"# Hidden test `{cell.name}` for {cell.exercise}: {verdict} "
        f"({result['score']:g} / {result['points']:g} point(s))",
        f"# Hint: {cell.hint}",
        "# The code of hidden tests is not shown.",
    ])


SAFE_OUTPUT_TYPES = ("text/plain", "image/png", "image/jpeg")
"""What of a learner's displayed output reaches the feedback page: text and raster images, nothing that renders
as markup or runs."""
LEARNER_CELL_NOTE = "# A cell you added: its text is shown below as plain output, not run again and not highlighted."


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters not shown]\n"


def learner_cell(cell: NotebookNode) -> NotebookNode:
    """A cell the learner added, as the feedback shows it: a note, and its first `LEARNER_CELL_CHARS` characters
    as a plain text output (no syntax highlighting, no Markdown, no HTML)."""
    shown = nbformat.v4.new_code_cell(LEARNER_CELL_NOTE)
    shown.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                            text=_cut(_text(cell.get("source", "")), LEARNER_CELL_CHARS))]
    return shown


def _image(value) -> str | None:
    """Base64 image data as it is, or None when it is not base64."""
    text = _text(value).replace("\n", "")
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def safe_output(output: NotebookNode) -> NotebookNode | None:
    """The output as plain data (see SAFE_OUTPUT_TYPES), or None when nothing of it is safe to show."""
    kind = output.get("output_type")
    if kind == "stream":
        return nbformat.v4.new_output("stream", name="stderr" if output.get("name") == "stderr" else "stdout",
                                      text=_cut(_text(output.get("text", "")), OUTPUT_CHARS))
    if kind == "error":
        return nbformat.v4.new_output("error", ename=_cut(_text(output.get("ename", "")), 200),
                                      evalue=_cut(_text(output.get("evalue", "")), OUTPUT_CHARS // 4),
                                      traceback=[_cut(_text(line), 2000) for line in output.get("traceback", [])][:200])
    if kind not in ("execute_result", "display_data"):
        return None
    data = {}
    for key in SAFE_OUTPUT_TYPES:
        if key in output.get("data", {}):
            value = _cut(_text(output["data"][key]), OUTPUT_CHARS) if key == "text/plain" else _image(output["data"][key])
            if value is not None:
                data[key] = value
    if not data:
        return None
    if kind == "execute_result":
        return nbformat.v4.new_output("execute_result", data=data, execution_count=None)
    return nbformat.v4.new_output("display_data", data=data)


def _shown_by_learner(output: NotebookNode) -> str:
    """The text of an output that learner code may have written: all of it, but an error's traceback (the
    grader's frames, quoting test code)."""
    if output.get("output_type") == "error":
        return "\n".join([_text(output.get("ename", "")), _text(output.get("evalue", ""))])
    return _output_text(output)


def withhold_inputs(notebook: NotebookNode, hidden_inputs: set[str] | frozenset[str]) -> int:
    """Replace, in place, every output of `notebook` that shows a hidden test's input; return how many."""
    withheld = 0
    for cell in notebook.cells:
        outputs = cell.get("outputs") or []
        for index, output in enumerate(outputs):
            if find_inputs(_shown_by_learner(output), hidden_inputs):
                outputs[index] = nbformat.v4.new_output("stream", name="stderr", text=WITHHELD_INPUTS)
                withheld += 1
    return withheld


def sanitize_notebook(autograded: NotebookNode, cells: list[GradedTest], results: list[dict],
                      secrets: list[str], source: NotebookNode | None = None,
                      hidden_inputs: set[str] | frozenset[str] = frozenset()) -> NotebookNode:
    """A copy of the autograded notebook fit for learners (see the module docstring). With the trusted
    `source`, cells it does not hold (added by the learner) are shown as plain text (`learner_cell`), and every
    kept cell's metadata is the source's nbgrader metadata only."""
    notebook = copy.deepcopy(autograded)
    by_id = {cell.grade_id: (cell, result) for cell, result in zip(cells, results)}
    trusted = {_nbgrader(cell).get("grade_id"): cell for cell in source.cells} if source is not None else None
    if source is not None:
        notebook.metadata = {"kernelspec": dict(source.metadata.get("kernelspec", {})),
                             "language_info": {"name": "python"}}
    kept = []
    for cell in notebook.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id in by_id and by_id[grade_id][0].kind == "hidden":
            test, result = by_id[grade_id]
            cell.source = hidden_cell_text(test, result)
            cell.outputs = []
            cell.execution_count = None
            cell.metadata = {"nbgrader": dict(_nbgrader(cell))}
            kept.append(cell)
            continue
        if trusted is not None:
            original = trusted.get(grade_id) if grade_id is not None else None
            if original is None or original.cell_type != cell.cell_type:
                kept.append(learner_cell(cell))
                continue
            else:
                cell.metadata = {"nbgrader": dict(_nbgrader(original))}
                if cell.cell_type != "code":
                    cell.source = original.source  # a locked cell: the trusted text, whatever was submitted
                cell.pop("attachments", None)
        if cell.cell_type == "code":
            outputs = [safe_output(output) for output in cell.get("outputs", [])]
            cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=WITHHELD)
                            if find_leaks(_output_text(output), secrets)
                            else nbformat.v4.new_output("stream", name="stderr", text=WITHHELD_INPUTS)
                            if find_inputs(_shown_by_learner(output), hidden_inputs) else output
                            for output in outputs if output is not None]
            count = cell.get("execution_count")
            cell.execution_count = count if isinstance(count, int) and not isinstance(count, bool) else None
        kept.append(cell)
    notebook.cells = kept
    return notebook


# ---------------------------------------------------------------------------
# Anything active on the page
# ---------------------------------------------------------------------------

ACTIVE_TAGS = {"script", "iframe", "frame", "object", "embed", "form", "base", "applet", "svg", "math", "link",
               "meta", "style"}
ACTIVE_URL = re.compile(r"^\s*(javascript|vbscript|data\s*:\s*text/html)", re.IGNORECASE)


class _ActiveElements(HTMLParser):
    """Signatures of what could run or load something in a page: active tags (with their attributes and,
    for inline ones, a hash of their text), event handler attributes, script URLs."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: Counter = Counter()
        self._open: list[list] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.lower().startswith("on"):
                self.found[f"handler {tag} {name}={value}"] += 1
            if value and name.lower() in ("href", "src", "action", "formaction", "data", "xlink:href") \
                    and ACTIVE_URL.match(value):
                self.found[f"url {tag} {name}={value[:80]}"] += 1
        if tag in ACTIVE_TAGS:
            self._open.append([tag, sorted((name, value or "") for name, value in attrs), []])
            if tag in ("base", "meta", "link", "embed", "frame"):
                self.handle_endtag(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag in ACTIVE_TAGS and self._open and self._open[-1][0] == tag:
            self.handle_endtag(tag)

    def handle_data(self, data):
        if self._open:
            self._open[-1][2].append(data)

    def handle_endtag(self, tag):
        if self._open and self._open[-1][0] == tag:
            name, attrs, text = self._open.pop()
            digest = hashlib.sha256("".join(text).encode("utf-8")).hexdigest()[:16]
            self.found[f"{name} {attrs} text:{digest}"] += 1


def active_elements(document: str) -> Counter:
    parser = _ActiveElements()
    parser.feed(document)
    parser.close()
    return parser.found


class HtmlGuard:
    """What the feedback template itself makes active in every page, learned from a page of trusted
    content (the released notebook, rendered the same way); a learner's page may hold nothing more."""

    def __init__(self, release: NotebookNode):
        self.release = release
        self.allowed: Counter | None = None

    def learn(self, document: str) -> None:
        self.allowed = active_elements(document)

    def problems(self, document: str) -> list[str]:
        if self.allowed is None:
            raise GradingError("the feedback guard has not seen a trusted page yet")
        return [f"{signature[:120]} (x{count})" for signature, count in (active_elements(document) - self.allowed).items()]


def feedback_record(*, chapter: str, slug: str, student: str, exercises: list[str], results: list[dict],
                    autograded: NotebookNode, enforced: dict | None) -> dict:
    """The feedback JSON: totals, per exercise (with its tests) and the limits the run enforced."""
    shown = set(exercises) | {result["name"] for result in results if result["kind"] == "visible"}
    errors = {_nbgrader(cell)["grade_id"]: _first_error(cell) for cell in autograded.cells
              if _nbgrader(cell).get("grade_id") in shown}
    summary = exercise_summary(exercises, results)
    for item in summary:
        item["solution_cell_error"] = errors.get(item["exercise"])
        for test in item["tests"]:
            if test["kind"] == "visible":
                test["error"] = errors.get(test["name"])
    return {
        "schema_version": FEEDBACK_SCHEMA,
        "chapter": chapter,
        "assignment": slug,
        "student": student,
        "score": sum(item["score"] for item in summary),
        "max_score": sum(item["max_score"] for item in summary),
        "exercises": summary,
        "limits": learner_limits(enforced),
    }


LEARNER_LIMITS = ("cell_timeout_s", "notebook_timeout_s", "memory_bytes", "cpu_seconds", "max_processes",
                  "file_size_bytes")


def learner_limits(enforced: dict | None) -> dict | None:
    """The limits a learner's notebook ran under (no host paths or uids; the batch record has those)."""
    if enforced is None:
        return None
    limits = {key: enforced.get(key) for key in LEARNER_LIMITS}
    limits["network"] = "blocked" if enforced.get("network", "").startswith("own network namespace") else "not blocked"
    return limits


def generate_feedback_html(course_dir: Path, slug: str, student: str, notebook: NotebookNode,
                           db_url: str, course_id: str) -> str:
    """Render `notebook` with nbgrader's GenerateFeedback in the worker's course `course_dir`
    (scores from the gradebook at `db_url`); return the HTML."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    folders = NbgraderCourse(course_dir)
    autograded = folders.autograded(student, slug)
    if autograded.exists():
        autograded.unlink()
    autograded.write_text(nbformat.writes(notebook), encoding="utf-8")
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    coursedir = CourseDirectory(root=str(course_dir), db_url=db_url, course_id=course_id,
                                assignment_id=slug, student_id=student)
    converter = GenerateFeedback(coursedir=coursedir, config=config)
    converter.force = True
    converter.start()
    return (folders.feedback_dir(student, slug) / f"{slug}.html").read_text(encoding="utf-8")


class FeedbackUnsafeError(FeedbackLeakError):
    """The rendered page holds something active (a script, an event handler, ...) the template does not put there."""


def write_feedback(target_dir: Path, slug: str, html_document: str, record: dict,
                   secrets: list[str], guard: HtmlGuard | None = None,
                   hidden_inputs: set[str] | frozenset[str] = frozenset()) -> tuple[Path, Path]:
    """Scan both files for hidden-test code and hidden tests' inputs (and, with `guard`, the page for anything
    active the template does not put there), then write `<slug>.html` and `<slug>.json` to `target_dir`."""
    payload = json.dumps(record, ensure_ascii=False, indent=2) + "\n"
    leaks = find_leaks(html_text(html_document), secrets) + find_leaks(payload, secrets)
    if leaks:
        raise FeedbackLeakError(f"feedback for {record['student']} would show {len(leaks)} hidden-test line(s), "
                                f"e.g. {leaks[0][:60]!r}; not written")
    inputs = find_inputs(html_text(html_document), hidden_inputs) + find_inputs(payload, hidden_inputs)
    if inputs:
        raise FeedbackLeakError(f"feedback for {record['student']} would show {len(inputs)} input(s) of hidden "
                                "tests; not written")
    unsafe = guard.problems(html_document) if guard is not None else []
    if unsafe:
        raise FeedbackUnsafeError(f"feedback for {record['student']} would hold {len(unsafe)} active element(s) "
                                  f"the template does not make, e.g. {unsafe[0]}; not written")
    if target_dir.exists():
        shutil.rmtree(target_dir)
    target_dir.mkdir(parents=True)
    html_path, json_path = target_dir / f"{slug}.html", target_dir / f"{slug}.json"
    html_path.write_text(html_document, encoding="utf-8")
    json_path.write_text(payload, encoding="utf-8")
    return html_path, json_path


MAX_AUTOGRADED_BYTES = 32 * 2 ** 20
"""An autograded notebook larger than this is not rendered into feedback (its outputs were capped long before)."""


def write_student_feedback(course: Path, chapter, student: str, autograded_path: Path, work_dir: Path,
                           cells: list[GradedTest], exercises: list[str], results: list[dict], secrets: list[str],
                           course_id: str, enforced: dict | None, *, source: NotebookNode | None = None,
                           guard: HtmlGuard | None = None, max_bytes: int = MAX_AUTOGRADED_BYTES,
                           hidden_inputs: set[str] | frozenset[str] = frozenset()) -> dict:
    """Sanitize one student's autograded notebook, render it in `work_dir` (a private nbgrader course
    folder whose `autograded/` copy is replaced) and write `course/feedback/<student>/<slug>.{html,json}`.
    With `source` (the trusted source notebook) learner-added cells are shown as text and metadata is the
    source's; with `guard` the page may hold nothing active beyond the template's (learned first, from the
    release rendered the same way); no output may show one of `hidden_inputs` (`hidden_inputs.find_inputs`).

    Returns `{"written": True, "html", "json"}` or `{"written": False, "error"}`: a failure is
    recorded for this student, never raised, so one notebook cannot stop a class.
    """
    slug = chapter.slug
    try:
        size = autograded_path.stat().st_size
        if size > max_bytes:
            return {"written": False, "error": f"the autograded notebook is {size / 2 ** 20:.1f} MiB, more than "
                                               f"{max_bytes / 2 ** 20:.0f} MiB; feedback not rendered"}
        autograded = read_notebook(autograded_path)
        own_secrets = secrets_for(secrets, autograded)
        db_url = NbgraderCourse(course).gradebook_url
        if guard is not None and guard.allowed is None:
            trusted_page = sanitize_notebook(guard.release, cells, results, own_secrets, source)
            guard.learn(generate_feedback_html(work_dir, slug, student, trusted_page, db_url, course_id))
        learner = sanitize_notebook(autograded, cells, results, own_secrets, source, hidden_inputs)
        document = generate_feedback_html(work_dir, slug, student, learner, db_url, course_id)
        record = feedback_record(chapter=chapter.id, slug=slug, student=student, exercises=exercises,
                                 results=results, autograded=autograded, enforced=enforced)
        html_path, json_path = write_feedback(NbgraderCourse(course).feedback_dir(student, slug), slug, document, record,
                                              own_secrets, guard, hidden_inputs)
    except FeedbackLeakError as error:
        return {"written": False, "error": str(error)}
    except Exception as error:  # recorded per student: the grade stands, the feedback is reported missing
        return {"written": False, "error": f"{error.__class__.__name__}: {error}"}
    return {"written": True, "html": str(html_path), "json": str(json_path)}
