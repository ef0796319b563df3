"""`vramtrace export --format parquet -o DIR TRACE|DIRECTORY`: columnar tables for one trace or a
directory of per-rank traces, for DuckDB, Spark, pandas, Polars (docs/python.md, "Per-rank
analysis"). Needs pyarrow (an optional dependency: MissingDependency without it).

One Parquet file per table in DIR, every row keyed by ``trace`` (the trace's file name) and
``rank`` (the RANK the job had, -1 without one):

  traces.parquet    one row per trace: file, pid, host, rank, local_rank, world_size, events,
                    complete, and phase and growth_per_call_bytes (leaks' "+N per call" line)
  events.parquet    every record of `vramtrace dump --json`: seq, time_s, thread, op, api, device,
                    kind, addr, size, aux, aux2, stream, id, id2, result, stack, alloc_stack, text
  stacks.parquet    stack, depth, and the headline frame (the one reports name the stack by):
                    headline, headline_function, headline_file, headline_line
  frames.parquet    stack, position (0 = innermost), function, file, line, module, kind, address
  phases.parquet    per call of the phase `vramtrace leaks` picks (or --phase): phase, call,
                    start_s, end_s, live_bytes_at_entry, allocated_bytes, freed_bytes,
                    live_bytes_at_exit, live_bytes_at_next_entry, survivor_bytes (leaks' "left
                    behind": the call's growth), growth_bytes (next entry - entry)
  survivors.parquet the sites `leaks` says survive a call, in its order: phase, position, stack,
                    bytes, count, verdict, outlived_invocations, streams_one_a_call (calls whose
                    survivors here came on a stream no other call's did: a stream made per call),
                    captured_bytes (of bytes, made for a CUDA graph: allocated during a capture),
                    headline_function, headline_file, headline_line

Byte counts and addresses are exact (uint64/int64), as the analyzer computed them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from . import binary
from ._errors import AnalyzerNotFound, MissingDependency, NotInTrace, TraceError, TraceNotFound, from_exit
from ._reports import Leaks, run_json

TABLES = ("traces", "events", "stacks", "frames", "phases", "survivors")


def _pyarrow() -> Any:
    try:
        import pyarrow  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import pyarrow.parquet  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
    except ImportError as e:
        raise MissingDependency("export --format parquet needs pyarrow, which is not installed for %s "
                                "(pip install pyarrow): %s" % (sys.executable, e)) from e
    return pyarrow


def trace_files(path: str) -> List[str]:
    """The trace, or the *.vrt files of a directory (sorted by name)."""
    if os.path.isdir(path):
        found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".vrt"))
        if not found:
            raise TraceNotFound("%s: no *.vrt trace in this directory" % path, path=path)
        return found
    if not os.path.exists(path):
        raise TraceNotFound("cannot read %s: no such file" % path, path=path)
    return [path]


class _Table:
    """One table's rows, appended as columns and written to its Parquet file in row groups of
    BATCH rows, so that a trace of millions of events never sits in memory whole."""

    BATCH = 1 << 18

    def __init__(self, pa: Any, name: str, fields: Sequence[Tuple[str, str]], path: str) -> None:
        self.pa, self.name, self.path = pa, name, path
        self.schema = pa.schema([(n, getattr(pa, ty)()) for n, ty in fields])
        self.data: Dict[str, List[Any]] = {n: [] for n, _ in fields}
        self.writer: Any = None

    def add(self, **row: Any) -> None:
        for name, values in self.data.items():
            values.append(row.get(name))
        if len(self.data["trace"]) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        if self.writer is None:
            self.writer = self.pa.parquet.ParquetWriter(self.path, self.schema)
        self.writer.write_table(self.pa.table(self.data, schema=self.schema))
        for values in self.data.values():
            values.clear()

    def close(self) -> None:
        if self.data["trace"] or self.writer is None:
            self.flush()
        self.writer.close()


_SCHEMAS = {
    "traces": [("trace", "string"), ("rank", "int32"), ("file", "string"), ("pid", "int32"), ("host", "string"),
               ("local_rank", "int32"), ("world_size", "int32"), ("events", "int64"), ("complete", "bool_"),
               ("phase", "string"), ("growth_per_call_bytes", "int64")],
    "events": [("trace", "string"), ("rank", "int32"), ("seq", "int64"), ("time_s", "float64"), ("thread", "int32"),
               ("op", "string"), ("api", "string"), ("device", "int32"), ("kind", "string"), ("addr", "uint64"),
               ("size", "uint64"), ("aux", "uint64"), ("aux2", "uint64"), ("stream", "uint64"), ("id", "uint64"),
               ("id2", "uint64"), ("result", "int32"), ("stack", "uint32"), ("alloc_stack", "uint32"),
               ("text", "string")],
    "stacks": [("trace", "string"), ("rank", "int32"), ("stack", "uint32"), ("depth", "int32"),
               ("headline", "int32"), ("headline_function", "string"), ("headline_file", "string"),
               ("headline_line", "int32")],
    "frames": [("trace", "string"), ("rank", "int32"), ("stack", "uint32"), ("position", "int32"),
               ("function", "string"), ("file", "string"), ("line", "int32"), ("module", "string"),
               ("kind", "string"), ("address", "string")],
    "phases": [("trace", "string"), ("rank", "int32"), ("phase", "string"), ("call", "int32"), ("start_s", "float64"),
               ("end_s", "float64"), ("live_bytes_at_entry", "int64"), ("allocated_bytes", "int64"),
               ("freed_bytes", "int64"), ("live_bytes_at_exit", "int64"), ("live_bytes_at_next_entry", "int64"),
               ("survivor_bytes", "int64"), ("growth_bytes", "int64")],
    "survivors": [("trace", "string"), ("rank", "int32"), ("phase", "string"), ("position", "int32"),
                  ("stack", "uint32"), ("bytes", "int64"), ("count", "int64"), ("verdict", "string"),
                  ("outlived_invocations", "int32"), ("streams_one_a_call", "int32"), ("captured_bytes", "int64"),
                  ("headline_function", "string"), ("headline_file", "string"),
                  ("headline_line", "int32")],
}


def _dump_records(exe: str, path: str) -> Iterator[Dict[str, Any]]:
    """The lines of `vramtrace dump --json -q path`, streamed; a TraceError if it fails."""
    with tempfile.TemporaryFile("w+") as err:
        try:
            proc = subprocess.Popen([exe, "dump", "--json", "-q", path], stdout=subprocess.PIPE, stderr=err, text=True)
        except OSError as e:
            raise AnalyzerNotFound("cannot run the vramtrace analyzer %s: %s" % (exe, e.strerror), path=path) from e
        assert proc.stdout is not None
        with proc:
            for line in proc.stdout:
                yield json.loads(line)
        if proc.returncode != 0:
            err.seek(0)
            raise from_exit(proc.returncode, err.read(), path, "dump")


def _read_dump(exe: str, path: str, name: str, tables: Dict[str, _Table]) -> Dict[str, Any]:
    """The dump --json of one trace into the events, stacks and frames tables; its traces row."""
    rank = -1
    row: Dict[str, Any] = {}
    for rec in _dump_records(exe, path):
        kind = rec["type"]
        if kind == "event":
            rec.update(trace=name, rank=rank)
            tables["events"].add(**rec)
        elif kind == "stack":
            frames, at = rec["frames"], rec["headline"]
            head = frames[at] if 0 <= at < len(frames) else {}
            tables["stacks"].add(trace=name, rank=rank, stack=rec["stack"], depth=len(frames), headline=at,
                                 headline_function=head.get("function"), headline_file=head.get("file"),
                                 headline_line=head.get("line"))
            for position, f in enumerate(frames):
                tables["frames"].add(trace=name, rank=rank, stack=rec["stack"], position=position, **f)
        elif kind == "header":
            rank = rec["rank"]
            header = rec
        elif kind == "end":
            row = dict(trace=name, rank=rank, file=os.path.abspath(path), pid=header["pid"], host=header["host"],
                       local_rank=header["local_rank"], world_size=header["world_size"], events=rec["events"],
                       complete=rec["complete"])
    return row


def _read_leaks(exe: str, path: str, row: Dict[str, Any], phase: Optional[str], tables: Dict[str, _Table]) -> None:
    """The leaks --json of one trace into the phases and survivors tables and its traces row."""
    name, rank = row["trace"], row["rank"]
    try:
        leaks = Leaks.from_json(run_json(exe, "leaks", ["--phase", phase] if phase else [], path))
    except NotInTrace:
        return
    if leaks.phase is None:
        return
    row.update(phase=leaks.phase, growth_per_call_bytes=leaks.growth_per_invocation_bytes)
    for c in leaks.calls:
        tables["phases"].add(trace=name, rank=rank, phase=c.name, call=c.index, start_s=c.start_s, end_s=c.end_s,
                             live_bytes_at_entry=c.live_bytes_at_entry, allocated_bytes=c.allocated_bytes,
                             freed_bytes=c.freed_bytes, live_bytes_at_exit=c.live_bytes_at_exit,
                             live_bytes_at_next_entry=c.live_bytes_at_next_entry, survivor_bytes=c.survivor_bytes,
                             growth_bytes=c.growth_bytes)
    for position, s in enumerate(leaks.survivors):
        head = s.headline
        tables["survivors"].add(trace=name, rank=rank, phase=leaks.phase, position=position, stack=s.stack,
                                bytes=s.bytes, count=s.count, verdict=s.verdict,
                                outlived_invocations=s.outlived_invocations,
                                streams_one_a_call=s.streams_one_a_call, captured_bytes=s.captured_bytes,
                                headline_function=head.function if head else None,
                                headline_file=head.file if head else None, headline_line=head.line if head else None)


def export_parquet(path: str, out_dir: str, phase: Optional[str] = None, quiet: bool = False) -> Dict[str, str]:
    """Writes the tables of the trace (or of every *.vrt in the directory) path to out_dir/TABLE.parquet;
    returns {table: file}. A TraceError names the trace that could not be read."""
    pa = _pyarrow()
    exe = binary()
    files = trace_files(os.fspath(path))
    names = [os.path.relpath(f, os.fspath(path)) if os.path.isdir(path) else os.path.basename(f) for f in files]
    os.makedirs(out_dir, exist_ok=True)
    tables = {t: _Table(pa, t, _SCHEMAS[t], os.path.join(out_dir, t + ".parquet")) for t in TABLES}
    try:
        for i, (f, name) in enumerate(zip(files, names)):
            if not quiet:
                sys.stderr.write("vramtrace: export parquet: %d/%d %s\n" % (i + 1, len(files), f))
            row = _read_dump(exe, f, name, tables)
            _read_leaks(exe, f, row, phase, tables)
            tables["traces"].add(**row)
        for table in tables.values():
            table.close()
    except BaseException:
        # No half-written tables: what was written so far goes.
        for table in tables.values():
            if table.writer is not None:
                table.writer.close()
            if os.path.exists(table.path):
                os.unlink(table.path)
        raise
    return {t: tables[t].path for t in TABLES}


def main(argv: Optional[Iterable[str]] = None) -> int:
    """python -m vramtrace._parquet -o DIR [--phase NAME] [-q] TRACE|DIRECTORY (what the analyzer's
    `export --format parquet` runs)."""
    ap = argparse.ArgumentParser(prog="vramtrace export --format parquet")
    ap.add_argument("-o", "--output", required=True, help="the directory the tables are written to")
    ap.add_argument("--phase", help="the phase of the phases and survivors tables (default: the one leaks picks)")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("path", help="a trace, or a directory of per-rank traces (*.vrt)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    try:
        written = export_parquet(args.path, args.output, args.phase, args.quiet)
    except TraceError as e:
        sys.stderr.write("vramtrace: %s\n" % e)
        return 5 if isinstance(e, MissingDependency) else (e.returncode or 4)
    if not args.quiet:
        sys.stderr.write("vramtrace: wrote %s\n" % ", ".join(written[t] for t in TABLES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
