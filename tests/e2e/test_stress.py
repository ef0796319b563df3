"""Never hurt the job: vramtrace under concurrency, fork, signals, exec, exit handlers, a
disk that fills up, an output directory it cannot write, and bad settings.

Every run has a time limit (stress_helpers.run kills its whole process group): a deadlock fails
the test with "hung" instead of hanging the suite. Programs are tests/programs/stress_*.c; each prints exactly what
it did ("key=value"), and the trace is compared with that. Tests marked slow run in the 'stress'
meson suite (VRAMTRACE_STRESS=1); the rest take a second or two each.

Known bugs are strict xfails (they fail the suite once fixed, so the marker gets removed); each
names its entry in docs/RELIABILITY.md.
"""
import errno
import json
import os
import re
import resource
import shutil
import subprocess
import sys

import pytest

from conftest import CUDART, MiB, VRAMTRACE, analyze, assert_nothing_lost, clean_env, frame_functions, program
from stress_helpers import (ATEXIT_LIB, CLOCKSHIM, FAILMAP, FIRST_WRITES, NOMMAP, PRELOAD, SIGSHIM, SLOWMAP, SLOWSINK,
                            STEP_CLOCKSHIM,
                            can_mount_tmpfs, fields, info, last_line, live_by_leaf,
                            op_counts, preload_lines, report, run, run_command, run_plain_prog, traced)

BIG_BUFFER = {"VRAMTRACE_THREAD_BUFFER": "16M"}


# ---- 64 threads ------------------------------------------------------------------------------

def threads_run(tmp_path, seconds, env, extra_preload=None):
    p, out = run(tmp_path, [program("stress_threads"), 64, seconds], "t.vrt", env=env, extra_preload=extra_preload)
    assert p.returncode == 0, p.stderr
    return fields(last_line(p.stdout, "stress_threads:")), traced(p, out)


def assert_exact(made, t):
    rep = t.report
    assert [(d["device"], d["kind"], d["live_bytes_at_end"]) for d in rep["devices"]] == \
        [(0, "device", made["held_bytes"])]
    by_leaf = live_by_leaf(rep)
    assert by_leaf.get("small_site", (0, 0))[1] == made["small_bytes"]
    assert by_leaf.get("big_site", (0, 0))[1] == made["big_bytes"]
    assert sum(c for c, _ in by_leaf.values()) == made["held_count"]
    ops = op_counts(t.trace)
    assert (ops["alloc"], ops["free"]) == (made["allocs"], made["frees"])
    assert t.info["events_lost"] == 0


def test_64_threads_exact_accounting(tmp_path):
    made, t = threads_run(tmp_path, 0.5, BIG_BUFFER)
    assert made["allocs"] > 64 * 10, made  # every thread got going
    assert_exact(made, t)


@pytest.mark.slow
def test_64_threads_for_seconds_exact_accounting(tmp_path):
    made, t = threads_run(tmp_path, 4, BIG_BUFFER)
    assert_exact(made, t)


@pytest.mark.parametrize("seconds", [pytest.param(0.5, id="short"), pytest.param(3, id="long", marks=pytest.mark.slow)])
def test_64_threads_tiny_buffers_count_every_lost_event(tmp_path, seconds):
    """Buffers of 64 KiB, a collector that flushes every 10 s and threads that do not wait for
    room (VRAMTRACE_FULL_WAIT_MS=0) drop events; each one is then counted: written + lost ==
    made, and the lost records add up to the state block."""
    # the trace's first writes stall (libstress_slowsink.so), so the buffers fill on any machine
    made, t = threads_run(tmp_path, seconds, {"VRAMTRACE_THREAD_BUFFER": "64K", "VRAMTRACE_FLUSH_MS": "10000",
                                              "VRAMTRACE_FULL_WAIT_MS": "0", "STRESS_SLOW_WRITES": "2",
                                              "STRESS_SLOW_MS": "200", "STRESS_SLOW_SKIP": FIRST_WRITES},
                             extra_preload=SLOWSINK)
    assert t.info["events_lost"] > 0, "nothing was dropped: the test proves nothing"
    ops = op_counts(t.trace)
    written = ops.get("alloc", 0) + ops.get("free", 0)
    assert written + t.info["events_lost"] == made["allocs"] + made["frees"]
    lost_records = [line.split() for line in t.dump_text.splitlines() if line.split()[2:3] == ["lost"]]
    assert sum(int(record[3]) for record in lost_records) == t.info["events_lost"]
    assert t.info["events_written"] == written + len(lost_records)


# ---- the default settings lose nothing to threads (issue 22, item 5) ---------------------------

def lossless_run(tmp_path, threads, ops):
    """stress_lossless with every setting at its default: THREADS x OPS random calls of three
    APIs, counted by the program's own atomics."""
    p, out = run(tmp_path, [program("stress_lossless"), threads, ops], "l.vrt", limit=120)
    assert p.returncode == 0, p.stderr
    return fields(last_line(p.stdout, "stress_lossless:")), out


def assert_lossless(made, out):
    """Every call is in the trace, by API, nothing is counted lost, and the live bytes per kind
    are the program's own."""
    t = info(out)
    assert t["events_lost"] == 0, t
    calls = {}
    for line in analyze("dump", "--quiet", out).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1].startswith("t") and parts[2] in ("alloc", "free"):
            calls[(parts[2], parts[3])] = calls.get((parts[2], parts[3]), 0) + 1
    assert calls == {("alloc", "cudaMalloc"): made["malloc"], ("free", "cudaFree"): made["free"],
                     ("alloc", "cudaMallocAsync"): made["async"], ("free", "cudaFreeAsync"): made["free_async"],
                     ("alloc", "cudaHostAlloc"): made["host"], ("free", "cudaFreeHost"): made["free_host"]}
    live = {d["kind"]: d["live_bytes_at_end"] for d in report(out)["devices"]}
    assert live == {"device": made["device_bytes"], "host_pinned": made["host_bytes"]}, live


