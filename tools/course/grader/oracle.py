"""A fast stand-in for class grading when proving the graders' strength.

Proving that every planted wrong solution loses points needs the score of each grade cell, not
a Jupyter kernel per submission. The oracle runs in one subprocess per chapter and follows the
grading boundary of class grading (`tools.course.grader.boundary`): the learner's side is an
in-process IPython shell (the same display hook and error handling as a kernel) that runs the
shared setup cells and, per submission, the solution cells and the locked cells after them; the
trusted side is a namespace of its own that runs the setup cells too and every grade cell (with
`boundary.run_cell`, as the trusted grader process does), where each exercise name is a proxy whose
calls cross the same encoding in process (`InProcessChannel`, with the learner's random generators
and grad mode apart). The setup runs once; each submission runs in its own forked copy of that
process, under a per-cell and a per-submission time limit. Each grade cell is scored by nbgrader's own
`determine_grade` from the outputs the cell produced (an error or anything on stderr scores 0, a
numeric result is partial credit), so the rules are nbgrader's, not ours.

`tests/course/grader/test_grading_chapters.py` shows that the oracle and nbgrader agree test for test on the
full planted matrix of real chapters; `grading verify --full` grades everything through nbgrader.

Run as `python -m tools.course.grader.oracle` with a JSON job on stdin (see `run_oracle`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

from tools.course.grader.boundary import exercise_contract
from tools.errors import GradingError

ORACLE_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""One thread per math library: the forked copies must not inherit a thread pool."""


class CellTimeout(Exception):
    """A cell ran past the per-cell limit (nbgrader interrupts the kernel in the same case)."""


@dataclass(frozen=True)
class OracleResult:
    """Scores of one submission: grade_id -> (score, max_score), and the first error per grade cell."""

    student: str
    scores: dict[str, tuple[float, float]]
    errors: dict[str, str]
    seconds: float
    timed_out: bool = False
    stopped_at_first_loss: bool = False


def _nbgrader_meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def job_cells(source: NotebookNode) -> list[dict]:
    """The code cells of an nbgrader source notebook, as the oracle job needs them."""
    cells = []
    for cell in source.cells:
        if cell.cell_type != "code":
            continue
        meta = _nbgrader_meta(cell)
        cells.append({"grade_id": meta.get("grade_id"), "solution": bool(meta.get("solution")),
                      "grade": bool(meta.get("grade")), "points": meta.get("points"), "source": cell.source,
                      "exercise": cell.metadata.get("course", {}).get("exercise"),
                      "contract": exercise_contract(meta["grade_id"], cell.source, cell.metadata).to_json()
                      if meta.get("solution") else None})
    return cells


def run_oracle(source: NotebookNode, submissions: dict[str, dict[str, str]], *, cell_timeout_s: int = 30,
               submission_timeout_s: float = 120.0, cwd: Path | None = None,
               only_exercise: dict[str, str] | None = None,
               keep_going: set[str] | None = None) -> dict[str, OracleResult]:
    """Score each submission (`student -> {solution grade_id: source}`) against `source`.

    `only_exercise` (`student -> exercise`) runs, for those students, only the test cells of that
    exercise (every other cell still runs) and stops at the first of them that loses a point: enough
    to judge whether a mutant of one exercise loses points on it, at a fraction of the cost. Their
    other test cells are missing from `scores`. Students in `keep_going` run every test cell of their
    exercise (to count what a planted body keeps).
    Raises GradingError when the oracle process itself fails (not when a submission does).
    """
    job = {"cells": job_cells(source), "submissions": submissions, "cell_timeout_s": cell_timeout_s,
           "submission_timeout_s": submission_timeout_s, "only_exercise": only_exercise or {},
           "keep_going": sorted(keep_going or ())}
    env = {**os.environ, **ORACLE_ENV}
    with tempfile.TemporaryDirectory(prefix="grading-oracle-") as folder:
        completed = subprocess.run([sys.executable, "-m", "tools.course.grader.oracle"], input=json.dumps(job),
                                   capture_output=True, text=True, cwd=cwd or folder, env=env,
                                   timeout=60 + submission_timeout_s * max(len(submissions), 1))
    if completed.returncode != 0:
        tail = "\n".join(completed.stderr.splitlines()[-15:])
        raise GradingError(f"the grading oracle exited {completed.returncode}:\n{tail}")
    payload = json.loads(completed.stdout.strip().splitlines()[-1])
    return {student: OracleResult(student, {k: tuple(v) for k, v in item["scores"].items()}, item["errors"],
                                  item["seconds"], item["timed_out"], bool(item.get("stopped_at_first_loss")))
            for student, item in payload.items()}


