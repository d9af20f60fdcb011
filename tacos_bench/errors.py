"""Domain exceptions.

Every error a user can cause derives from :class:`TacosError`; ``run.py`` turns
any of them into a one-line message and a non-zero exit instead of a traceback.
"""

from __future__ import annotations


class TacosError(Exception):
    """Base class of every user-facing tacos-bench error."""


class TopologyError(TacosError):
    """A topology is malformed or cannot carry the requested collective."""


class TopologyFileError(TopologyError):
    """A topology file is malformed; the message names file, line and field."""

    def __init__(self, path, message: str, line: int | None = None, field: str | None = None):
        where = str(path)
        if line is not None:
            where += f":{line}"
        if field is not None:
            where += f" [{field}]"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field


class InputFileError(TacosError):
    """An input file cannot be read as one (missing, not a regular file, too large, not UTF-8); the message
    names the path. ``reason`` is the message without the path, for readers that re-raise their own type."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class CollectiveError(TacosError):
    """Unknown collective or impossible collective parameters."""


class ScheduleError(TacosError):
    """A schedule file or object is malformed (wrong columns, bad values)."""


class VerificationError(TacosError):
    """A schedule failed replay; the message says which transfer and why."""


class SolverError(TacosError):
    """Unknown solver, unsupported collective or bad solver option."""


class ConfigError(TacosError):
    """Bad configuration value (unknown name, non-positive size, ...)."""


class ExportError(TacosError):
    """A schedule or run directory cannot be exported (the message says why)."""


def nearest_name(name: str, valid) -> str | None:
    """The valid name closest to ``name`` (a typo is the usual cause of an unknown one), or None.

    >>> nearest_name("time_limit", ["name", "time_limit_s"]), nearest_name("zzz", ["name"])
    ('time_limit_s', None)
    """
    import difflib

    near = difflib.get_close_matches(str(name), list(valid), n=1, cutoff=0.6)
    return near[0] if near else None