def test_64_threads_x_20000_ops_three_apis_lose_nothing_by_default(tmp_path):
    """Measured before the fix: 26 to 4,108 events lost in each of 10 runs, the live device
    bytes overstated by up to 43 %. A full thread buffer now makes its thread wait for the
    collector (bench/NOTES.md: the added latency), so this passes every run."""
    made, out = lossless_run(tmp_path, 64, 20000)
    assert made["malloc"] + made["async"] + made["host"] > 64 * 20000 // 3, made
    assert_lossless(made, out)


def test_threads_wait_out_a_stalled_disk_and_lose_nothing(tmp_path):
    """The trace's first writes stall 300 ms each (libstress_slowsink.so): the collector drains
    nothing meanwhile, so 64 busy threads fill their 64 KiB buffers on any machine. Threads that
    may not wait (VRAMTRACE_FULL_WAIT_MS=0) lose events, which proves the buffers filled; by
    default they wait for room and lose none."""
    stall = {"VRAMTRACE_THREAD_BUFFER": "64K", "STRESS_SLOW_WRITES": "3", "STRESS_SLOW_MS": "300",
             "STRESS_SLOW_SKIP": FIRST_WRITES}

    def stalled(tag, env):
        p, out = run(tmp_path / tag, [program("stress_threads"), 64, 1], "t.vrt", env={**stall, **env},
                     extra_preload=SLOWSINK, limit=120)
        assert p.returncode == 0, p.stderr
        return fields(last_line(p.stdout, "stress_threads:")), traced(p, out)

    (tmp_path / "nowait").mkdir()
    (tmp_path / "wait").mkdir()
    _, dropped = stalled("nowait", {"VRAMTRACE_FULL_WAIT_MS": "0"})
    assert dropped.info["events_lost"] > 0, "the stalls filled no buffer: the test proves nothing"
    made, waited = stalled("wait", {"VRAMTRACE_FULL_WAIT_MS": "10000"})
    assert waited.info["events_lost"] == 0, waited.info
    assert_exact(made, waited)


def test_256_threads_churning_lose_nothing_by_default(tmp_path):
    """256 threads x 10,000 ops: about 8 s on two cores, so it runs in the suite."""
    made, out = lossless_run(tmp_path, 256, 10000)
    assert_lossless(made, out)


# ---- fork while other threads allocate --------------------------------------------------------

FORKS = pytest.mark.forks


def fork_run(tmp_path, threads, children, env=None, snapshot=None):
    argv = [program("stress_fork"), threads, children, *([snapshot] if snapshot else [])]
    p, out = run(tmp_path, argv, "d/", env={**BIG_BUFFER, **(env or {})}, limit=30)
    assert p.returncode == 0, p.stderr
    return p, out, fields(last_line(p.stdout, "stress_fork:"))


def check_fork_traces(p, out, made):
    children = {f["pid"]: f for f in map(fields, (line for line in p.stdout.splitlines() if line.startswith("child ")))}
    assert len(children) == made["children"]
    files = {int(f.name.split(".")[1]): f for f in out.iterdir() if f.suffix == ".vrt"}
    assert set(files) == set(children) | {made["parent_pid"]}, sorted(f.name for f in out.iterdir())
    for pid, child in children.items():
        rep = report(files[pid])
        assert [(d["kind"], d["live_bytes_at_end"]) for d in rep["devices"]] == [("device", child["bytes"])]
        site, = rep["live_at_end"]
        assert [f["function"] for f in site["frames"][:2]] == ["child_site", "main"]
        assert info(files[pid])["end_reason"] == "exited normally"
    parent = traced(p, files[made["parent_pid"]])
    assert parent.totals()[(0, "device")][1] == made["parent_bytes"]
    ops = op_counts(parent.trace)
    assert (ops["alloc"], ops["free"]) == (made["churn_allocs"] + 1, made["churn_frees"])
    assert parent.info["events_lost"] == 0


@FORKS
def test_fork_while_threads_allocate_child_traced_into_its_own_file(tmp_path):
    p, out, made = fork_run(tmp_path, 8, 10)
    check_fork_traces(p, out, made)


@FORKS
def test_a_fork_while_the_collector_grows_its_arrays_leaves_the_child_a_collector_that_drains(tmp_path):
    """libstress_slowmap.so holds each of the parent's collector's anonymous mappings 200 ms, so
    its first drain is halfway through growing its arrays while the first children are forked.
    A child's collector starts over, not from the parent's half-grown arrays (which let it drain
    nothing: a child's allocation counted lost at exit, 1 child in ~2000 of
    test_fork_200_children_while_16_threads_allocate): every child's trace holds its own."""
    argv = [program("stress_fork"), 4, 30]
    p, out = run(tmp_path, argv, "d/", env=BIG_BUFFER, extra_preload=SLOWMAP, limit=60)
    assert p.returncode == 0, p.stderr
    check_fork_traces(p, out, fields(last_line(p.stdout, "stress_fork:")))


