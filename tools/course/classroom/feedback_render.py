"""Each submission's feedback rendered in a process of its own, with time and memory limits.

Rendering reads learner-controlled bytes (outputs, added cells) with nbconvert and the HTML scans; done in the
batch's own process, one crafted notebook could hold it for minutes and gigabytes. The batch starts one
renderer per class (`FeedbackRenderer`: `python -m tools.course.classroom.feedback_render`), which imports
nbgrader and nbconvert and gathers what every page is checked against once (the hidden-test lines of the
course, the chapter's cells); per submission it forks a child that

1. withholds, in the submission's autograded notebook, every output that shows an input a hidden test sent
   (`feedback.withhold_inputs`), and copies the autograded folder to `scanned_dir` (what the batch then puts
   in the course),
2. writes the learner's feedback (`feedback.write_student_feedback`, with the same inputs scanned for),

under `RLIMIT_AS` (what the renderer holds plus `MEMORY_MB`) and `RLIMIT_CPU`, and is killed past `WALL_S`.
A child that fails or is killed costs that submission its feedback (recorded), nothing else.

Protocol: JSON lines on stdin and stdout; the first line sets the renderer up, every other one is a request
answered by one line.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

WALL_S = 120.0
CPU_S = 90
MEMORY_MB = 2048


# ---------------------------------------------------------------------------
# The renderer process
# ---------------------------------------------------------------------------

def _virtual_bytes() -> int:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


class _Renderer:
    """What every child starts from: the course's secrets, the chapter's cells, the page guard."""

    def __init__(self, setup: dict):
        from tools.core.catalog import find_chapter
        from tools.course.cells import read_notebook
        from tools.course.classroom.feedback import HtmlGuard, course_secret_lines, exercises_of, grade_cells
        from tools.course.layout import NbgraderCourse
        from tools.course.nbgrader_cli import course_id

        root, course = Path(setup["root"]), Path(setup["course"])
        self.chapter = find_chapter(setup["chapter"], root)
        folders = NbgraderCourse(course)
        self.course = course
        self.source = read_notebook(folders.source(self.chapter.slug))
        release = read_notebook(folders.release(self.chapter.slug))
        chapter_notebook = read_notebook(self.chapter.notebook_path(root))
        self.public = "\n".join(cell.source for notebook in (release, chapter_notebook) for cell in notebook.cells)
        self.cells, self.exercises = grade_cells(self.source), exercises_of(self.source)
        self.secrets = course_secret_lines(root, self.chapter, self.source, release, chapter_notebook)
        self.course_id = course_id(course)
        self.guard = HtmlGuard(release)
        self.max_bytes = int(setup["max_bytes"])
        self.limits = {"wall_s": float(setup.get("wall_s", WALL_S)), "cpu_s": int(setup.get("cpu_s", CPU_S)),
                       "memory_mb": int(setup.get("memory_mb", MEMORY_MB))}

    def render(self, request: dict) -> dict:
        """In the child: withhold inputs in the autograded notebook, then write the learner's feedback."""
        from tools.course.cells import read_notebook, write_notebook
        from tools.course.classroom.feedback import withhold_inputs, write_student_feedback
        from tools.course.classroom.hidden_inputs import public_free

        autograded = Path(request["autograded"])
        size = autograded.stat().st_size
        if size > self.max_bytes:
            return {"written": False, "scanned": False,
                    "error": f"the autograded notebook is {size / 2 ** 20:.1f} MiB, more than "
                             f"{self.max_bytes / 2 ** 20:.0f} MiB; feedback not rendered"}
        inputs = frozenset(public_free(list(request.get("hidden_inputs") or []), self.public))
        notebook = read_notebook(autograded)
        withheld = withhold_inputs(notebook, inputs)
        if withheld:
            write_notebook(notebook, autograded)
        shutil.copytree(autograded.parent, request["scanned_dir"])  # the instructor's copy, before feedback
        learned = self.guard.allowed is None  # replaces the autograded notebook with the learner's page
        result = write_student_feedback(self.course, self.chapter, request["student"], autograded,
                                        Path(request["work_dir"]), self.cells, self.exercises, request["results"],
                                        self.secrets, self.course_id, request.get("enforced"), source=self.source,
                                        guard=self.guard, max_bytes=self.max_bytes, hidden_inputs=inputs)
        result.update(scanned=True, inputs_withheld=withheld)
        if learned and self.guard.allowed is not None:
            result["guard"] = dict(self.guard.allowed)
        return result

    def in_child(self, request: dict) -> dict:
        """Fork, render under the limits, return the child's answer (or why it gave none)."""
        read_end, write_end = os.pipe()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(read_end)
                memory = _virtual_bytes() + self.limits["memory_mb"] * 2 ** 20
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
                resource.setrlimit(resource.RLIMIT_CPU, (self.limits["cpu_s"], self.limits["cpu_s"] + 5))
                try:
                    answer = self.render(request)
                except Exception as error:  # noqa: BLE001 - this submission's feedback only
                    answer = {"written": False, "scanned": False, "error": f"{error.__class__.__name__}: {error}"}
                with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
                    pipe.write(json.dumps(answer))
            except BaseException:  # noqa: BLE001 - the parent reports a child that said nothing
                code = 1
            finally:
                os._exit(code)
        os.close(write_end)
        chunks, killed = [], False
        try:
            while True:
                left = self.limits["wall_s"] - (time.monotonic() - started)
                if left <= 0:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    break
                ready, _, _ = select.select([read_end], [], [], left)
                if ready:
                    chunk = os.read(read_end, 1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
        finally:
            os.close(read_end)
        _, status = os.waitpid(pid, 0)
        seconds = round(time.monotonic() - started, 2)
        text = b"".join(chunks).decode("utf-8", errors="replace")
        if killed or not text:
            why = (f"ran past {self.limits['wall_s']:g} s" if killed
                   else f"ended without an answer ({_status_text(status)})")
            return {"written": False, "scanned": False, "seconds": seconds,
                    "error": f"feedback rendering {why} (limits: {self.limits['wall_s']:g} s, "
                             f"{self.limits['cpu_s']} CPU s, {self.limits['memory_mb']} MiB)"}
        try:
            answer = json.loads(text)
        except ValueError:
            return {"written": False, "scanned": False, "seconds": seconds,
                    "error": f"feedback rendering gave no valid answer ({_status_text(status)})"}
        if "guard" in answer:  # the template's own active elements, learned once from the release
            self.guard.allowed = Counter(answer.pop("guard"))
        answer["seconds"] = seconds
        return answer


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status)}"


