"""Phases and marks from the C API (tests/programs/phases.c), and the commands that select by
them: `leaks --phase`, `report --until-mark`, `diff --at`. Every expected figure comes from the
sizes phases.c allocates (its header comment), none from another command's output."""
import json
import re
import sys

import pytest

from conftest import DOUBLES, MiB, KiB, SOURCE, analyze, program, trace
from stress_helpers import preload_lines, run, traced

STEPS = 4
SETUP = 4 * MiB
LEAK = 1 * MiB      # step_leak_site, kept by every step
SCRATCH = 2 * MiB   # step_scratch_site, freed inside every step
EVAL = 512 * KiB    # eval_site, freed inside every eval


@pytest.fixture(scope="module")
def ph(tmp_path_factory):
    t = trace(tmp_path_factory.mktemp("phases"), [program("phases"), STEPS])
    assert (t.returncode, t.stdout) == (0, f"phases: steps={STEPS} held_bytes={SETUP + STEPS * LEAK}\n"), t.stderr
    return t


def leaks(t, *args):
    return json.loads(analyze("leaks", "--json", "-q", *args, t.trace).stdout)


def test_phase_entries_and_exits_are_recorded_in_order(ph):
    seq = [(r.op, r.text.split('"')[1]) for r in ph.events() if r.op in ("phase_enter", "phase_exit")]
    expected = []
    for i in range(STEPS):
        expected += [("phase_enter", "step"), ("phase_enter", "step"), ("phase_exit", "step"), ("phase_exit", "step")]
        if i % 2 == 1:
            expected += [("phase_enter", "eval"), ("phase_exit", "eval")]
    assert seq == expected


def test_leaks_follows_every_invocation_of_the_named_phase(ph):
    """An invocation is an outermost call: the nested "step" around the scratch is part of it."""
    found = leaks(ph, "--phase", "step")
    assert found["phase"] == "step" and found["layer"] == "cuda"
    calls = found["phases"]
    assert [c["index"] for c in calls] == list(range(1, STEPS + 1))
    assert [c["live_bytes_at_entry"] for c in calls] == [SETUP + i * LEAK for i in range(STEPS)]
    assert [c["live_bytes_at_exit"] for c in calls] == [SETUP + (i + 1) * LEAK for i in range(STEPS)]
    assert [(c["allocated_bytes"], c["freed_bytes"]) for c in calls] == [(SCRATCH + LEAK, SCRATCH)] * STEPS
    assert found["growth_per_invocation_bytes"] == LEAK
    survivors = found["survivors"]
    assert [(s["bytes"], s["count"], s["frames"][0]["function"]) for s in survivors] == \
        [(LEAK, 1, "step_leak_site")] * STEPS
    assert sorted(s["phase_index"] for s in survivors) == list(range(1, STEPS + 1))


def test_leaks_without_a_phase_picks_the_one_whose_calls_grow(ph):
    assert leaks(ph)["phase"] == "step"
    assert len(leaks(ph)["phases"]) == STEPS