@pytest.mark.parametrize("failing", ["cursors", "heap"])
def test_a_drain_that_cannot_grow_its_arrays_leaves_the_events_for_the_next_one(tmp_path, failing):
    """The collector's first drain maps two arrays (512 cursors of 32 bytes, a heap of 512 ints);
    libstress_failmap.so fails one of the two mappings once, as a moment of memory pressure would.
    That drain takes nothing and the next one takes it all: no event lost. When the second
    mapping failed, the first array was kept with a count of 0, and every later drain tried to
    grow a 0-byte mapping and failed (39799 of 39800 events lost)."""
    length = {"cursors": 512 * 32, "heap": 512 * 4}[failing]
    argv = [program("stress_churn"), 20000, 100]
    p, out = run(tmp_path, argv, "t.vrt", quiet=False, extra_preload=FAILMAP, env={"STRESS_FAILMAP_LEN": str(length)})
    assert p.returncode == 0, p.stderr
    assert f"stress_failmap: failed a mapping of {length} bytes" in p.stderr  # the failure meant happened
    made = fields(last_line(p.stdout, "stress_churn:"))
    written = info(out)
    assert (written["events_written"], written["events_lost"]) == (made["allocs"] + made["frees"], 0), p.stderr
    assert sum(s["count"] for s in report(out)["live_at_end"]) == made["held_count"]


def test_a_collector_that_never_drains_counts_every_event_lost_with_the_drops_its_threads_had_yet_to_report(tmp_path):
    """Every drain fails to map its heap (libstress_failmap.so, STRESS_FAILMAP_ALWAYS): nothing is
    ever taken, the main thread's buffer fills and it drops events, which it would report with
    its next event that fits. At exit the last drain cannot take its buffer either; the trace
    counts what is in it and the drops not yet reported: every event made, lost, none silently
    (before: 10475 of 39800, the drops left out)."""
    argv = [program("stress_churn"), 20000, 100]
    env = {"STRESS_FAILMAP_LEN": str(512 * 4), "STRESS_FAILMAP_ALWAYS": "1", "VRAMTRACE_FULL_WAIT_MS": "50"}
    p, out = run(tmp_path, argv, "t.vrt", quiet=False, extra_preload=FAILMAP, env=env)
    assert p.returncode == 0, p.stderr
    assert "stress_failmap: failed a mapping of 2048 bytes" in p.stderr
    made = fields(last_line(p.stdout, "stress_churn:"))
    written = info(out)
    assert written["events_lost"] == made["allocs"] + made["frees"], (written, p.stderr)
    assert f"{made['allocs'] + made['frees']} lost)" in p.stderr


@FORKS
def test_fork_with_follow_fork_off_children_untraced_and_unharmed(tmp_path):
    p, out, made = fork_run(tmp_path, 8, 10, env={"VRAMTRACE_FOLLOW_FORK": "0"})
    assert [f.name for f in out.iterdir()] == [f"vramtrace.{made['parent_pid']}.vrt"]
    assert sum(line.startswith("child ") for line in p.stdout.splitlines()) == 10


@FORKS
def test_fork_child_trace_names_the_modules_of_its_frames(tmp_path):
    p, out, made = fork_run(tmp_path, 1, 3, snapshot=tmp_path / "parent-flushed.vrt")
    children = [fields(line)["pid"] for line in p.stdout.splitlines() if line.startswith("child ")]
    files = {int(f.name.split(".")[1]): f for f in out.iterdir()}
    assert len(children) == 3 and set(files) == {*children, made["parent_pid"]}, sorted(files)
    for pid in children:  # each child keeps one allocation of its own (stress_fork.c: child_site)
        site, = report(files[pid])["live_at_end"]
        assert site["frames"][0]["function"] == "child_site"
        assert site["frames"][0]["module"].endswith("/stress_fork"), (pid, site["frames"][0])
    parent_sites = report(files[made["parent_pid"]])["live_at_end"]
    assert parent_sites
    for site in parent_sites:
        assert site["frames"][0]["module"].endswith("/stress_fork"), ("parent", site["frames"][0])


@pytest.mark.slow
@FORKS
def test_fork_200_children_while_16_threads_allocate(tmp_path):
    p, out, made = fork_run(tmp_path, 16, 200)
    check_fork_traces(p, out, made)


PY_FORK = """
import ctypes, os, sys, threading
rt = ctypes.CDLL(sys.argv[1])          # CDLL: the GIL is released around each call
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
stop = False
def churn():
    p = ctypes.c_void_p()
    while not stop:
        rt.cudaMalloc(ctypes.byref(p), 4096)
        rt.cudaFree(p)
threads = [threading.Thread(target=churn) for _ in range(2)]
for t in threads: t.start()
for i in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        p = ctypes.c_void_p()
        os._exit(rt.cudaMalloc(ctypes.byref(p), 65536))
    assert os.waitpid(pid, 0)[1] == 0
stop = True
for t in threads: t.join()
print("forked", sys.argv[2])
"""


@pytest.mark.slow
@FORKS
def test_python_fork_while_threads_allocate_never_hangs(tmp_path):
    script = tmp_path / "forky.py"
    script.write_text(PY_FORK)
    p, out = run(tmp_path, [sys.executable, script, CUDART, 300], "d/", limit=20)
    assert (p.returncode, p.stdout) == (0, "forked 300\n")


PY_EXIT_WORKERS = """
import ctypes, os, sys
rt = ctypes.CDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
for i in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:                       # a worker that allocates and leaves at once, as
        p = ctypes.c_void_p()          # multiprocessing's forked workers do: os._exit
        rc = rt.cudaMalloc(ctypes.byref(p), 65536 * (i + 1))
        os._exit(rc or 7)
    print("child", pid, os.WEXITSTATUS(os.waitpid(pid, 0)[1]), flush=True)
"""


