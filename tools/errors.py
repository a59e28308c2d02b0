"""Every error the course tools raise on purpose, in one place.

An error is data: besides its message it carries what a user needs to act on it (which notebook,
cell, exercise or stage; what caused it; how to fix it), as keyword fields that `fields()` returns.
The library only raises; the command line (`python -m tools.course`) alone prints them, as one
`ERROR` line plus a `fix:` line.

Two error types live elsewhere on purpose: the sandbox launcher's `SetupError` (the launcher runs
by path, standard library only, before the course package is importable there) and the
differential tests' `Mismatch` (an AssertionError, so that nbgrader scores the failing test 0).
"""

from __future__ import annotations

FIELDS = ("notebook", "cell", "exercise", "stage", "cause", "fix")


class CourseError(Exception):
    """Base class of every error the course tools raise on purpose."""

    def __init__(self, message: str = "", *, notebook: str | None = None, cell: int | None = None,
                 exercise: str | None = None, stage: str | None = None, cause: str | None = None,
                 fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.notebook, self.cell, self.exercise, self.stage, self.cause, self.fix = (
            notebook, cell, exercise, stage, cause, fix)

    def fields(self) -> dict:
        """The structured fields that are set, e.g. for a JSON report."""
        return {name: getattr(self, name) for name in FIELDS if getattr(self, name) is not None}


class ConfigError(CourseError, ValueError):
    """A parameter, label, mode or input value is invalid; nothing was done."""


class RecordExistsError(CourseError, FileExistsError):
    """A write-once record already exists; a new run label is required."""


class UpstreamRecordError(CourseError, FileNotFoundError):
    """An input record a stage depends on is missing, malformed or has another sha256."""


class SealedSplitError(CourseError, PermissionError):
    """A stage asked to read a sealed split it may not open (the frozen evaluation split before the
    project that reports on it); nothing was read or written."""


class ModelCacheMissingError(CourseError, FileNotFoundError):
    """The requested model is not in the local cache; the message says how to download it."""


class GradingError(CourseError):
    """nbgrader or the grading oracle failed, or a planted submission scored what it must not."""


class FeedbackLeakError(CourseError):
    """A feedback file would contain hidden-test source; it is not written."""


class LabelLockedError(CourseError):
    """Another batch run holds this label."""


class NotebookExecutionError(CourseError):
    """A chapter cell that is not allowed to fail raised; `cell` is its index in the chapter
    notebook, `cause` the exception name and value, as papermill reported them."""


class StageFailedError(CourseError):
    """A GPU or cpu_smoke stage failed; its record (if any) says so, and `stage` names it."""


EXIT_CONFIG = 2
"""A command's exit code for bad input or a refused run (`CourseError`)."""
EXIT_MODEL_CACHE = 4
"""A command's exit code when only the model cache is missing (the preflight's code too)."""


def exit_code_for(error: CourseError) -> int:
    """The exit code a stage command gives for `error`: 4 when the model cache is missing, else 2."""
    return EXIT_MODEL_CACHE if isinstance(error, ModelCacheMissingError) else EXIT_CONFIG