def main() -> int:
    requests, replies = sys.stdin, sys.stdout
    renderer = _Renderer(json.loads(requests.readline()))
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in requests:
        replies.write(json.dumps(renderer.in_child(json.loads(line))) + "\n")
        replies.flush()
    return 0


# ---------------------------------------------------------------------------
# The batch's side
# ---------------------------------------------------------------------------

class FeedbackRenderer:
    """The batch's handle on its renderer process (see the module docstring)."""

    def __init__(self, root: Path, chapter, course: Path, max_bytes: int, log_path: Path | None = None,
                 wall_s: float = WALL_S, cpu_s: int = CPU_S, memory_mb: int = MEMORY_MB):
        self.setup = {"root": str(root), "chapter": chapter.slug, "course": str(course), "max_bytes": max_bytes,
                      "wall_s": wall_s, "cpu_s": cpu_s, "memory_mb": memory_mb}
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def _start(self) -> None:
        log = open(self.log_path, "a", encoding="utf-8") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen([sys.executable, "-m", "tools.course.classroom.feedback_render"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                        env={**os.environ, "MPLBACKEND": "Agg"})
        self.process.stdin.write(json.dumps(self.setup) + "\n")
        self.process.stdin.flush()
        hello = self.process.stdout.readline()
        if not hello or not json.loads(hello).get("ready"):
            raise RuntimeError(f"the feedback renderer did not start (exit {self.process.wait()})")

    def render(self, request: dict) -> dict:
        """One submission's feedback: `{"written", "html", "json" | "error", "scanned", "inputs_withheld"}`."""
        try:
            if self.process is None or self.process.poll() is not None:
                self._start()
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (OSError, RuntimeError, ValueError) as error:
            self.close()
            return {"written": False, "scanned": False, "error": f"feedback renderer: {error}"}
        if not line:
            self.close()
            return {"written": False, "scanned": False, "error": "the feedback renderer ended"}
        return json.loads(line)

    def close(self) -> None:
        if self.process is None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.process = None


if __name__ == "__main__":
    sys.exit(main())
