"""vramtrace: where GPU memory goes in a CUDA program.

Run a program under the tracer with ``vramtrace run -- python train.py`` (or
``python -m vramtrace run -- ...``). This module is the optional in-program API; every function
is a cheap no-op when the program is not being traced:

    import vramtrace
    vramtrace.mark("loaded model")
    with vramtrace.phase("train"):
        train()

    @vramtrace.phase("eval")
    def evaluate(): ...

and the notebook side: ``vramtrace.load("run.vrt")`` (or ``report``, ``leaks``, ``oom``,
``timeline``) returns the reports as typed dataclasses with integer bytes; every failure is a
``vramtrace.TraceError`` subclass carrying the analyzer's message (docs/python.md).
"""
from __future__ import annotations

import contextlib as _contextlib
import os as _os
from typing import Any as _Any, Dict as _Dict, Optional as _Optional

from . import _native, _reports, _retention
from ._errors import (AnalysisLimit, AnalyzerFailed, AnalyzerNotFound, BadTrace, MissingDependency, NotInTrace,
                      TraceDamaged, TraceError, TraceNotFound, TraceNotReadable, UsageError)
from ._reports import (Analysis, Category, DevicePeak, Frame, Leaks, Oom, OomCategory, PhaseCall, Remedy, Report,
                       Site, Survivor, Timeline)

__all__ = ["mark", "phase", "snapshot", "enabled", "binary", "load", "report", "leaks", "oom", "timeline",
           "export_parquet",
           "Analysis", "Category", "DevicePeak", "Frame", "Leaks", "Oom", "OomCategory", "PhaseCall", "Remedy",
           "Report", "Site", "Survivor", "Timeline",
           "TraceError", "TraceNotFound", "TraceNotReadable", "TraceDamaged", "BadTrace", "UsageError", "NotInTrace",
           "AnalysisLimit", "AnalyzerFailed", "AnalyzerNotFound", "MissingDependency"]
__version__ = "0.1.0"


def mark(label: _Any) -> None:
    """Records an instant with a label in the trace."""
    _native.mark(str(label))


def enabled() -> int:
    """2 while recording everything, 1 while armed, 0 when not traced."""
    return _native.enabled()


def snapshot(path: str) -> bool:
    """Writes the live set and the retained history to path (mode 0600) now, after a
    retention walk says what holds what is live. Returns True on success, False when not traced
    or on error."""
    _retention.walk(_retention.SNAPSHOT, 0, floor_s=5.0)
    return _native.snapshot(_os.path.abspath(path)) == 0


class phase(_contextlib.ContextDecorator):
    """A phase: ``with vramtrace.phase("train"):`` or ``@vramtrace.phase("train")``.
    `vramtrace leaks --phase train` reports what each invocation leaves behind."""

    def __init__(self, name: _Any) -> None:
        self.name = str(name)

    def __enter__(self) -> "phase":
        _retention.phase_entry(self.name)
        _native.phase_enter(self.name)
        return self

    def __exit__(self, *exc: _Any) -> None:
        _native.phase_exit(self.name)
        _retention.phase_exit(self.name)
        return None


def _is_native(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def binary() -> str:
    """Path of the vramtrace executable: $VRAMTRACE_ANALYZER (set by the analyzer when it runs this
    module), the one that came with this package, or the one on PATH."""
    named = _os.environ.get("VRAMTRACE_ANALYZER")
    if named and _os.access(named, _os.X_OK):
        return named
    here = _os.path.dirname(_os.path.abspath(__file__))
    for candidate in (_os.path.join(here, "_bin", "vramtrace"),
                      _os.path.join(here, "..", "..", "build", "analyzer", "vramtrace")):
        if _os.access(candidate, _os.X_OK):
            return _os.path.abspath(candidate)
    # On PATH, skip the console script of a wheel (`vramtrace` -> this package): it would run
    # itself again.
    for directory in _os.environ.get("PATH", "").split(_os.pathsep):
        candidate = _os.path.join(directory or ".", "vramtrace")
        if _os.access(candidate, _os.X_OK) and _is_native(candidate):
            return _os.path.abspath(candidate)
    return "vramtrace"


def report(path: str) -> Report:
    """`vramtrace report`: peaks per device and kind, sites at the peak, what is live at the end."""
    return Report.from_json(_reports.run_json(binary(), "report", ["--top", "100"], _os.fspath(path)))


def leaks(path: str, phase_name: _Optional[str] = None) -> Leaks:
    """`vramtrace leaks`: each call of the phase (the one the analyzer picks when phase_name is
    None) and the sites whose allocations survived it. UsageError for an unknown phase."""
    args = ["--phase", phase_name] if phase_name else []
    return Leaks.from_json(_reports.run_json(binary(), "leaks", args, _os.fspath(path)))


def oom(path: str) -> Oom:
    """`vramtrace oom`: the last out-of-memory failure, by category. NotInTrace if there is none."""
    return Oom.from_json(_reports.run_json(binary(), "oom", [], _os.fspath(path)))


def timeline(path: str, buckets: int = 100) -> Timeline:
    """`vramtrace timeline --csv`: live bytes per device and kind in `buckets` time buckets."""
    return Timeline.from_csv(_reports.run_analyzer(binary(), "timeline", ["--csv", "-q", "--buckets", str(int(buckets))],
                                                   _os.fspath(path)))


def load(path: str, phase_name: _Optional[str] = None, buckets: int = 100) -> Analysis:
    """Every report of a trace at once (the timeline in `buckets` time buckets). leaks.phase is
    None when the trace has no phase call; oom is None when nothing failed for lack of memory; any
    other problem raises a TraceError."""
    try:
        found_leaks: _Optional[Leaks] = leaks(path, phase_name)
    except NotInTrace:
        found_leaks = None
    try:
        found_oom: _Optional[Oom] = oom(path)
    except NotInTrace:
        found_oom = None
    return Analysis(report(path), found_leaks, found_oom, timeline(path, buckets))


def export_parquet(path: str, out_dir: str, phase_name: _Optional[str] = None, quiet: bool = True) -> _Dict[str, str]:
    """`vramtrace export --format parquet`: the tables (traces, events, stacks, frames, phases,
    survivors) of a trace or of every *.vrt in a directory, as out_dir/TABLE.parquet; returns
    {table: path}. Needs pyarrow (MissingDependency without it). docs/python.md has the columns."""
    from . import _parquet

    return _parquet.export_parquet(_os.fspath(path), _os.fspath(out_dir), phase_name, quiet)
del annotations  # from the __future__ import: not part of the API
