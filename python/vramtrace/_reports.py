"""The analyzer's reports as typed, frozen dataclasses, built from its --json (and timeline --csv)
output. Every byte count is an int, exactly as the analyzer printed it; ``raw`` keeps the whole
JSON object for fields a dataclass does not name (the analyzer may add fields; docs/cli.md)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, TypeVar

from ._errors import AnalyzerFailed, AnalyzerNotFound, TraceNotFound, UsageError, from_exit

T = TypeVar("T")


def _pick(cls: Type[T], d: Dict[str, Any], **nested: Any) -> T:
    """cls built from the keys of d that are its fields (missing ones take their defaults)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {k: v for k, v in d.items() if k in names}
    if "raw" in names:
        kwargs["raw"] = d
    kwargs.update(nested)
    return cls(**kwargs)


@dataclass(frozen=True)
class Frame:
    """One frame of a stack, innermost first in a Site's frames."""
    function: str
    file: str = ""
    line: int = 0
    module: str = ""
    kind: str = "native"
    address: str = ""


def _frames(items: Sequence[Dict[str, Any]]) -> Tuple[Frame, ...]:
    return tuple(_pick(Frame, f) for f in items or ())


@dataclass(frozen=True)
class Site:
    """Bytes and allocation count of one call stack (``stack`` is the trace's stack id, the one
    `dump` and the Parquet stacks table use; None for a site the analyzer labels instead).
    ``headline`` is the frame the text reports name it by (the innermost Python frame, else the
    innermost native one past CUDA and the allocator)."""
    bytes: int
    count: int
    stack: Optional[int] = None
    frames: Tuple[Frame, ...] = ()
    label: Optional[str] = None
    category: Optional[str] = None
    headline: Optional[Frame] = None

    @property
    def top_function(self) -> str:
        """The function the text reports name the site by (its headline frame)."""
        if self.headline is not None:
            return self.headline.function
        return self.frames[0].function if self.frames else (self.label or "")


def _headline(d: Dict[str, Any]) -> Optional[Frame]:
    return _pick(Frame, d["headline"]) if d.get("headline") else None


def _site(d: Dict[str, Any]) -> Site:
    return _pick(Site, d, frames=_frames(d.get("frames", ())), headline=_headline(d))


@dataclass(frozen=True)
class DevicePeak:
    """Peak and end of one device and kind (report's "devices")."""
    device: int
    kind: str
    peak_bytes: int
    peak_time_s: float
    live_bytes_at_end: int
    pytorch_allocator_bytes: int = 0
    top_at_peak: Tuple[Site, ...] = ()


@dataclass(frozen=True)
class Category:
    device: int
    name: str
    bytes: int
    identity_bytes: int = 0
    decided_by: str = ""


@dataclass(frozen=True)
class Report:
    """`vramtrace report --json`: peaks per device and kind, what is live at the end, by site."""
    file: str
    events: int
    duration_s: float
    end: str
    events_lost: int
    truncated: bool
    devices: Tuple[DevicePeak, ...]
    live_at_end: Tuple[Site, ...]
    categories_at_end: Tuple[Category, ...]
    pid: int = -1
    rank: int = -1
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Report":
        devices = tuple(_pick(DevicePeak, x, top_at_peak=tuple(_site(s) for s in x.get("top_at_peak", ())))
                        for x in d.get("devices", ()))
        return _pick(cls, d, devices=devices, live_at_end=tuple(_site(s) for s in d.get("live_at_end", ())),
                     categories_at_end=tuple(_pick(Category, c) for c in d.get("categories_at_end", ())))


@dataclass(frozen=True)
class PhaseCall:
    """One call (invocation) of the phase `leaks` looked at. ``growth_bytes``: what the live set
    grew from this call's entry to the next call's entry (or this one's exit for the last)."""
    name: str
    index: int
    start_s: float
    end_s: float
    live_bytes_at_entry: int
    allocated_bytes: int
    freed_bytes: int
    live_bytes_at_exit: int
    live_bytes_at_next_entry: int
    survivor_bytes: int
    events_lost: int = 0

    @property
    def growth_bytes(self) -> int:
        return self.live_bytes_at_next_entry - self.live_bytes_at_entry