@FORKS
def test_workers_that_leave_with_os_exit_each_leave_a_complete_trace(tmp_path):
    """_exit skips vramtrace's destructor: the hook finishes the trace first, with the status."""
    script = tmp_path / "workers.py"
    script.write_text(PY_EXIT_WORKERS)
    p, out = run(tmp_path, [sys.executable, script, CUDART, 4], "d/", limit=30)
    assert p.returncode == 0, p.stderr
    children = [int(line.split()[1]) for line in p.stdout.splitlines() if line.startswith("child ")]
    assert len(children) == 4 and all(line.endswith(" 7") for line in p.stdout.splitlines()), p.stdout
    for i, pid in enumerate(children):
        f = out / f"vramtrace.{pid}.vrt"
        assert f.exists(), sorted(x.name for x in out.iterdir())
        t = info(f)
        assert (t["end_reason"], t["end_detail"], t["events_lost"]) == ("exited normally", 7, 0)
        assert [d["live_bytes_at_end"] for d in report(f)["devices"]] == [65536 * (i + 1)]


# ---- a signal handler that calls CUDA while the thread is inside a hook ----------------------

def signal_run(tmp_path, iterations):
    p, out = run(tmp_path, [program("stress_signal"), iterations], "s.vrt", extra_preload=SIGSHIM, env=BIG_BUFFER)
    assert p.returncode == 0, p.stderr
    made = fields(last_line(p.stdout, "stress_signal:"))
    assert made["handler_calls"] > 100, made  # the timer really interrupted the loop
    return made, traced(p, out)


@pytest.fixture(scope="module")
def signals(tmp_path_factory):
    return signal_run(tmp_path_factory.mktemp("signals"), 20000)


def test_signal_handler_calling_cuda_inside_hooks_no_deadlock_no_crash(signals):
    made, t = signals
    assert made["main_allocs"] == 20002 and t.info["end_reason"] == "exited normally"


def test_signal_handler_calling_cuda_main_thread_accounting_exact(signals):
    """The interrupted thread's own calls are all recorded, whatever its handler did."""
    made, t = signals
    main = [r for r in t.events("alloc") if r["size"] in (4096, 64 * 1024, MiB)]
    assert len(main) == made["main_allocs"]
    keep = t.site("main_keep_site")
    assert (keep["bytes"], keep["count"]) == (MiB, 1)
    assert t.info["events_lost"] == 0


def test_signal_handler_allocations_inside_hooks_are_recorded(signals):
    made, t = signals
    handler = [r for r in t.events("alloc") if r["size"] not in (4096, 64 * 1024, MiB)]
    assert len(handler) == made["handler_allocs"]
    assert t.totals()[(0, "device")][1] == made["main_bytes"] + made["handler_bytes"]


# ---- signal handlers nested in vramtrace's buffer writes, deterministically ------------------

def nested_run(tmp_path, iterations, depth):
    p, out = run(tmp_path, [program("stress_nested"), iterations, depth], "n.vrt", extra_preload=CLOCKSHIM)
    assert p.returncode == 0, p.stderr
    return fields(last_line(p.stdout, "stress_nested:")), traced(p, out)


def level_of(size):
    """stress_nested's level_bytes(d, k) = 4096 d + 256 k + 128, k < 4: the handler level, 0 for main."""
    return size // 4096 if size % 256 == 128 and size % 4096 < 1024 else 0


@pytest.mark.parametrize("depth", [1, 3, 16])
def test_signal_handlers_interrupting_buffer_writes_lose_nothing_at_any_depth(tmp_path, depth):
    """Every level's handler interrupts the level below it while that level is writing the
    thread's buffer (or a side buffer): every allocation and free, at every depth, is in the
    trace, nothing is counted lost, and the live set is exact."""
    made, t = nested_run(tmp_path, 2000, depth)
    assert made[f"allocs{depth}"] > 0, made  # the deepest level really ran
    allocs = {}
    for r in t.events("alloc"):
        allocs[level_of(r["size"])] = allocs.get(level_of(r["size"]), 0) + 1
    assert allocs == {0: made["main_allocs"], **{d: made[f"allocs{d}"] for d in range(1, depth + 1)}}
    assert len(t.events("free")) == made["main_frees"] + sum(made[f"frees{d}"] for d in range(1, depth + 1))
    assert t.totals()[(0, "device")][1] == made["held_bytes"]
    assert_nothing_lost(t)


@pytest.mark.slow
def test_signal_storm_200k_iterations_no_deadlock(tmp_path):
    made, t = signal_run(tmp_path, 200000)
    assert t.site("main_keep_site")["bytes"] == MiB


# ---- exec chains ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exec_chain(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exec")
    p, out = run(tmp, [program("stress_exec"), 3], "d/")
    images = [fields(line) | {"line": line} for line in p.stdout.splitlines() if line.startswith("image ")]
    return p, out, images


def test_exec_chain_runs_every_image_unharmed(exec_chain):
    p, out, images = exec_chain
    assert p.returncode == 0, p.stderr
    assert [line["line"].split()[1] for line in images] == ["3", "2", "1", "0"]
    assert len({i["pid"] for i in images}) == 1
    assert any(out.iterdir())


def test_exec_chain_one_trace_per_image_each_closed(exec_chain):
    p, out, images = exec_chain
    traces = [info(f) for f in sorted(out.iterdir())]
    assert len(traces) == len(images)
    ends = sorted(t["end_reason"] for t in traces)
    assert ends == ["exited normally"] + ["replaced by exec"] * (len(images) - 1)
    lives = sorted(report(f)["devices"][0]["live_bytes_at_end"] for f in out.iterdir())
    assert lives == sorted(i["bytes"] for i in images)


