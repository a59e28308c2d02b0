"""nbgrader's `Execute` step with each cell on its side of the grading boundary, and output capped.

nbgrader's `Autograde` keeps the gradebook, the restored cells, the checksums and the scores; only its
`Execute` preprocessor is replaced (`use_split_execute`), by `SplitExecute`:

* a **test cell** (a grade cell whose grade id and source are those of the trusted source notebook)
  runs in the trusted grader process (`tools.course.classroom.trusted`), never in the learner's kernel;
  meanwhile the kernel runs one serving cell of ours (`learner_server.serve`, kept across consecutive
  test cells) that answers the calls the test makes to the learner's functions. The test's outputs
  (with what the learner's code printed during each call, as text) become the cell's outputs, which
  nbgrader then scores;
* every other code cell (the shared setup, the learner's solutions, the learner's own cells) runs in the
  kernel, as nbgrader would run it. The setup cells also ran in the trusted process, once per worker.

No output channel while tests run: everything the kernel sends during a serving cell (streams, displays,
display updates, clear_output, comm messages) is discarded; only its status and, for the record, its own
error are read. Each kernel cell's outputs are frozen when it ends: no display id stays live, so a later
`update_display_data` cannot write into an earlier cell.

What the kernel sends back is capped (`output_bytes`), counting every message that changes the notebook: a
display update once per output it rewrites, comm messages with their buffers. Past the cap the cell is
interrupted and every further output withheld; past twice the cap (a single huge message, or output that goes
on) the kernel is stopped. A kernel that is stopped or dies (e.g. `os._exit`, the OOM killer) does not end the
grading: every later cell gets an error output saying so (a test cell still runs on the trusted side, where
each call of a learner's function fails at once), so nbgrader scores the notebook. The same holds when the
trusted grader process of the submission is stopped (its control group's memory limit, e.g. by the learner's
replies): every later test cell fails. The submission is marked either way (`SplitExecute.report`).

Time is measured per cell (`contention.ContentionProbe`): the submission group's CPU seconds, how long the
kernel and the trusted grader waited for a CPU and, for a test cell, how long the trusted side waited for the
learner's replies. A cell that runs out of time is recorded with these figures, so that the batch grades a
submission again only on evidence that the host starved it (`contention.contention_evidence`); the running
totals are written to `report_path` after every cell, where the host reads them even if the worker is killed.
The setup cells (locked, before the first exercise) run under `setup_timeout`, not the cell limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from typing import Any, ClassVar

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_hook, run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

from tools.course.classroom.contention import ContentionProbe
from tools.errors import GradingError

SERVE_CELL = ("__import__('tools.course.classroom.learner_server', fromlist=['serve'])"
              ".serve({address!r}, {token!r}, globals())")
SERVE_END_GRACE_S = 5.0
"""How long the kernel's serving cell may take to end after the test cell is done before it is interrupted."""
STOP_FACTOR = 2
"""Past this many caps of output the kernel is stopped."""
TIMEOUT_NAMES = ("CellTimeoutError", "CellTimeout")
KEPT_WHILE_SERVING = ("status", "execute_input")
"""What of a serving cell's messages is processed (its error is kept for the record, capped); the rest is
discarded."""


def message_size(msg: dict) -> int:
    """Bytes a kernel message may add to the notebook: its content and its binary buffers."""
    return len(json.dumps(msg.get("content", {}), default=str)) + sum(len(buffer) for buffer in msg.get("buffers") or [])