# ---------------------------------------------------------------------------
# Inside the oracle process
# ---------------------------------------------------------------------------

def _shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no history thread: the process is forked later
    shell = InteractiveShell.instance(config=config)
    # The error itself is kept in the cell's result; formatting tracebacks would only cost time.
    shell.showtraceback = shell.showsyntaxerror = lambda *args, **kwargs: None
    return shell


def _on_alarm(signum, frame):
    raise CellTimeout("cell ran past the per-cell time limit")


def execute_cell(shell, source: str, timeout_s: int) -> list[dict]:
    """Run one cell; return its outputs in nbformat shape (stderr, error, execute_result)."""
    from IPython.utils.capture import capture_output

    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with capture_output(display=False) as captured:
            result = shell.run_cell(source, store_history=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    outputs = []
    if captured.stderr:
        outputs.append({"output_type": "stream", "name": "stderr", "text": captured.stderr})
    error = result.error_before_exec or result.error_in_exec
    if error is not None:
        outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error)[:300],
                        "traceback": []})
    elif result.result is not None:
        data, _ = shell.display_formatter.format(result.result)
        outputs.append({"output_type": "execute_result", "data": {"text/plain": data.get("text/plain", "")},
                        "metadata": {}, "execution_count": None})
    return outputs


def score_cell(cell: dict, outputs: list[dict]) -> tuple[float, float]:
    """nbgrader's own grade of a code grade cell with these outputs."""
    import nbformat
    from nbgrader.utils import determine_grade

    node = nbformat.from_dict({"cell_type": "code", "source": cell["source"], "outputs": outputs,
                               "metadata": {"nbgrader": {"grade": True, "solution": False,
                                                         "grade_id": cell["grade_id"], "points": cell["points"]}},
                               "execution_count": None})
    score, max_score = determine_grade(node)
    return float(score), float(max_score)


def _first_error(outputs: list[dict]) -> str | None:
    for output in outputs:
        if output["output_type"] == "error":
            return f"{output['ename']}: {output['evalue']}"
        if output["output_type"] == "stream":
            return "stderr: " + output["text"].strip().splitlines()[-1][:200] if output["text"].strip() else "stderr"
    return None


@dataclass
class Sides:
    """The two sides of the boundary in the oracle: the learner's shell and the trusted namespace."""

    shell: object
    trusted: dict
    shared: dict
    learner_state: dict
    exercises: list
    contracts: dict


def grade_rest(sides: Sides, cells: list[dict], solutions: dict[str, str], timeout_s: int,
               only_exercise: str | None = None, keep_going: bool = False) -> dict:
    """Execute `cells` with the submission's solution sources (the learner's side) and score every grade
    cell, run on the trusted side (or, with `only_exercise`, only that exercise's test cells, up to the
    first that loses a point unless `keep_going`; other test cells are skipped)."""
    from tools.course.grader.boundary import InProcessChannel, learner_proxies, run_cell

    channel = InProcessChannel(sides.shell.user_ns, learner_state=sides.learner_state)
    trusted = {**sides.trusted, **learner_proxies(sides.exercises, channel, sides.shared, sides.contracts)}
    scores, errors = {}, {}
    for cell in cells:
        if only_exercise and cell["grade"] and not cell["solution"] and cell["exercise"] != only_exercise:
            continue
        if cell["grade"] and not cell["solution"]:
            outputs = run_cell(cell["source"], trusted, timeout_s)
        else:
            source = solutions.get(cell["grade_id"], cell["source"]) if cell["solution"] else cell["source"]
            with channel.learner_side():
                outputs = execute_cell(sides.shell, source, timeout_s)
        if cell["grade"] and not cell["solution"]:
            scores[cell["grade_id"]] = score_cell(cell, outputs)
            error = _first_error(outputs)
            if error:
                errors[cell["grade_id"]] = error
            if only_exercise and not keep_going and scores[cell["grade_id"]][0] < scores[cell["grade_id"]][1]:
                return {"scores": scores, "errors": errors, "stopped_at_first_loss": True}
    return {"scores": scores, "errors": errors, "stopped_at_first_loss": False}