def test_leaks_of_a_phase_that_frees_what_it_allocates_finds_no_growth(ph):
    found = leaks(ph, "--phase", "eval")
    calls = found["phases"]
    assert len(calls) == STEPS // 2
    # eval runs after steps 2 and 4: 4 MiB + 2 MiB and 4 MiB + 4 MiB live around it
    assert [(c["live_bytes_at_entry"], c["live_bytes_at_exit"]) for c in calls] == \
        [(SETUP + 2 * (k + 1) * LEAK,) * 2 for k in range(STEPS // 2)]
    assert [c["allocated_bytes"] for c in calls] == [EVAL] * (STEPS // 2)
    assert found["growth_per_invocation_bytes"] == 0 and not found["survivors"]


OUTLIVING = """
import ctypes, sys
import vramtrace
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaSetDevice(0)
kept = {}
for call in range(1, 7):
    with vramtrace.phase("step"):
        for _ in range(600 if call == 2 else 0):  # more births than leaks keeps for its next look
            q = ctypes.c_void_p()
            rt.cudaMalloc(ctypes.byref(q), 4096)
            rt.cudaFree(q)
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), call << 20)
        kept[call] = p
        if call == 3:
            rt.cudaFree(kept[1])
        if call == 5:
            rt.cudaDeviceReset()
            rt.cudaSetDevice(0)
"""


@pytest.mark.parametrize("retain", ["on", "off"])
def test_a_survivor_outlives_the_calls_until_it_ends_however_it_ends(tmp_path, retain):
    """outlived_invocations: the call entries (and the end) at which some of a site's survivors
    were live, from the first after the call that made them. Call k of "step" keeps k MiB (call 2
    first allocates and frees 600 more); call 3 frees call 1's (its own record), call 5 resets the device (endings that are not the
    record's own: the scan after it looks at every live item), which ends calls 2-4's and its
    own; call 6's lives to the end. With retention walks each scan looks at every live item (a
    walk explains what it sees); without, at the last call's births alone."""
    script = tmp_path / "outliving.py"
    script.write_text(OUTLIVING)
    t = trace(tmp_path, [sys.executable, script], env={"LD_LIBRARY_PATH": str(DOUBLES),
                                                        "PYTHONPATH": str(SOURCE / "python")},
              run_args=["--retain", retain])
    assert t.returncode == 0, t.stderr
    got = {s["phase_index"]: (s["bytes"], s["outlived_invocations"]) for s in leaks(t, "--phase", "step")["survivors"]}
    assert got == {1: (1 * MiB, 2), 2: (2 * MiB, 3), 3: (3 * MiB, 2), 4: (4 * MiB, 1), 6: (6 * MiB, 1)}


MANY_CALLS = """
import ctypes, sys
import vramtrace
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaSetDevice(0)
calls = int(sys.argv[1])
p = ctypes.c_void_p()
for call in range(1, calls + 1):
    with vramtrace.phase("step"):
        rt.cudaMalloc(ctypes.byref(p), 4096)
        if call != 50:
            rt.cudaFree(p)
"""


def test_leaks_follows_a_phase_called_more_than_100000_times(tmp_path):
    """A job that runs for days with a phase per step: 100001 calls (leaks stopped at 100000 with
    "size field out of range"). The text lists the first and the last 25 calls and says how many
    it leaves out; --json has every one."""
    calls = 100_001
    script = tmp_path / "many_calls.py"
    script.write_text(MANY_CALLS)
    t = trace(tmp_path, [sys.executable, script, calls], env={"LD_LIBRARY_PATH": str(DOUBLES),
                                                              "PYTHONPATH": str(SOURCE / "python")},
              run_args=["--retain", "off"])
    assert t.returncode == 0, t.stderr
    d = leaks(t, "--phase", "step")
    assert len(d["phases"]) == calls
    assert [(s["phase_index"], s["bytes"]) for s in d["survivors"]] == [(50, 4096)]
    text = analyze("leaks", "-q", "--phase", "step", t.trace).stdout.splitlines()
    rows = [line.split()[0] for line in text if re.match(r"^ +\d+ ", line)]
    assert rows == [str(i) for i in range(1, 26)] + [str(i) for i in range(calls - 24, calls + 1)]
    assert f"  ... {calls - 50} calls in between (--json lists every call)" in text


DISTINCT_PHASES = """
import ctypes, sys
import vramtrace
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaSetDevice(0)
names = int(sys.argv[1])
for rounds in range(2):
    for i in range(names):
        with vramtrace.phase(f"op-{i}"):
            pass
vramtrace.phase("open").__enter__()
"""


def test_phases_named_differently_at_every_call_are_each_counted(tmp_path):
    """A name per call (NVTX ranges with a counter in their message, as emit_nvtx makes them):
    the collector finds a phase's state by its name's string id (it searched every name known,
    a cost growing with the names at every call). The exit checkpoint counts each name's calls
    and what is still open."""
    names = 30_000
    script = tmp_path / "distinct_phases.py"
    script.write_text(DISTINCT_PHASES)
    t = trace(tmp_path, [sys.executable, script, names], env={"LD_LIBRARY_PATH": str(DOUBLES),
                                                              "PYTHONPATH": str(SOURCE / "python")},
              run_args=["--retain", "off"])
    assert t.returncode == 0, t.stderr
    dump = analyze("dump", "-q", t.trace).stdout
    counted = dict(re.findall(r' cp_phase +id=\d+ "([^"]*)" (entered=\d+ depth=\d+)$', dump, re.M))
    assert counted.pop("open") == "entered=1 depth=1"
    assert counted == {f"op-{i}": "entered=2 depth=0" for i in range(names)}


def test_report_until_mark_is_the_state_at_the_mark(ph):
    rep = json.loads(analyze("report", "--json", "-q", "--until-mark", "half", ph.trace).stdout)
    live = {(d["device"], d["kind"]): d["live_bytes_at_end"] for d in rep["devices"]}
    assert live == {(0, "device"): SETUP + STEPS // 2 * LEAK}
    peak = {(d["device"], d["kind"]): d["peak_bytes"] for d in rep["devices"]}
    # the highest point before the mark: the last step's scratch (freed before it leaks)
    assert peak == {(0, "device"): SETUP + (STEPS // 2 - 1) * LEAK + SCRATCH}


def test_diff_at_two_times_of_one_trace(ph):
    mark, = [r for r in ph.events("mark")]
    # phases.c is idle for 20 ms after the mark: 10 ms after it, the state is the mark's
    d = json.loads(analyze("diff", "--json", "-q", "--top", "100", ph.trace, "--at", f"{mark.ts + 0.010:.6f}",
                           "--at", "1000").stdout)
    assert (d["total_a"], d["total_b"]) == (SETUP + STEPS // 2 * LEAK, SETUP + STEPS * LEAK)
    assert [(s["delta"], s["site"]["frames"][0]["function"]) for s in d["sites"]] == \
        [(STEPS // 2 * LEAK, "step_leak_site")]


# ---- NVTX ranges (tests/programs/nvtx_ranges.c) ---------------------------------------------------

@pytest.fixture(scope="module")
def nv(tmp_path_factory):
    t = trace(tmp_path_factory.mktemp("nvtx"), [program("nvtx_ranges")])
    assert t.returncode == 0, t.stderr
    assert t.stdout.replace("nvtx_ranges: payload\n", "") == f"nvtx_ranges: held_bytes={SETUP + 3 * LEAK}\n"
    return t


def labels(t, *ops):
    return [(r.op, r.text.split('"')[1]) for r in t.events() if r.op in ops]


def test_every_kind_of_nvtx_range_and_mark_becomes_a_phase_or_mark(nv):
    ranges = ["step"] * 3 + ["eval"] * 2 + ["load", "load-ex", "domain-step", "domain-load"]
    expected = [(op, "nvtx:" + name) for name in ranges for op in ("phase_enter", "phase_exit")]
    if "nvtx_ranges: payload" in nv.stdout:  # built with the payload extension's header
        # NCCL's comm-init closed by nvtxRangePopPayload (ux defect 44: it never ended, so every
        # later phase of an NCCL job sat inside ncclCommInitRankConfig); a nameless payload
        # range inside "outer" pairs with its own pop, not with outer's.
        expected += [("phase_enter", "nvtx:comm-init"), ("phase_exit", "nvtx:comm-init"),
                     ("phase_enter", "nvtx:outer"), ("phase_enter", "nvtx:inner"),
                     ("phase_exit", "nvtx:inner"), ("phase_exit", "nvtx:outer")]
    assert labels(nv, "phase_enter", "phase_exit") == expected
    assert labels(nv, "mark") == [("mark", "nvtx:half"), ("mark", "nvtx:ex-mark"), ("mark", "nvtx:domain-mark")]


def test_leaks_follows_an_nvtx_range(nv):
    found = leaks(nv, "--phase", "nvtx:step")
    assert [(c["live_bytes_at_entry"], c["live_bytes_at_exit"]) for c in found["phases"]] == \
        [(SETUP + i * LEAK, SETUP + (i + 1) * LEAK) for i in range(3)]
    assert found["growth_per_invocation_bytes"] == LEAK
    assert leaks(nv)["phase"] == "nvtx:step"  # 3 invocations, eval 2


def test_nvtx_injection_path_owned_by_another_tool_is_left_alone(tmp_path):
    """Another profiler set NVTX_INJECTION64_PATH: one line says ranges will not become phases,
    the tool keeps its hook (here: none loadable, so NVTX calls are no-ops), and the trace is
    still exact."""
    other = "/nonexistent/libother.so"
    p, out = run(tmp_path, [program("nvtx_ranges")], "t.vrt", env={"NVTX_INJECTION64_PATH": other}, quiet=False)
    assert p.returncode == 0
    assert [line.split(": ", 1)[1] for line in preload_lines(p.stderr) if "tracing to" not in line] == \
        [f"NVTX_INJECTION64_PATH is taken by {other}; NVTX ranges will not become phases"]
    t = traced(p, out)
    assert not labels(t, "phase_enter", "phase_exit", "mark")
    assert t.totals() == {(0, "device"): (SETUP + 2 * LEAK + SCRATCH, SETUP + 3 * LEAK)}
