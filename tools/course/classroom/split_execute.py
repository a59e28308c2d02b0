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

What the kernel sends back is capped (`output_bytes`): past the cap the cell is interrupted and every
further output withheld; past twice the cap (a single huge message, or output that goes on) the kernel is
stopped. A kernel that is stopped or dies (e.g. `os._exit`, the OOM killer) does not end the grading: every
later cell gets an error output saying so (a test cell still runs on the trusted side, where each call of a
learner's function fails at once), so nbgrader scores the notebook. The submission is marked either way
(`SplitExecute.report`). Timeouts are recorded per cell, so that the batch can grade a starved submission
again alone.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any, ClassVar

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_hook, run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

from tools.errors import GradingError

SERVE_CELL = ("__import__('tools.course.classroom.learner_server', fromlist=['serve'])"
              ".serve({port}, {token!r}, globals())")
SERVE_END_GRACE_S = 5.0
"""How long the kernel's serving cell may take to end after the test cell is done before it is interrupted."""
STOP_FACTOR = 2
"""Past this many caps of output the kernel is stopped."""
TIMEOUT_NAMES = ("CellTimeoutError", "CellTimeout")


class SplitExecute(Execute):
    """See the module docstring. The worker sets `trusted` (a `TrustedSubmission`), `test_cells`
    (grade id -> source of the trusted test cells) and `report` (a dict this instance fills) per submission."""

    output_bytes = Integer(8 * 2 ** 20, help="bytes of output the learner's kernel may send").tag(config=True)

    trusted = None
    test_cells: ClassVar[dict[str, str]] = {}
    report: ClassVar[dict] = {}
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

    # -- output cap --------------------------------------------------------------
    def output(self, outs, msg, display_id, cell_index):
        size = len(json.dumps(msg.get("content", {}), default=str))
        self._received += size
        if self._capped_in is None and self._received <= self.output_bytes:
            return super().output(outs, msg, display_id, cell_index)
        if self._capped_in is None:
            self._capped_in = str(self._grade_id(self.nb.cells[cell_index]) or f"cell {cell_index}")
            self.report["output_capped"] = {"cell": self._capped_in, "cap_bytes": self.output_bytes}
            outs.append(nbformat.v4.new_output("error", ename="OutputLimitExceeded",
                                               evalue=f"more than {self.output_bytes // 2 ** 20} MiB of output; "
                                                      "the rest is withheld and the cell was interrupted",
                                               traceback=[]))
            asyncio.ensure_future(self._interrupt())
        if self._received > STOP_FACTOR * self.output_bytes and self._dead is None:
            self._dead = f"the kernel was stopped: more than {STOP_FACTOR * self.output_bytes // 2 ** 20} MiB of output"
            self.report["kernel_stopped_for_output"] = True
            asyncio.ensure_future(self._stop_kernel())
        return None

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

    # -- cells ---------------------------------------------------------------------
    async def async_execute_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True) -> NotebookNode:
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if self.is_test_cell(cell):
            await self._execute_test_cell(cell, cell_index, execution_count)
            role, side = "test", "trusted"
        else:
            role, side = self._role(cell), "kernel"
            await self._execute_kernel_cell(cell, cell_index, execution_count, store_history)
        if any(output.get("output_type") == "error" and output.get("ename") in TIMEOUT_NAMES
               for output in cell.outputs):
            self.report.setdefault("timeouts", []).append({"cell": self._grade_id(cell) or cell_index,
                                                           "role": role, "side": side})
        return cell

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

    def _get_timeout(self, cell: NotebookNode | None) -> int | None:
        if cell is not None and cell.get("metadata", {}).get("course_serving"):
            return None  # a serving cell spans test cells: each has its own limit on the trusted side
        return super()._get_timeout(cell)

    async def _start_serving(self, cell_index: int) -> tuple:
        token = secrets.token_hex(16)
        port = await asyncio.to_thread(lambda: self.trusted.port)  # the trusted child may still be starting
        serving = nbformat.v4.new_code_cell(SERVE_CELL.format(port=port, token=token),
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

    async def _execute_test_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None) -> None:
        """Run a test cell on the trusted side while the kernel's serving cell answers its calls. The serving
        cell stays for the next cell when that is a test cell too (one kernel round trip per run of tests)."""
        if self.trusted is None:
            raise GradingError("no trusted grader process for the test cells")
        await run_hook(self.on_cell_start, cell=cell, cell_index=cell_index)
        timeout = float(self.timeout or 30)
        if self._dead is not None:  # the test still runs; each call of a learner's function fails at once
            result = await asyncio.to_thread(self.trusted.run, cell.source, timeout, secrets.token_hex(16), True)
        else:
            if self._serving is None or self._serving[0].done():
                self._serving = await self._start_serving(cell_index)
            serve, serving, token = self._serving
            keep = self._next_is_test_cell(cell_index)
            test = asyncio.ensure_future(asyncio.to_thread(self.trusted.run, cell.source, timeout, token, False, keep))
            try:
                await asyncio.wait([serve, test], return_when=asyncio.FIRST_COMPLETED)
                if serve.done() and not test.done():  # nothing serves the test's calls any more: say so, do not wait
                    self.trusted.kernel_gone(token)
                result = await test
            finally:
                self.nb.cells[cell_index] = cell  # nbclient puts the serving cell in the test cell's place
            if result["kernel"] != "kept" or serve.done():
                self._serving = None
                await self._end_serving(serve, serving, result["kernel"], cell)
                self.nb.cells[cell_index] = cell
        cell.outputs = [nbformat.from_dict(output) for output in result["outputs"]]
        self.code_cells_executed += 1
        if execution_count:
            cell["execution_count"] = execution_count
        await run_hook(self.on_cell_complete, cell=cell, cell_index=cell_index)


def use_split_execute(config, trusted, test_cells: dict[str, str], report: dict, output_bytes: int,
                      kernel_manager_class=None) -> None:
    """Configure an `Autograde` run (its `config`) to execute with `SplitExecute`."""
    from nbgrader.converters import Autograde

    SplitExecute.trusted, SplitExecute.test_cells, SplitExecute.report = trusted, dict(test_cells), report
    SplitExecute.manager_class = kernel_manager_class
    config.SplitExecute.output_bytes = int(output_bytes)  # `Execute.*` settings apply to it as to its parent
    steps = config.Autograde.get("autograde_preprocessors") or Autograde.class_traits()["autograde_preprocessors"].default()
    config.Autograde.autograde_preprocessors = [
        SplitExecute if isinstance(step, type) and issubclass(step, Execute) else step for step in steps]