def test_failed_exec_trace_goes_on_in_a_new_file_with_the_live_set(tmp_path):
    """The trace is closed before exec; when exec fails the process goes on, and so does its
    trace, in a new file that starts with everything still live."""
    p, out = run(tmp_path, [program("stress_exec"), 1, "fail-first"], "d/")
    assert p.returncode == 0, p.stderr
    after = fields(last_line(p.stdout, "after-failed-exec"))
    files = sorted(out.iterdir())
    assert len(files) == 3, [f.name for f in files]  # image 1 before and after the failed exec, image 0
    ends = sorted(info(f)["end_reason"] for f in files)
    assert ends == ["exited normally", "replaced by exec", "replaced by exec"]
    went_on, = [f for f in files if any(s["frames"][0]["function"] == "after_failed_exec_site"
                                        for s in report(f)["live_at_end"])]
    rep = report(went_on)
    assert rep["devices"][0]["live_bytes_at_end"] == after["bytes"] == 2 * MiB + 512 * 1024
    assert {s["frames"][0]["function"] for s in rep["live_at_end"]} == {"image_site", "after_failed_exec_site"}
    assert info(went_on)["events_lost"] == 0


# ---- CUDA from exit handlers -----------------------------------------------------------------

EXIT_HANDLERS = ["main", "atexit_late", "atexit_early", "exe_destructor", "lib_destructor"]


def atexit_run(tmp_path, *args):
    p, out = run(tmp_path, [program("stress_atexit"), *args], "a.vrt", extra_preload=ATEXIT_LIB)
    assert p.returncode == 0, p.stderr
    return p, traced(p, out)


def test_cuda_from_exit_handlers_before_and_after_vramtrace_finishes(tmp_path):
    p, t = atexit_run(tmp_path)
    lines = [line.split() for line in p.stdout.splitlines()]
    assert [line[0] for line in lines] == EXIT_HANDLERS and all(line[1] == "ok" for line in lines)
    # Before vramtrace's destructor: recorded. After it (lib_destructor): passed straight through.
    assert {line[0]: line[2] for line in lines} == {
        "main": "enabled=1", "atexit_late": "enabled=1", "atexit_early": "enabled=1", "exe_destructor": "enabled=1",
        "lib_destructor": "enabled=0"}
    by_caller = {frame_functions(s)[1]: s["bytes"] for s in t.live_sites()}
    assert by_caller == {"main": 1 * MiB, "atexit_late": 5 * MiB, "atexit_early": 3 * MiB, "exe_destructor": 7 * MiB}
    assert t.info["end_reason"] == "exited normally"
    plain = run_plain_prog("stress_atexit", extra_preload=ATEXIT_LIB)
    assert (plain.returncode, [line.split()[:2] for line in plain.stdout.splitlines()]) == \
        (0, [[name, "ok"] for name in EXIT_HANDLERS])


@pytest.mark.parametrize("repeat", [pytest.param(3, id="x3"), pytest.param(40, id="x40", marks=pytest.mark.slow)])
def test_cuda_on_another_thread_while_the_trace_closes(tmp_path, repeat):
    """A thread allocates without pause while exit handlers run and the trace is closed: the
    process still exits 0, and at most that thread's one in-flight allocation is live at the end."""
    for i in range(repeat):
        (tmp_path / str(i)).mkdir()
        p, t = atexit_run(tmp_path / str(i), "busy")
        live = t.totals()[(0, "device")][1]
        assert 16 * MiB <= live <= 16 * MiB + 4096, live


# ---- the output cannot be written ------------------------------------------------------------

def drop_file_permission_override():
    """As root, run the command without CAP_DAC_OVERRIDE & co., so a 0555 directory is unwritable."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: cannot make a directory unwritable for the test")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


@pytest.mark.parametrize("target", ["ro/t.vrt", "ro/"])
def test_unwritable_output_directory_job_runs_one_line(tmp_path, target):
    """The preload (bare LD_PRELOAD, VRAMTRACE_OUTPUT) runs the job unchanged and says why in
    one line; `vramtrace run` finds the place before it starts the job and refuses in one line,
    as when the directory cannot be made (ux defect 49: it ran the job, and the user read the
    preload's line and then run's own)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    argv = [program("stress_churn"), 2000, 10]
    drop = drop_file_permission_override()
    env = dict(clean_env(), LD_PRELOAD=str(PRELOAD), VRAMTRACE_OUTPUT=str(tmp_path / target))
    p = run_command([*drop, *map(str, argv)], tmp_path, env)
    plain = run_plain_prog("stress_churn", 2000, 10)
    assert (p.returncode, p.stdout) == (0, plain.stdout) and plain.returncode == 0
    lines = preload_lines(p.stderr)
    assert len(lines) == 1 and "cannot write the trace" in lines[0], p.stderr
    assert list(ro.iterdir()) == []
    r = run_command([*drop, str(VRAMTRACE), "run", "-o", str(tmp_path / target), "--", *map(str, argv)], tmp_path,
                    clean_env())
    assert (r.returncode, r.stdout) == (4, "") and list(ro.iterdir()) == []
    assert re.fullmatch(r"vramtrace: cannot write (in )?\S+/ro(/\S+)?: Permission denied; the command was not run\n",
                        r.stderr), r.stderr


# ---- the disk fills up -----------------------------------------------------------------------

@pytest.fixture
def tiny_tmpfs(tmp_path):
    if not can_mount_tmpfs():
        pytest.skip("mounting a tmpfs needs root (the RLIMIT_FSIZE variant covers the rest)")
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_AT >> 10}k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