class SplitExecute(Execute):
    """See the module docstring. The worker sets `trusted` (a `TrustedSubmission`), `test_cells`
    (grade id -> source of the trusted test cells) and `report` (a dict this instance fills) per submission."""

    output_bytes = Integer(8 * 2 ** 20, help="bytes of output the learner's kernel may send").tag(config=True)
    setup_timeout = Integer(120, help="seconds each setup cell (locked, before the first exercise) may take"
                            ).tag(config=True)

    trusted = None
    test_cells: ClassVar[dict[str, str]] = {}
    hidden_cells: ClassVar[set[str]] = set()
    report: ClassVar[dict] = {}
    report_path: str | None = None  # where the running report is written after every cell
    probe: ContentionProbe = ContentionProbe()
    hidden_inputs: ClassVar[list[str]] = []  # fingerprints of what hidden tests sent (never in the report)
    manager_class = None  # the zygote's kernel manager, where kernels come from the worker's zygote

    def __init__(self, *args: Any, **kwargs: Any):
        if SplitExecute.manager_class is not None:
            kwargs.setdefault("kernel_manager_class", SplitExecute.manager_class)
        super().__init__(*args, **kwargs)
        self._received = 0
        self._capped_in: str | None = None
        self._dead: str | None = None  # why the kernel is gone, once it is
        self._solution_seen = False
        self._serving: tuple | None = None  # (task, cell, token) of a serving cell kept for the next test cell
        self._trusted_gone: str | None = None  # why the trusted grader process stopped, once it has
        self._stopping = None  # our stop of the kernel (past the output cap), while it is under way
        self._started = None  # the first sample (`probe`), for the notebook's totals

    # -- which side ------------------------------------------------------------
    def _grade_id(self, cell: NotebookNode) -> str | None:
        return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")

    def is_test_cell(self, cell: NotebookNode) -> bool:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id")
        return (cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")
                and grade_id in self.test_cells and cell.source == self.test_cells[grade_id])

    def _role(self, cell: NotebookNode) -> str:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            self._solution_seen = True
            return "solution"
        if meta.get("locked"):
            return "later locked" if self._solution_seen else "setup"
        return "learner's own"

    # -- output: nothing while serving, every notebook change counted, frozen after each cell ---------------
    def process_message(self, msg, cell, cell_index):
        kind = msg.get("msg_type")
        if kind in KEPT_WHILE_SERVING:
            return super().process_message(msg, cell, cell_index)
        if cell.get("metadata", {}).get("course_serving"):
            self.report["discarded_while_serving"] = self.report.get("discarded_while_serving", 0) + 1
            content = msg.get("content", {})
            if kind == "error" and not cell.outputs:  # the serving cell's own failure, for the record only
                cell.outputs.append(nbformat.v4.new_output("error", ename=str(content.get("ename", ""))[:100],
                                                           evalue=str(content.get("evalue", ""))[:300], traceback=[]))
            return None
        if not self._charge(message_size(msg), cell, cell_index):
            return None
        return super().process_message(msg, cell, cell_index)

    def _update_display_id(self, display_id: str, msg: dict) -> None:
        """A display update rewrites every output with its id: each one counts against the cap."""
        targets = sum(len(indices) for indices in self._display_id_map.get(display_id, {}).values())
        if targets and not self._charge(targets * message_size(msg), None, None):
            return
        super()._update_display_id(display_id, msg)

    def _freeze_outputs(self) -> None:
        """A cell has ended: none of its display ids may be updated any more."""
        self._display_id_map = {}
        self.clear_before_next_output = False

    def _charge(self, size: int, cell: NotebookNode | None, cell_index: int | None) -> bool:
        """Count `size` bytes of output; False (withhold it) past the cap, which interrupts the cell once, and
        past twice the cap stops the kernel."""
        self._received += size
        if self._capped_in is None and self._received <= self.output_bytes:
            return True
        if self._capped_in is None:
            where = self._grade_id(cell) if cell is not None else None
            self._capped_in = str(where or (f"cell {cell_index}" if cell_index is not None else "a display update"))
            self.report["output_capped"] = {"cell": self._capped_in, "cap_bytes": self.output_bytes}
            if cell is not None:
                cell.outputs.append(nbformat.v4.new_output(
                    "error", ename="OutputLimitExceeded", traceback=[],
                    evalue=f"more than {self.output_bytes // 2 ** 20} MiB of output; the rest is withheld and the "
                           "cell was interrupted"))
            asyncio.ensure_future(self._interrupt())
        if self._received > STOP_FACTOR * self.output_bytes and self._dead is None:
            self._dead = f"the kernel was stopped: more than {STOP_FACTOR * self.output_bytes // 2 ** 20} MiB of output"
            self.report["kernel_stopped_for_output"] = True
            self._stopping = asyncio.ensure_future(self._stop_kernel())
        return False

    async def _interrupt(self) -> None:
        try:
            await self.km.interrupt_kernel()
        except Exception as error:  # noqa: BLE001 - recorded; the cell timeout still applies
            self.report.setdefault("errors", []).append(f"interrupt failed: {error}")

    async def _stop_kernel(self) -> None:
        try:
            await self.km.shutdown_kernel(now=True)
        except Exception as error:  # noqa: BLE001 - recorded; the notebook time limit still applies
            self.report.setdefault("errors", []).append(f"stopping the kernel failed: {error}")

    async def _async_cleanup_kernel(self) -> None:
        """nbclient's clean-up, once a stop of ours (the output cap) has finished: two shutdowns of one kernel
        manager at once leave it in an invalid state."""
        if self._stopping is not None:
            await asyncio.gather(self._stopping, return_exceptions=True)
        try:
            await super()._async_cleanup_kernel()
        except asyncio.InvalidStateError as error:  # the kernel was stopped already
            self.report.setdefault("errors", []).append(f"clean-up after the kernel was stopped: {error!r}")

    _cleanup_kernel = run_sync(_async_cleanup_kernel)

    # -- cells ---------------------------------------------------------------------
    async def async_execute_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True) -> NotebookNode:
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        before = self._sample()
        self._started = self._started or before
        learner_s = None
        if self.is_test_cell(cell):
            learner_s = await self._execute_test_cell(cell, cell_index, execution_count)
            role, side = "test", "trusted"
        else:
            role, side = self._role(cell), "kernel"
            await self._execute_kernel_cell(cell, cell_index, execution_count, store_history)
            self._freeze_outputs()
        measure = self.probe.between(before, self._sample())
        if any(output.get("output_type") == "error" and output.get("ename") in TIMEOUT_NAMES
               for output in cell.outputs):
            self.report.setdefault("timeouts", []).append({"cell": self._grade_id(cell) or cell_index,
                                                           "role": role, "side": side, **measure,
                                                           "learner_s": learner_s})
        self.report["totals"] = self.probe.between(self._started, self._sample())
        self._save_report()
        return cell

    def _sample(self):
        provisioner = getattr(getattr(self, "km", None), "provisioner", None)
        trusted_pid = getattr(self.trusted, "pid", None) if self.trusted is not None else None
        return self.probe.sample(getattr(provisioner, "pid", None), trusted_pid)

    def _save_report(self) -> None:
        """The running report, where the host finds it even if this worker is killed (written, then renamed)."""
        if not self.report_path:
            return
        partial = f"{self.report_path}.partial"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump(self.report, handle)
        os.replace(partial, self.report_path)

    def _get_timeout(self, cell: NotebookNode | None) -> int | None:
        if cell is not None and cell.get("metadata", {}).get("course_serving"):
            return None  # a serving cell spans test cells: each has its own limit on the trusted side
        meta = (cell or {}).get("metadata", {}).get("nbgrader", {})
        if cell is not None and meta.get("locked") and not meta.get("grade") and not self._solution_seen:
            return int(self.setup_timeout)  # a setup cell: the chapter's imports, on a loaded host too
        return super()._get_timeout(cell)

    execute_cell = run_sync(async_execute_cell)

    def _gone(self, cell: NotebookNode) -> None:
        cell.outputs = [nbformat.v4.new_output("error", ename="DeadKernelError", evalue=self._dead, traceback=[])]

    async def _execute_kernel_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None,
                                   store_history: bool) -> None:
        if self._dead is not None:
            self._gone(cell)
            return
        try:
            await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except CellTimeoutError as error:  # e.g. no idle status in time after the interrupt: the cell failed
            self.nb.cells[cell_index] = cell
            cell.outputs.append(nbformat.v4.new_output("error", ename="CellTimeoutError", evalue=str(error)[:300],
                                                       traceback=[]))
        except DeadKernelError:
            self._dead = self._dead or "the learner's kernel died"
            self.report.setdefault("kernel_died_in", str(self._grade_id(cell) or cell_index))
            self.nb.cells[cell_index] = cell
            cell.outputs.append(nbformat.v4.new_output("error", ename="DeadKernelError", evalue=self._dead,
                                                       traceback=[]))

    def _next_is_test_cell(self, cell_index: int) -> bool:
        """Whether the next code cell to run after `cell_index` is a test cell (the serving cell then stays)."""
        for cell in self.nb.cells[cell_index + 1:]:
            if cell.cell_type == "code" and cell.source.strip():
                return self.is_test_cell(cell)
        return False

    async def _start_serving(self, cell_index: int) -> tuple:
        token = secrets.token_hex(16)
        address = await asyncio.to_thread(lambda: self.trusted.address)  # the trusted child may still be starting
        serving = nbformat.v4.new_code_cell(SERVE_CELL.format(address=address, token=token),
                                            metadata={"course_serving": True})
        execute = super().async_execute_cell
        original = self.nb.cells[cell_index]

        async def serve_in_place_of_nothing():
            try:
                return await execute(serving, cell_index, store_history=False)
            finally:  # nbclient puts the cell it ran at `cell_index`: the test cell goes back there
                self.nb.cells[cell_index] = original

        return asyncio.ensure_future(serve_in_place_of_nothing()), serving, token

    async def _end_serving(self, serve, serving: NotebookNode, kernel: str, cell: NotebookNode) -> None:
        """Let the serving cell end (interrupt it if the kernel is not done); a kernel that does not end it
        within a cell's time is stopped. Its errors go to the record, never to a test's outputs."""
        if kernel != "done" and not serve.done():
            await self._interrupt()
        for wait_s in (SERVE_END_GRACE_S, float(self.timeout or 30)):
            try:
                await asyncio.wait_for(asyncio.shield(serve), wait_s)
                break
            except asyncio.TimeoutError:
                await self._interrupt()
            except Exception:  # noqa: BLE001, S110 - the serving cell's own failure (a dead kernel) is not the test's
                break
        if not serve.done():
            self._dead = "the learner's kernel did not stop serving when interrupted"
            self.report["kernel_stopped_unresponsive"] = True
            await self._stop_kernel()
            serve.cancel()
        failed = [f"{output.get('ename')}: {output.get('evalue', '')[:200]}" for output in serving.outputs
                  if output.get("output_type") == "error"]
        if failed and len(self.report.setdefault("serving_errors", [])) < 5:  # for the instructor's record only
            self.report["serving_errors"].append({"cell": self._grade_id(cell), "kernel": kernel, "error": failed[0]})

    async def _execute_test_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None) -> float | None:
        """Run a test cell on the trusted side while the kernel's serving cell answers its calls. The serving
        cell stays for the next cell when that is a test cell too (one kernel round trip per run of tests).
        Returns how long the trusted side waited for the learner's kernel."""
        if self.trusted is None:
            raise GradingError("no trusted grader process for the test cells")
        await run_hook(self.on_cell_start, cell=cell, cell_index=cell_index)
        timeout = float(self.timeout or 30)
        hidden = self._grade_id(cell) in self.hidden_cells
        result = None
        if self._trusted_gone is not None:
            pass
        elif self._dead is not None:  # the test still runs; each call of a learner's function fails at once
            result = await self._run_trusted(cell.source, timeout, secrets.token_hex(16), True, False, hidden)
        else:
            if self._serving is None or self._serving[0].done():
                self._serving = await self._start_serving(cell_index)
            serve, serving, token = self._serving
            keep = self._next_is_test_cell(cell_index)
            test = asyncio.ensure_future(self._run_trusted(cell.source, timeout, token, False, keep, hidden))
            try:
                await asyncio.wait([serve, test], return_when=asyncio.FIRST_COMPLETED)
                if serve.done() and not test.done():  # nothing serves the test's calls any more: say so, do not wait
                    self.trusted.kernel_gone(token)
                result = await test
            finally:
                self.nb.cells[cell_index] = cell  # nbclient puts the serving cell in the test cell's place
            kernel = "broken" if result is None else result["kernel"]
            if kernel != "kept" or serve.done():
                self._serving = None
                await self._end_serving(serve, serving, kernel, cell)
                self.nb.cells[cell_index] = cell
        if result is None:
            cell.outputs = [nbformat.v4.new_output("error", ename="TrustedGraderStopped", evalue=self._trusted_gone,
                                                   traceback=[])]
        else:
            cell.outputs = [nbformat.from_dict(output) for output in result["outputs"]]
            self.hidden_inputs.extend(result.get("inputs") or [])
        self.code_cells_executed += 1
        if execution_count:
            cell["execution_count"] = execution_count
        await run_hook(self.on_cell_complete, cell=cell, cell_index=cell_index)
        return None if result is None else result.get("learner_s")

    async def _run_trusted(self, source: str, timeout: float, token: str, kernel_gone: bool, keep: bool,
                           hidden: bool) -> dict | None:
        """One test cell on the trusted side; None once its process has stopped (every later test cell fails:
        `_trusted_gone`). Its fork from the chapter zygote (the setup) failing still fails the submission."""
        try:
            return await asyncio.to_thread(self.trusted.run, source, timeout, token, kernel_gone, keep, hidden)
        except GradingError as error:
            if getattr(self.trusted, "pid", None) is None:
                raise
            self._trusted_gone = ("the trusted grader process of this submission stopped (its control group's limits "
                                  f"hold the test cells and what the learner's functions answer): {error}")[:500]
            self.report["trusted_stopped"] = self._trusted_gone
            return None


