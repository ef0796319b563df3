"""The hot path's unwinder (preload/unwind.c) records the stacks libunwind records.

Each program runs twice under `vramtrace run`: with the call-frame walk and its per-thread memo
(the default) and with VRAMTRACE_FAST_UNWIND=0 (libunwind for every stack). Every event must
carry the same frames, as `dump --stacks` prints them (a frame without a symbol as its module
and offset, from `dump --tables`: libraries can load at other addresses in the two runs). The programs hold what the memo must get right: one site in a
loop (the memo followed whole), sites alternating at the same depth, a phase's Python frames,
threads, a runtime linked statically (the driver's entry points), and sites that wait for the
collector after each event (the thread's stack cache then holds the stack before each event:
a stack under another stack's name shows whatever the timing).
"""
import os
import re

import pytest

from conftest import CUDART, GOLDEN, PROGRAM_SOURCES, analyze, program, trace

PROGRAMS = {
    "rt_api": lambda exe: [program("rt_api")],
    "mt_alloc": lambda exe: [program("mt_alloc")],
    "unwind_drained": lambda exe: [program("unwind_drained")],
    "static_rt": lambda exe: [program("static_rt")],
    "phases": lambda exe: [program("phases")],
    "ctypes_alloc": lambda exe: [exe, PROGRAM_SOURCES / "ctypes_alloc.py", CUDART],
    "py_lines": lambda exe: [exe, PROGRAM_SOURCES / "py_lines.py", CUDART],
}


def module_bases(trace):
    """{module file name: load address} from the trace's module table."""
    tables = analyze("dump", "--quiet", "--tables", trace).stdout
    return {os.path.basename(m[1]): int(m[2], 16)
            for m in re.finditer(r"^module \d+ (\S+) base=0x([0-9a-f]+)", tables, re.M)}


def stacks(trace):
    """(event line without time, address and thread, its frames) for every event with a stack."""
    bases = module_bases(trace)
    out, event, frames = [], None, []
    for line in analyze("dump", "--quiet", "--stacks", trace).stdout.splitlines() + [""]:
        m = re.match(r"^    #\d+ (.*)$", line)
        if m:
            raw = re.match(r"^0x([0-9a-f]+) \((.+)\)$", m[1])
            if raw and raw[2] in bases:
                frames.append(f"{raw[2]}+{int(raw[1], 16) - bases[raw[2]]:#x}")
            else:
                frames.append(m[1])
            continue
        if event is not None and frames:
            out.append((event, tuple(frames)))
        fields = line.split()
        event = " ".join(f for f in fields[2:] if not f.startswith(("addr=", "stack=", "alloc_stack=", "aux=", "stream="))) \
            if len(fields) > 2 and re.match(r"^\d+\.\d+$", fields[0]) else None
        frames = []
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_fast_walk_records_what_libunwind_records(tmp_path, python_exe, name):
    argv = PROGRAMS[name](python_exe)
    fast = trace(tmp_path, argv, name="fast.vrt")
    slow = trace(tmp_path, argv, env={"VRAMTRACE_FAST_UNWIND": "0"}, name="slow.vrt")
    assert fast.returncode == slow.returncode == 0, (fast.stderr, slow.stderr)
    a, b = stacks(fast.trace), stacks(slow.trace)
    assert len(a) > 3, f"{name}: only {len(a)} events with a stack"
    if name == "mt_alloc":  # threads interleave differently from run to run
        a, b = sorted(a), sorted(b)
    assert a == b


def test_on_a_real_gpu_job_the_fast_walk_recorded_what_libunwind_recorded():
    """scripts/gpu/unwind_check.py on an H100 (torch 2.11): one training job under each walk;
    backward's events come from the autograd engine's thread, whose order against the main
    thread's differs from run to run."""
    a = sorted(stacks(GOLDEN / "h200" / "unwind-fast.vrt"))
    b = sorted(stacks(GOLDEN / "h200" / "unwind-libunwind.vrt"))
    assert len(a) == 362 and sum(len(f) for _, f in a) / len(a) > 30
    assert a == b