# Where the disk is full. The collector writes events in chunks of up to 1 MiB before compression
# (a drain that outpaces the flush timer makes them that big), so a limit of 2 MiB holds the header,
# the tables and at least one whole events chunk however fast the job runs; CHURN's trace is ~5 MB.
FULL_AT = 2 << 20
CHURN = ["stress_churn", 600000, 100]


def check_cut_short(p, out, expect_error):
    plain = run_plain_prog(*CHURN)
    assert (p.returncode, p.stdout) == (0, plain.stdout), p.stderr
    errors = [line for line in preload_lines(p.stderr) if "cannot write the trace" in line]
    assert len(errors) == 1 and expect_error in errors[0], p.stderr
    assert len(preload_lines(p.stderr)) == 2  # "tracing to", then the one error
    rep = report(out)  # the partial trace still reads (exit 0)
    assert 0 < rep["events"] < 2 * CHURN[1]
    assert rep["devices"][0]["live_bytes_at_end"] > 0
    return rep


@pytest.mark.parametrize("ring", ["256M", "0"])
def test_disk_full_job_runs_partial_trace_reads(tiny_tmpfs, ring):
    p, out = run(tiny_tmpfs, [program(CHURN[0]), *CHURN[1:]], "t.vrt", quiet=False, run_args=["--ring", ring])
    check_cut_short(p, out, "No space left on device")


@pytest.mark.parametrize("ring", ["256M", "0"])
def test_file_size_limit_job_runs_partial_trace_reads(tmp_path, ring):
    """RLIMIT_FSIZE: writes past it fail with EFBIG; the SIGXFSZ they raise must not kill the job
    (the collector thread, which does all trace writes, blocks every signal)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_AT, FULL_AT))
    p, out = run(tmp_path, [program(CHURN[0]), *CHURN[1:]], "t.vrt", quiet=False, run_args=["--ring", ring],
                 preexec_fn=limit)
    check_cut_short(p, out, "File too large")


CUT_SHORT = "continued untraced: writing the trace failed"


@pytest.mark.parametrize("ring", ["256M", "0"])
def test_trace_cut_short_by_a_write_error_says_so(tmp_path, ring):
    """`run -q`: the preload's one line is still printed; the trace's state block says how and
    when it ended (run leaves that alone), and info and report say so."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_AT, FULL_AT))
    p, out = run(tmp_path, [program(CHURN[0]), *CHURN[1:]], "t.vrt", preexec_fn=limit, run_args=["--ring", ring])
    assert p.returncode == 0, p.stderr
    line, = preload_lines(p.stderr)
    assert line.endswith(f": disabled: cannot write the trace {out}: File too large; the program continues untraced")
    t = info(out)
    assert (t["end_reason"], t["end_code"], t["end_detail"]) == (CUT_SHORT, 7, errno.EFBIG)
    after = float(re.search(r"^ended +continued untraced: writing the trace failed \(File too large\) after "
                            r"(\d+\.\d+) s$", analyze("info", out).stdout, re.M)[1])
    assert after > 0
    # Events encoded but not written count as lost; the trace holds exactly the others.
    assert t["events_lost"] > 0 and t["events_written"] + t["events_lost"] <= 2 * CHURN[1]
    r = analyze("report", "--json", out)
    assert json.loads(r.stdout)["end"] == CUT_SHORT and json.loads(r.stdout)["events"] == t["events_written"]
    assert f"vramtrace: warning: {out}: the trace was cut short at {after:.3f} s: writing it failed (File too large); " \
           "the process went on untraced" in r.stderr.splitlines()
    # Without -q, run names the trace and says it was cut short.
    p, out = run(tmp_path, [program(CHURN[0]), *CHURN[1:]], "u.vrt", preexec_fn=limit, run_args=["--ring", ring],
                 quiet=False)
    assert f"vramtrace: trace: {out} (cut short: writing it failed: File too large)" in p.stderr.splitlines()


def test_quiet_silences_the_warning_about_a_bad_setting(tmp_path):
    """VRAMTRACE_QUIET is read first: a bad value of another setting is not reported (only a
    bad VRAMTRACE_QUIET itself is)."""
    argv = [program("stress_churn"), 2000, 10]
    p, out = run(tmp_path, argv, "t.vrt", env={"VRAMTRACE_STACK_DEPTH": "-5"})
    assert p.returncode == 0 and preload_lines(p.stderr) == [], p.stderr
    p, out = run(tmp_path, argv, "u.vrt", env={"VRAMTRACE_QUIET": "very"}, quiet=False)
    assert [line.split(": ", 1)[1] for line in preload_lines(p.stderr)] == [
        "VRAMTRACE_QUIET=very is not valid; using the default 0", f"tracing to {out}"], p.stderr


# ---- bad settings ----------------------------------------------------------------------------

BAD_SETTINGS = [
    ("VRAMTRACE_RING", "-1", "256M"),
    ("VRAMTRACE_RING", "", "256M"),
    ("VRAMTRACE_RING", "lots", "256M"),
    ("VRAMTRACE_RING", "99999999999999999999999", "256M"),
    ("VRAMTRACE_STACK_DEPTH", "1000000", "48"),
    ("VRAMTRACE_STACK_DEPTH", "-5", "48"),
    ("VRAMTRACE_STACK_DEPTH", "12abc", "48"),
    ("VRAMTRACE_PYTHON_DEPTH", "99999", "64"),
    ("VRAMTRACE_THREAD_BUFFER", "-1", "1M"),
    ("VRAMTRACE_THREAD_BUFFER", "1T", "1M"),
    ("VRAMTRACE_FLUSH_MS", "0", "100"),
    ("VRAMTRACE_FLUSH_MS", "soon", "100"),
    ("VRAMTRACE_TS_UNIT_NS", "0", "1000"),
    ("VRAMTRACE_MODE", "bogus", "full"),
    ("VRAMTRACE_MODE", "", "full"),
    ("VRAMTRACE_PYTHON", "maybe", "1"),
    ("VRAMTRACE_CONTROL", " 1", "1"),
    ("VRAMTRACE_FOLLOW_FORK", "\u00e9\u00e9", "1"),
]


