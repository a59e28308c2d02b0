"""Typed errors of the course tools.

The library raises these; only the command-line entry points print them. Each message says
what is wrong and how to fix it.
"""


class CourseError(Exception):
    """Base class of every error the course tools raise on purpose."""


class ConfigError(CourseError, ValueError):
    """A parameter, label, mode or input value is invalid; nothing was done."""


class RecordExistsError(CourseError, FileExistsError):
    """A write-once record already exists; a new run label is required."""


class UpstreamRecordError(CourseError, FileNotFoundError):
    """An input record a stage depends on is missing, malformed or has another sha256."""


class ModelCacheMissingError(CourseError, FileNotFoundError):
    """The requested model is not in the local cache; the message says how to download it."""


class GradingError(CourseError):
    """nbgrader or the grading oracle failed, or a planted submission scored what it must not."""