def use_split_execute(config, trusted, test_cells: dict[str, str], report: dict, output_bytes: int,
                      kernel_manager_class=None, *, hidden_cells=(), setup_timeout: int = 120,
                      probe: ContentionProbe | None = None, report_path: str | None = None,
                      hidden_inputs: list | None = None) -> None:
    """Configure an `Autograde` run (its `config`) to execute with `SplitExecute`."""
    from nbgrader.converters import Autograde

    SplitExecute.trusted, SplitExecute.test_cells, SplitExecute.report = trusted, dict(test_cells), report
    SplitExecute.hidden_cells = set(hidden_cells)
    SplitExecute.probe = probe or ContentionProbe()
    SplitExecute.report_path = report_path
    SplitExecute.hidden_inputs = hidden_inputs if hidden_inputs is not None else []
    SplitExecute.manager_class = kernel_manager_class
    config.SplitExecute.output_bytes = int(output_bytes)  # `Execute.*` settings apply to it as to its parent
    config.SplitExecute.setup_timeout = int(setup_timeout)
    steps = config.Autograde.get("autograde_preprocessors") or Autograde.class_traits()["autograde_preprocessors"].default()
    config.Autograde.autograde_preprocessors = [
        SplitExecute if isinstance(step, type) and issubclass(step, Execute) else step for step in steps]