@pytest.mark.parametrize("locale, shown", [("C.UTF-8", "\\x1b]0;PWNED\\x07\u00e9\\xc2\\x9b"),
                                           ("C", "\\x1b]0;PWNED\\x07\\xc3\\xa9\\xc2\\x9b")])
def test_the_preloads_messages_show_what_others_chose_escaped(tmp_path, locale, shown):
    """A setting's value is quoted in the message about it: its control characters (C1 too, as
    UTF-8 writes them) reach the terminal as \\xNN, and outside a UTF-8 locale every byte above
    0x7f does."""
    value = "\x1b]0;PWNED\x07\u00e9\u009b"
    p, out = run(tmp_path, [program("stress_churn"), 200, 10], "t.vrt",
                 env={"VRAMTRACE_MODE": value, "LC_ALL": locale}, quiet=False)
    assert p.returncode == 0
    said = [line.split(": ", 1)[1] for line in preload_lines(p.stderr)]
    assert said[0] == f"VRAMTRACE_MODE={shown} is not valid; using the default full", p.stderr
    assert "\x1b" not in p.stderr and "\x07" not in p.stderr and "\u009b" not in p.stderr


@pytest.mark.parametrize("name, value, default", BAD_SETTINGS, ids=[f"{n[10:]}={v!r}" for n, v, _ in BAD_SETTINGS])
def test_bad_setting_one_clear_message_default_used_program_unaffected(tmp_path, name, value, default):
    argv = [program("stress_churn"), 2000, 10]
    p, out = run(tmp_path, argv, "t.vrt", env={name: value}, quiet=False)
    plain = run_plain_prog("stress_churn", 2000, 10)
    assert (p.returncode, p.stdout) == (0, plain.stdout)
    message = f"{name}={value} is not valid; using the default {default}"
    assert [line.split(": ", 1)[1] for line in preload_lines(p.stderr)] == [message, f"tracing to {out}"], p.stderr
    t = traced(p, out, argv)
    assert t.totals()[(0, "device")][1] == fields(last_line(p.stdout, "stress_churn:"))["held_bytes"]
    if name == "VRAMTRACE_STACK_DEPTH":
        assert "# stack_depth = 48" in t.dump_text.splitlines()
    if name == "VRAMTRACE_RING":
        assert "ring       256 MiB" in t.info_text
    if name == "VRAMTRACE_MODE":
        assert "# mode = full" in t.dump_text.splitlines()


DEEP_PY = """
import ctypes, sys
rt = ctypes.PyDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
sys.setrecursionlimit(10000)
def leaf():
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
def deep(n):
    return leaf() if n == 0 else deep(n - 1)
deep(400)
"""


@pytest.mark.parametrize("depth", [255, 256])
def test_largest_python_depths_keep_the_python_frames_of_a_deep_stack(tmp_path, depth):
    """256 is a valid VRAMTRACE_PYTHON_DEPTH; a raw event counts its Python frames in a uint8_t,
    so the preload takes at most 255 (before that clamp a 400-deep stack recorded none)."""
    script = tmp_path / "deep.py"
    script.write_text(DEEP_PY)
    p, out = run(tmp_path, [sys.executable, script, CUDART], "t.vrt", env={"VRAMTRACE_PYTHON_DEPTH": str(depth)})
    assert p.returncode == 0, p.stderr
    site, = report(out)["live_at_end"]
    assert sum(f["kind"] == "python" for f in site["frames"]) == 255
    assert [f["function"] for f in site["frames"] if f["kind"] == "python"][:2] == ["leaf", "deep"]


def test_output_path_too_long_is_not_truncated_job_runs_one_line(tmp_path):
    """A VRAMTRACE_OUTPUT longer than the preload keeps (4095 bytes) was cut to a prefix, which
    names another file: now nothing is written, the job runs, one line says why (even quiet)."""
    target = tmp_path
    while len(str(target)) < 4095 - 200:
        target = target / ("d" * min(250, 4095 - 200 - len(str(target))))
    target.mkdir(parents=True)
    prefix = str(target) + "/" + "x" * (4095 - len(str(target)) - 1)  # what a cut would name
    long = prefix + "/t.vrt"
    env = {"VRAMTRACE_OUTPUT": long, "VRAMTRACE_QUIET": "1", "LD_PRELOAD": str(PRELOAD)}
    p = run_plain_prog("stress_churn", 100, 10, env=env, cwd=tmp_path)
    assert (p.returncode, p.stdout) == (0, run_plain_prog("stress_churn", 100, 10).stdout)
    assert [line.split(": ", 1)[1] for line in preload_lines(p.stderr)] == [
        "disabled: VRAMTRACE_OUTPUT is longer than a path vramtrace takes (4095 bytes); "
        "the program continues untraced"]
    assert not any(target.rglob("*.vrt")) and not any(f.suffix == ".vrt" for f in tmp_path.iterdir())


def test_phase_list_too_long_is_ignored_not_truncated(tmp_path):
    value = ",".join(f"phase_{i}" for i in range(200))  # over 1023 bytes
    argv = [program("stress_churn"), 100, 10]
    p, out = run(tmp_path, argv, "t.vrt", env={"VRAMTRACE_PHASE": value}, quiet=False)
    assert p.returncode == 0
    assert [line.split(": ", 1)[1] for line in preload_lines(p.stderr)] == [
        f"VRAMTRACE_PHASE is {len(value)} bytes long, more than vramtrace takes; ignored", f"tracing to {out}"]


