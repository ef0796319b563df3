"""Golden outputs: small traces recorded once and kept in tests/golden/ (a few KB each), with the
exact text `vramtrace report` and `vramtrace dump --stacks` print for them in *.expected. They
pin the analyzer's output and its reading of an old trace: a change of either shows up here as
a diff to review.

The expected texts were written by the analyzer, so they are also checked against what each
program is known to do (TRUTH below, from the programs' own sources, as they were when the
traces were recorded): the totals of the kept trace and of report.expected, and every event of
dump.expected. An --update-golden from a wrong analyzer fails here.

To rewrite the expected files from the kept traces (then review `git diff tests/golden`):
    VRAMTRACE_UPDATE_GOLDEN=1 python3 -m pytest -q tests/e2e/test_golden.py
or  python3 -m pytest -q tests/e2e/test_golden.py --update-golden
The traces themselves are kept as recorded: an update records only a trace whose file is
missing, so delete tests/golden/NAME.vrt first to record it again with the current build.

Outputs are compared after normalizing what differs between recordings and machines: pids,
host names, absolute paths, addresses, times, dates and pointer-sized numbers.
"""
import difflib
import json
import os
import re

import pytest

from conftest import GOLDEN, KiB, MiB, analyze, copy_trace, human, parse_dump, program, trace

# name -> (program and arguments, environment)
CASES = {
    "rt_api": (lambda: [program("rt_api")], {}),
    "drv_api": (lambda: [program("drv_api")], {}),
    "oom": (lambda: [program("oom")], {"FAKECUDA_TOTAL_BYTES": "16M"}),
}

# What each program did (tests/programs/NAME.c): {(device, kind): (peak, live at the end)}, and
# every allocation and release event in order, as (op, API, size).
TRUTH = {
    "rt_api": ({(0, "device"): (4 * MiB, 1 * MiB + 10240 + 8192), (0, "managed"): (2 * MiB, 2 * MiB),
                (-1, "host_pinned"): (64 * KiB + 16384, 64 * KiB)},
               [("alloc", "cudaMalloc", 1 * MiB), ("alloc", "cudaMalloc", 3 * MiB), ("free", "cudaFree", 3 * MiB),
                ("alloc", "cudaMallocPitch", 10240), ("alloc", "cudaMalloc3D", 6144), ("free", "cudaFree", 6144),
                ("alloc", "cudaMallocAsync", 4096), ("free", "cudaFreeAsync", 4096),
                ("alloc", "cudaMallocFromPoolAsync", 8192), ("alloc", "cudaMallocFromPoolAsync", 2048),
                ("free", "cudaFreeAsync", 2048), ("alloc", "cudaMallocManaged", 2 * MiB),
                ("alloc", "cudaMallocHost", 64 * KiB), ("alloc", "cudaHostAlloc", 12288),
                ("free", "cudaFreeHost", 12288), ("alloc", "cudaHostRegister", 16384),
                ("free", "cudaHostUnregister", 16384), ("import", "cudaIpcOpenMemHandle", 1 * MiB),
                ("import_close", "cudaIpcCloseMemHandle", 1 * MiB)]),
    # recorded before async_free_site was added to drv_api.c
    "drv_api": ({(0, "device"): (5 * MiB + 4096, 3 * MiB + 4096), (0, "managed"): (1 * MiB, 0),
                 (-1, "host_pinned"): (24 * KiB, 8 * KiB)},
                [("alloc", "cuMemAlloc_v2", 1 * MiB), ("alloc", "cuMemAlloc_v2", 2 * MiB),
                 ("free", "cuMemFree_v2", 2 * MiB), ("alloc", "cuMemAllocManaged", 1 * MiB),
                 ("free", "cuMemFree_v2", 1 * MiB), ("alloc", "cuMemAllocAsync", 4096),
                 ("alloc", "cuMemAllocAsync_ptsz", 8192), ("free", "cuMemFreeAsync_ptsz", 8192),
                 ("alloc", "cuMemAllocHost_v2", 8192), ("alloc", "cuMemHostAlloc", 4096),
                 ("free", "cuMemFreeHost", 4096), ("alloc", "cuMemHostRegister_v2", 16384),
                 ("free", "cuMemHostUnregister", 16384), ("va_reserve", "cuMemAddressReserve", 8 * MiB),
                 ("phys_create", "cuMemCreate", 2 * MiB), ("phys_create", "cuMemCreate", 2 * MiB),
                 ("map", "cuMemMap", 2 * MiB), ("map", "cuMemMap", 2 * MiB), ("phys_release", "cuMemRelease", 2 * MiB),
                 ("phys_release", "cuMemRelease", 2 * MiB), ("phys_create", "cuMemRetainAllocationHandle", 0),
                 ("phys_release", "cuMemRelease", 2 * MiB), ("unmap", "cuMemUnmap", 4 * MiB),
                 ("va_free", "cuMemAddressFree", 8 * MiB), ("va_reserve", "cuMemAddressReserve", 2 * MiB),
                 ("phys_create", "cuMemCreate", 2 * MiB), ("map", "cuMemMap", 2 * MiB),
                 ("phys_release", "cuMemRelease", 2 * MiB)]),
    "oom": ({(0, "device"): (14 * MiB, 14 * MiB)},
            [("alloc", "cudaMalloc", 12 * MiB), ("failed", "cudaMalloc", 8 * MiB), ("oom", "cudaMalloc", 8 * MiB),
             ("alloc", "cudaMalloc", 2 * MiB)]),
}

