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

and the notebook side: ``vramtrace.load("run.vrt")`` returns the report as plain Python objects
(pandas DataFrames for the timeline when pandas is installed).
"""
import contextlib
import json
import os
import subprocess

from . import _native, _retention

__all__ = ["mark", "phase", "snapshot", "enabled", "load", "binary"]
__version__ = "0.1.0"


def mark(label):
    """Records an instant with a label in the trace."""
    _native.mark(str(label))


def enabled():
    """2 while recording everything, 1 while armed, 0 when not traced."""
    return _native.enabled()


def snapshot(path):
    """Writes the live set and the retained history to path (mode 0600) now, after a
    retention walk says what holds what is live. Returns True on success, False when not traced
    or on error."""
    _retention.walk(_retention.SNAPSHOT, 0, floor_s=5.0)
    return _native.snapshot(os.path.abspath(path)) == 0


class phase(contextlib.ContextDecorator):
    """A phase: ``with vramtrace.phase("train"):`` or ``@vramtrace.phase("train")``.
    `vramtrace leaks --phase train` reports what each invocation leaves behind."""

    def __init__(self, name):
        self.name = str(name)

    def __enter__(self):
        _retention.phase_entry(self.name)
        _native.phase_enter(self.name)
        return self

    def __exit__(self, *exc):
        _native.phase_exit(self.name)
        _retention.phase_exit(self.name)
        return False


def _is_native(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def binary():
    """Path of the vramtrace executable that came with this package (or the one on PATH)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "_bin", "vramtrace"),
                      os.path.join(here, "..", "..", "build", "analyzer", "vramtrace")):
        if os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    # On PATH, skip the console script of a wheel (`vramtrace` -> this package): it would run
    # itself again.
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", "vramtrace")
        if os.access(candidate, os.X_OK) and _is_native(candidate):
            return os.path.abspath(candidate)
    return "vramtrace"


def _run_json(*args):
    out = subprocess.run([binary()] + list(args), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or "vramtrace %s failed" % args[0])
    return json.loads(out.stdout) if out.stdout.strip() else None


def load(path, phase_name=None):
    """Reads a trace and returns its reports as plain Python objects:
    {"report": ..., "leaks": ..., "timeline": [...rows...]}; the timeline is a pandas DataFrame
    when pandas is installed."""
    result = {"report": _run_json("report", "--json", "-q", path)}
    leaks_args = ["leaks", "--json", "-q", path] + (["--phase", phase_name] if phase_name else [])
    try:
        result["leaks"] = _run_json(*leaks_args)
    except RuntimeError:
        result["leaks"] = None
    csv = subprocess.run([binary(), "timeline", "--csv", "-q", path], capture_output=True, text=True)
    rows = []
    if csv.returncode == 0:
        lines = csv.stdout.strip().splitlines()
        header = lines[0].split(",") if lines else []
        for line in lines[1:]:
            rows.append({k: float(v) for k, v in zip(header, line.split(","))})
    try:
        import pandas

        result["timeline"] = pandas.DataFrame(rows)
    except ImportError:
        result["timeline"] = rows
    return result