def test_a_bad_setting_is_said_once_by_a_chain_of_processes(tmp_path):
    """A pyenv shim runs a dozen programs before python, each with the preload: the bad setting's
    line came from every one (ux defect 50: ~35 lines). The first says it; the processes it
    starts inherit VRAMTRACE_SETTINGS_SAID and keep quiet about settings (only about settings:
    the last program still traces, says where, and the program's output is unchanged)."""
    shim = f'sh -c "/bin/true; /bin/true; exec {program("stress_churn")} 100 10"'
    p, out = run(tmp_path, ["/bin/sh", "-c", shim], "t/", env={"VRAMTRACE_RING": "bogus"}, quiet=False)
    assert p.returncode == 0 and "held_count=" in p.stdout, p.stderr
    said = [line for line in preload_lines(p.stderr) if "VRAMTRACE_RING" in line]
    assert [line.split(": ", 1)[1] for line in said] == ["VRAMTRACE_RING=bogus is not valid; using the default 256M"]
    assert any("tracing to" in line for line in preload_lines(p.stderr)), p.stderr
    alone = run_plain_prog("stress_churn", 100, 10, env={"LD_PRELOAD": str(PRELOAD), "VRAMTRACE_RING": "bogus",
                                                          "VRAMTRACE_OUTPUT": str(tmp_path / "alone.vrt")})
    assert "VRAMTRACE_RING=bogus is not valid" in alone.stderr  # a process on its own still says it


def test_thread_buffers_that_cannot_be_mapped_count_every_event_lost(tmp_path):
    """No event buffer can be mapped at all (libstress_nommap.so fails the preload's anonymous
    mappings): the job runs unchanged, one line says so, and the trace counts every event the
    program made as lost instead of looking like a program that made none."""
    argv = [program("rt_api")]
    # (the rings sidecar off: its slots are file mappings, which the shim does not fail)
    p, out = run(tmp_path, argv, "t.vrt", extra_preload=NOMMAP, quiet=False, env={"VRAMTRACE_RINGS": "0"})
    assert (p.returncode, p.stdout) == (0, run_plain_prog("rt_api").stdout)
    assert "no event buffer could be mapped for a thread; its events are counted lost" in \
        [line.split(": ", 1)[1] for line in preload_lines(p.stderr)]
    normal, normal_out = run(tmp_path, argv, "n.vrt")
    lost = info(out)["events_lost"]
    assert lost == info(normal_out)["events_written"] > 10
    assert re.search(rf"^vramtrace: trace: .*t\.vrt \(.*, \d+ events?, {lost} lost\)$", p.stderr, re.M), p.stderr


def test_events_the_last_drain_cannot_take_are_counted_lost(tmp_path):
    """clock_ahead's main thread stamps its last 3 allocations an hour ahead (libstep_clockshim.so):
    later than the horizon of every drain, so they are still in its buffer at exit. The trace
    counts them lost (and every report warns) instead of leaving them out silently."""
    p, out = run(tmp_path, [program("clock_ahead"), 2, 3], "t.vrt", extra_preload=STEP_CLOCKSHIM)
    assert p.returncode == 0 and "before=2 after=3" in p.stdout, p.stderr
    assert info(out)["events_lost"] == 3
    assert [(s["bytes"], s["count"]) for s in report(out)["live_at_end"]] == [(2 * MiB, 2)]  # the two taken
    assert "3 events were lost while recording" in analyze("report", out).stderr


def test_empty_output_setting_means_the_default_file(tmp_path):
    p = run_plain_prog("stress_churn", 100, 10, env={"VRAMTRACE_OUTPUT": "", "LD_PRELOAD": str(PRELOAD)}, cwd=tmp_path)
    assert p.returncode == 0
    files = [f.name for f in tmp_path.iterdir()]
    assert len(files) == 1 and files[0].startswith("vramtrace.") and files[0].endswith(".vrt"), files
    assert [line.split(": ", 1)[1] for line in preload_lines(p.stderr)] == [f"tracing to ./{files[0]}"]


def test_a_stopped_collector_costs_one_bounded_wait_then_every_drop_is_counted(tmp_path):
    """The collector thread alone is stopped (ptrace) while the main thread makes 5,000 pairs
    into a 64 KiB buffer: the thread waits VRAMTRACE_FULL_WAIT_MS once, then drops and counts
    without waiting again (a wait per event would take 9,000 x 0.3 s: the run would hang here),
    and when the collector runs again every event is written or counted lost."""
    p, out = run(tmp_path, [program("stress_stuck_collector"), 5000], "s.vrt",
                 env={"VRAMTRACE_STACK_DEPTH": "0", "VRAMTRACE_THREAD_BUFFER": "64K", "VRAMTRACE_FULL_WAIT_MS": "300"}, limit=30)
    if p.returncode == 77:
        pytest.skip(p.stderr.strip())
    assert p.returncode == 0, p.stderr
    made = fields(last_line(p.stdout, "stress_stuck_collector:"))
    t = traced(p, out)
    ops = op_counts(t.trace)
    assert t.info["events_lost"] > 0, t.info
    assert ops.get("alloc", 0) + ops.get("free", 0) + t.info["events_lost"] == made["allocs"] + made["frees"]
    lost_records = [line.split() for line in t.dump_text.splitlines() if line.split()[2:3] == ["lost"]]
    assert sum(int(record[3]) for record in lost_records) == t.info["events_lost"]