@dataclass(frozen=True)
class Survivor(Site):
    """A site whose allocations outlived the phase call that made them, and what holds them."""
    phase_index: int = 0
    outlived_invocations: int = 0
    streams_one_a_call: int = 0  # each call's survivors here on a stream of their own: how many
    captured_bytes: int = 0  # of bytes: made for a CUDA graph (allocated during a stream capture)
    persistent: bool = False
    verdict: str = ""
    held_by: Tuple[str, ...] = ()
    held_by_bytes: Tuple[int, ...] = ()
    held_by_status: str = ""
    decided_by: str = ""


@dataclass(frozen=True)
class Leaks:
    """`vramtrace leaks --json`: the calls of one phase and what survived each. A trace without
    phase calls has phase None and no calls; its windows of growth stay in raw["growing"]."""
    file: str
    phase: Optional[str]
    calls: Tuple[PhaseCall, ...]
    survivors: Tuple[Survivor, ...]
    growth_per_invocation_bytes: int = 0
    growth_including_first_bytes: int = 0
    summary: str = ""
    layer: str = ""
    phase_picked_because: str = ""
    pid: int = -1
    rank: int = -1
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Leaks":
        survivors = tuple(_pick(Survivor, s, frames=_frames(s.get("frames", ())), headline=_headline(s),
                                held_by=tuple(s.get("held_by") or ()),
                                held_by_bytes=tuple(s.get("held_by_bytes") or ()))
                          for s in d.get("survivors", ()))
        return _pick(cls, d, calls=tuple(_pick(PhaseCall, p) for p in d.get("phases", ())), survivors=survivors)


@dataclass(frozen=True)
class OomCategory:
    """What the live bytes at the failed allocation were, by category, and what decided it."""
    name: str
    bytes: int
    identity_bytes: int = 0
    rule_bytes: int = 0
    decided_by: str = ""
    rule: str = ""


@dataclass(frozen=True)
class Remedy:
    name: str
    frees_bytes: int
    fits: Optional[bool]  # None: the trace cannot tell
    decided_by: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Oom:
    """`vramtrace oom --json`: the last out-of-memory failure and what the memory held then."""
    file: str
    requested_bytes: int
    device: int
    time_s: float
    api: str
    live_bytes: int
    categories: Tuple[OomCategory, ...]
    top_sites: Tuple[Site, ...]
    remedies: Tuple[Remedy, ...]
    thread: str = ""
    free_bytes: Optional[int] = None
    total_bytes: Optional[int] = None
    tensor_bytes: int = 0
    shortfall_bytes: Optional[int] = None
    # the failing call's projected tensor peak (from the call of its phase before it), and the
    # largest size the marks' sizes say fits; None where the trace cannot tell
    failing_call_peak_bytes: Optional[int] = None
    largest_size_that_fits: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Oom":
        o = dict(d["oom"], file=d.get("file", ""))
        call, largest = o.get("failing_call"), o.get("largest_size_that_fits")
        return _pick(cls, o, raw=d, categories=tuple(_pick(OomCategory, c) for c in o.get("categories", ())),
                     top_sites=tuple(_site(s) for s in o.get("top_sites", ())),
                     remedies=tuple(_pick(Remedy, r) for r in o.get("remedies", ())),
                     failing_call_peak_bytes=call["peak_bytes"] if call else None,
                     largest_size_that_fits=largest["size"] if largest else None)