OUTPUTS = {
    "report": lambda path: ["report", path],
    "dump": lambda path: ["dump", "--stacks", path],
}

_NORMALIZE = [
    (re.compile(r"\b(pid|ppid|parent) -?\d+"), r"\1 <pid>"),
    (re.compile(r"(, host )\S+$", re.M), r"\1<host>"),  # dump's header line
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"), "<date>"),
    # absolute paths keep their last component: "/any/where/rt_api" -> "<path>/rt_api"
    (re.compile(r"(?<![\w.<>-])/(?:[^\s/():]+/)*([^\s/():]+)"), r"<path>/\1"),
    (re.compile(r"0x[0-9a-f]+"), "0x<hex>"),
    (re.compile(r"\b\d+\.\d+( s\b)"), r"<time>\1"),
    (re.compile(r"^\d+\.\d+ t", re.M), "<time> t"),
    (re.compile(r"\b\d{10,}\b"), "<n>"),  # pointers printed in decimal (pool handles)
]


_recorded = set()


def normalize(text):
    for pattern, replacement in _NORMALIZE:
        text = pattern.sub(replacement, text)
    return text


def update_requested(config):
    return os.environ.get("VRAMTRACE_UPDATE_GOLDEN") == "1" or config.getoption("update_golden")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("output", sorted(OUTPUTS))
def test_golden_output(request, tmp_path, name, output):
    trace_file = GOLDEN / f"{name}.vrt"
    expected_file = GOLDEN / f"{name}.{output}.expected"
    if update_requested(request.config):
        if not trace_file.exists() and name not in _recorded:
            _recorded.add(name)
            argv, env = CASES[name]
            t = trace(tmp_path, argv(), env=env)
            assert t.returncode == 0, t.stderr
            copy_trace(t.trace, trace_file)
        expected_file.write_text(normalize(analyze(*OUTPUTS[output](trace_file)).stdout))
    assert trace_file.exists(), f"{trace_file} is missing: record it with VRAMTRACE_UPDATE_GOLDEN=1"
    actual = normalize(analyze(*OUTPUTS[output](trace_file)).stdout)
    expected = expected_file.read_text()
    assert actual == expected, "".join(difflib.unified_diff(
        expected.splitlines(True), actual.splitlines(True), str(expected_file), "actual"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_trace_and_report_say_what_the_program_did(name):
    totals, _ = TRUTH[name]
    rep = json.loads(analyze("report", "--json", "-q", GOLDEN / f"{name}.vrt").stdout)
    assert {(d["device"], d["kind"]): (d["peak_bytes"], d["live_bytes_at_end"]) for d in rep["devices"]} == totals
    shown = {}
    for line in (GOLDEN / f"{name}.report.expected").read_text().splitlines():
        m = re.match(r"^  (device (\d+)|host)\s+(\S+)\s+peak\s+(.+?) at .* live at end\s+(.+)$", line)
        if m:
            shown[(int(m[2]) if m[2] else -1, m[3])] = (m[4].strip(), m[5].strip())
    assert shown == {key: (human(peak), human(live)) for key, (peak, live) in totals.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_dump_holds_every_call_of_the_program(name):
    _, calls = TRUTH[name]
    text = (GOLDEN / f"{name}.dump.expected").read_text()
    text = text.replace("<time>", "0.0").replace("0x<hex>", "0x0").replace("<n>", "0")  # what normalize() hid
    events = [(r.op, r.api, r["size"]) for r in parse_dump(text)
              if not r.op.startswith("cp_") and r.op not in ("checkpoint", "mark", "phase_enter", "phase_exit")]
    assert events == calls


def test_golden_traces_are_small():
    for trace_file in GOLDEN.glob("*.vrt"):
        assert trace_file.stat().st_size < 16 * 1024, trace_file


def test_normalize_keeps_what_matters():
    line = ("# vramtrace trace format 1.0, pid 9, ppid 8, rank -1, host box1\n"
            "vramtrace report: /tmp/x/t.vrt (pid 123: /work/b/tests/rt_api)\n"
            "  device 0  device       peak   4.00 MiB at    0.002 s    live at end   1.02 MiB\n"
            "top sites at the peak of pinned host memory (80.0 KiB at 0.006 s):\n"
            "0.005669 t1 alloc        cudaMallocPitch dev=0 device addr=0x7f21f98c1000 size=10240 "
            "aux=94462755633296 stack=9\n")
    assert normalize(line) == (
        "# vramtrace trace format 1.0, pid <pid>, ppid <pid>, rank -1, host <host>\n"
        "vramtrace report: <path>/t.vrt (pid <pid>: <path>/rt_api)\n"
        "  device 0  device       peak   4.00 MiB at    <time> s    live at end   1.02 MiB\n"
        "top sites at the peak of pinned host memory (80.0 KiB at <time> s):\n"
        "<time> t1 alloc        cudaMallocPitch dev=0 device addr=0x<hex> size=10240 "
        "aux=<n> stack=9\n")
