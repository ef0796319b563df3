"""Golden outputs: small traces recorded once and kept in tests/golden/ (a few KB each), with the
exact text `vramtrace report` and `vramtrace dump --stacks` print for them in *.expected. They
pin the analyzer's output and its reading of an old trace: a change of either shows up here as
a diff to review.

To rewrite the expected files from the kept traces (then review `git diff tests/golden`):
    VRAMTRACE_UPDATE_GOLDEN=1 python3 -m pytest -q tests/e2e/test_golden.py
or  python3 -m pytest -q tests/e2e/test_golden.py --update-golden
The traces themselves are kept as recorded: an update records only a trace whose file is
missing, so delete tests/golden/NAME.vrt first to record it again with the current build.

Outputs are compared after normalizing what differs between recordings and machines: pids,
host names, absolute paths, addresses, times, dates and pointer-sized numbers.
"""
import difflib
import os
import re

import pytest

from conftest import GOLDEN, analyze, copy_trace, program, trace

# name -> (program and arguments, environment)
CASES = {
    "rt_api": (lambda: [program("rt_api")], {}),
    "drv_api": (lambda: [program("drv_api")], {}),
    "oom": (lambda: [program("oom")], {"FAKECUDA_TOTAL_BYTES": "16M"}),
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


def test_golden_traces_are_small():
    for trace_file in GOLDEN.glob("*.vrt"):
        assert trace_file.stat().st_size < 16 * 1024, trace_file


def test_normalize_keeps_what_matters():
    line = ("# vramtrace trace format 1.0, pid 9, ppid 8, rank -1, host box1\n"
            "vramtrace report: /tmp/x/t.vrt (pid 123: /work/b/tests/rt_api)\n"
            "  device 0  device       peak   4.00 MiB at    0.002 s    live at end   1.02 MiB\n"
            "top sites at the peak of host host_pinned (80.0 KiB at 0.006 s):\n"
            "0.005669 t1 alloc        cudaMallocPitch dev=0 device addr=0x7f21f98c1000 size=10240 "
            "aux=94462755633296 stack=9\n")
    assert normalize(line) == (
        "# vramtrace trace format 1.0, pid <pid>, ppid <pid>, rank -1, host <host>\n"
        "vramtrace report: <path>/t.vrt (pid <pid>: <path>/rt_api)\n"
        "  device 0  device       peak   4.00 MiB at    <time> s    live at end   1.02 MiB\n"
        "top sites at the peak of host host_pinned (80.0 KiB at <time> s):\n"
        "<time> t1 alloc        cudaMallocPitch dev=0 device addr=0x<hex> size=10240 "
        "aux=<n> stack=9\n")