@dataclass(frozen=True)
class Timeline:
    """`vramtrace timeline --csv`: live bytes (ints) per time bucket, one series per column
    ("dev0.device", "dev0.tensors", "host.host_pinned", ...)."""
    time_s: Tuple[float, ...]
    series: Dict[str, Tuple[int, ...]]

    @classmethod
    def from_csv(cls, text: str) -> "Timeline":
        lines = text.strip().splitlines()
        if not lines:
            return cls((), {})
        header = lines[0].split(",")
        rows = [line.split(",") for line in lines[1:]]
        series = {name: tuple(int(r[i]) for r in rows) for i, name in enumerate(header) if i > 0}
        return cls(tuple(float(r[0]) for r in rows), series)

    def rows(self) -> List[Dict[str, Any]]:
        """One dict per bucket: time_s and each series' bytes."""
        return [dict({"time_s": t}, **{k: v[i] for k, v in self.series.items()}) for i, t in enumerate(self.time_s)]

    def to_pandas(self) -> Any:
        """A pandas.DataFrame (time_s float, byte columns int64); needs pandas."""
        import pandas  # type: ignore[import-untyped,unused-ignore]  # optional dependency

        frame = pandas.DataFrame({"time_s": list(self.time_s)})
        for name, values in self.series.items():
            frame[name] = pandas.Series(values, dtype="int64")
        return frame


@dataclass(frozen=True)
class Analysis:
    """Everything load() reads: leaks is None for a trace without phase calls, oom for a trace
    without an out-of-memory failure."""
    report: Report
    leaks: Optional[Leaks]
    oom: Optional[Oom]
    timeline: Timeline

    def __getitem__(self, key: str) -> Any:
        """The dict load() returned before it returned this: analysis["report"] is the analyzer's
        JSON (as .report.raw), analysis["timeline"] the rows. Kept so that code written against
        the old return value runs; new code reads the attributes."""
        if key == "timeline":
            return self.timeline.rows()
        if key not in ("report", "leaks", "oom"):
            raise KeyError(key)
        part = getattr(self, key)
        return None if part is None else part.raw


# ---- running the analyzer --------------------------------------------------------------------

def run_analyzer(binary: str, what: str, args: Sequence[str], path: str) -> str:
    """stdout of `vramtrace WHAT ARGS... PATH`; a TraceError naming what the analyzer said if it
    exits non-zero."""
    if not os.path.exists(path):
        raise TraceNotFound("cannot read %s: no such file" % path, path=path)
    # its messages come back through the pipe; its progress goes to our terminal, if we have one
    terminal = _terminal_copy()
    env = dict(os.environ, VRAMTRACE_PROGRESS_FD=str(terminal)) if terminal is not None else None
    try:
        out = subprocess.run([binary, what, *args, path], capture_output=True, text=True, env=env,
                             pass_fds=(terminal,) if terminal is not None else ())
    except OSError as e:
        raise AnalyzerNotFound("cannot run the vramtrace analyzer %s: %s" % (binary, e.strerror), path=path) from e
    finally:
        if terminal is not None:
            os.close(terminal)
    if out.returncode != 0:
        raise from_exit(out.returncode, out.stderr, path, what)
    return out.stdout


def _terminal_copy() -> Optional[int]:
    """A descriptor (3 or above) of our stderr when it is a terminal, else None."""
    try:
        if sys.stderr is None or not sys.stderr.isatty():
            return None
        return os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def run_json(binary: str, what: str, args: Sequence[str], path: str) -> Dict[str, Any]:
    text = run_analyzer(binary, what, ["--json", "-q", *args], path)
    try:
        value = json.loads(text)
    except ValueError as e:
        raise AnalyzerFailed("vramtrace %s --json printed something that is not JSON: %s" % (what, e),
                             path=path) from e
    if not isinstance(value, dict):
        raise AnalyzerFailed("vramtrace %s --json printed no object" % what, path=path)
    processes = value.get("processes")
    if isinstance(processes, list):  # a run's directory: always a list, one object per trace
        if len(processes) != 1:
            raise UsageError("%s holds %d traces: name one of them (vramtrace %s reads each)" % (path, len(processes), what),
                             path=path)
        value = processes[0]
    return value