def _grade_in_fork(sides: Sides, rest: list[dict], solutions: dict[str, str], job: dict,
                   only_exercise: str | None = None, keep_going: bool = False) -> dict:
    """Fork, grade in the child, return its result (or a timed-out result with every cell at 0)."""
    started = time.monotonic()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: grade, send JSON, leave without running the parent's clean-up
        os.close(read_end)
        try:
            result = grade_rest(sides, rest, solutions, int(job["cell_timeout_s"]), only_exercise, keep_going)
        except BaseException as error:  # recorded in the result; the parent decides
            result = {"scores": {}, "errors": {"_oracle": f"{type(error).__name__}: {error}"}}
        with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
            pipe.write(json.dumps(result))
        os._exit(0)
    os.close(write_end)
    chunks, deadline, timed_out = [], started + float(job["submission_timeout_s"]), False
    with os.fdopen(read_end, "r", encoding="utf-8") as pipe:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([pipe], [], [], remaining)
            if ready:
                chunk = pipe.read()
                chunks.append(chunk)
                break
    os.waitpid(pid, 0)
    result = json.loads("".join(chunks)) if chunks and not timed_out else {"scores": {}, "errors": {}}
    if result.get("stopped_at_first_loss"):
        return {**result, "seconds": round(time.monotonic() - started, 3), "timed_out": False}
    for cell in rest:
        skipped = only_exercise and cell["exercise"] != only_exercise
        if cell["grade"] and not cell["solution"] and not skipped and cell["grade_id"] not in result["scores"]:
            result["scores"][cell["grade_id"]] = (0.0, float(cell["points"]))
            result["errors"].setdefault(cell["grade_id"], "submission timed out" if timed_out else "not run")
    result["seconds"] = round(time.monotonic() - started, 3)
    result["timed_out"] = timed_out
    return result


def main() -> int:
    job = json.loads(sys.stdin.read())
    cells = job["cells"]
    first_solution = next((i for i, cell in enumerate(cells) if cell["solution"]), len(cells))
    shared, rest = cells[:first_solution], cells[first_solution:]
    shell = _shell()
    # imported once here, not in every forked copy: nbgrader's scoring and the differential tests' hypothesis
    import hypothesis.strategies  # noqa: F401
    import nbgrader.utils  # noqa: F401

    import tools.course.grader.differential  # noqa: F401

    from tools.course.grader.boundary import Contract, process_state, restore_process_state, run_cell
    from tools.course.grader.codec import shared_names

    fresh = process_state()
    for cell in shared:  # the learner's side
        outputs = execute_cell(shell, cell["source"], int(job["cell_timeout_s"]))
        error = _first_error(outputs)
        if error and cell["grade"]:
            raise GradingError(f"the shared cell {cell['grade_id']} before the first exercise failed: {error}")
    learner_state = process_state()
    restore_process_state(fresh)
    trusted = {"__name__": "__main__"}
    for cell in shared:  # the trusted side, as the trusted grader process runs them
        run_cell(cell["source"], trusted, int(job["cell_timeout_s"]))
    sides = Sides(shell, trusted, shared_names(trusted), learner_state,
                  [cell["grade_id"] for cell in cells if cell["solution"]],
                  {cell["grade_id"]: Contract.from_json(cell["contract"]) for cell in cells if cell["solution"]})
    results = {student: _grade_in_fork(sides, rest, solutions, job, job["only_exercise"].get(student),
                                       student in job["keep_going"])
               for student, solutions in job["submissions"].items()}
    sys.stdout.write("\n" + json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
