"""The errors the library raises: every one is a TraceError, so ``except vramtrace.TraceError``
catches all of them. The analyzer's exit codes (docs/cli.md, analyzer/cli.h) pick the class."""
from __future__ import annotations

from typing import Optional


class TraceError(Exception):
    """Something about a trace could not be read or analysed. ``path`` is the trace (or None),
    ``returncode`` the analyzer's exit status when it was the analyzer that refused, ``stderr``
    what it said."""

    def __init__(self, message: str, path: Optional[str] = None, returncode: Optional[int] = None,
                 stderr: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.returncode = returncode
        self.stderr = stderr


class AnalyzerNotFound(TraceError):
    """The vramtrace executable is neither installed with this package nor on PATH."""


class TraceDamaged(TraceError):
    """The input is not a trace, or is damaged beyond reading (analyzer exit 3)."""


BadTrace = TraceDamaged


class TraceNotReadable(TraceError):
    """The trace cannot be opened or read: no permission, an I/O error (exit 4)."""


class TraceNotFound(TraceNotReadable, FileNotFoundError):
    """No file or directory at the path given (checked before the analyzer runs)."""


class UsageError(TraceError):
    """The analyzer refused the request: an unknown phase, a bad option (exit 2)."""


class NotInTrace(TraceError):
    """What was asked about is not in this trace, e.g. the OOM report of a trace without an
    out-of-memory event (exit 1)."""


class AnalysisLimit(TraceError):
    """The analysis needed more memory than it may use (exit 6)."""


class AnalyzerFailed(TraceError):
    """The analyzer failed otherwise (an internal error, a crash, output that is not JSON)."""


class MissingDependency(TraceError, ImportError):
    """An optional dependency is not installed (pyarrow for export_parquet)."""


_BY_EXIT = {1: NotInTrace, 2: UsageError, 3: TraceDamaged, 4: TraceNotReadable, 6: AnalysisLimit}


def from_exit(returncode: int, stderr: str, path: Optional[str], what: str) -> TraceError:
    """The error for an analyzer run that exited with returncode."""
    cls = _BY_EXIT.get(returncode, AnalyzerFailed)
    said = stderr.strip()
    message = said.splitlines()[-1] if said else "vramtrace %s exited with status %d" % (what, returncode)
    if message.startswith("vramtrace: "):
        message = message[len("vramtrace: "):]
    return cls(message, path=path, returncode=returncode, stderr=stderr)
