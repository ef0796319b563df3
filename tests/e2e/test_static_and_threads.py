"""A statically linked runtime (tests/programs/static_rt.c), many threads allocating at once
(tests/programs/mt_alloc.c), and a thread's name (tests/programs/thread_rename.c)."""
import re

import pytest

from conftest import MiB, analyze, assert_nothing_lost, assert_unchanged_behaviour, frame_functions, program, trace
from stress_helpers import STEP_CLOCKSHIM, run

# ---- libcudart_static.a ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("static_rt"), [program("static_rt")])


def test_static_program_behaviour_is_unchanged(static):
    assert (static.returncode, static.stdout) == (0, "static_rt: done\n")
    assert_unchanged_behaviour(static)


def test_static_runtime_exact_totals(static):
    assert static.totals() == {(0, "device"): (3 * MiB, 1 * MiB), (-1, "host_pinned"): (8192, 8192)}


def test_static_runtime_is_seen_at_the_driver(static):
    """The runtime inside the executable is invisible to runtime hooks; its driver calls are not."""
    assert {r.api for r in static.events()} == {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocHost_v2"}
    assert [r["size"] for r in static.events("alloc", "cuMemAlloc_v2")] == [1 * MiB, 2 * MiB]


@pytest.mark.parametrize("function, runtime_function, size", [
    ("leak_site", "cudaMalloc", 1 * MiB),
    ("pinned_site", "cudaMallocHost", 8192),
])
def test_static_runtime_stacks_reach_the_program(static, function, runtime_function, size):
    site = static.site(function)
    assert site["bytes"] == size
    frames = frame_functions(site)
    assert frames.index(runtime_function) < frames.index(function) < frames.index("main")


def test_static_nothing_lost(static):
    assert_nothing_lost(static)


# ---- 8 threads -----------------------------------------------------------------------------

THREADS, ITERATIONS = 8, 1000
LEAKED = sum((i + 1) * 4096 for i in range(THREADS))  # 147456
CHURN = [65536 + i * 512 for i in range(THREADS)]


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("mt_alloc"), [program("mt_alloc")])


def test_threads_program_behaviour_is_unchanged(mt):
    assert (mt.returncode, mt.stdout) == (0, f"mt_alloc: {THREADS} threads x {ITERATIONS} done "
                                             f"allocs={THREADS * (ITERATIONS + 1)} frees={THREADS * ITERATIONS} "
                                             f"held_bytes=147456 held_count={THREADS}\n")
    assert_unchanged_behaviour(mt)


def test_threads_exact_final_accounting(mt):
    peak, live = mt.totals()[(0, "device")]
    assert live == LEAKED
    # The peak depends on the interleaving, but never exceeds every thread's leak plus its
    # largest in-flight allocation, and is at least what is left at the end.
    assert LEAKED <= peak <= LEAKED + sum(CHURN)
    assert list(mt.totals()) == [(0, "device")]


def test_threads_leaks_are_one_site(mt):
    site = mt.site("thread_leak_site")
    assert (site["bytes"], site["count"]) == (LEAKED, THREADS)
    assert frame_functions(site)[:2] == ["thread_leak_site", "worker"]
    assert len(mt.live_sites()) == 1


def test_threads_every_event_recorded_once(mt):
    allocs, frees = mt.events("alloc"), mt.events("free")
    assert len(allocs) == THREADS * (ITERATIONS + 1)
    assert len(frees) == THREADS * ITERATIONS
    assert sorted({r["size"] for r in frees}) == CHURN
    assert sum(r["size"] for r in allocs) - sum(r["size"] for r in frees) == LEAKED


def test_threads_each_thread_has_its_own_index(mt):
    per_thread = {}
    for r in mt.events("alloc"):
        per_thread.setdefault(r.thread, set()).add(r["size"])
    workers = [sizes for sizes in per_thread.values() if len(sizes) == 2]
    assert len(workers) == THREADS
    assert sorted(min(s) for s in workers) == sorted((i + 1) * 4096 for i in range(THREADS))


def test_threads_each_free_names_what_its_thread_allocated(mt):
    """Per thread, records keep program order: alloc X, free X, ... then the kept one. A free
    published after another thread got the same address back must still be written, with the
    size and allocating stack of what it freed."""
    by_thread = {}
    for r in mt.events():
        by_thread.setdefault(r.thread, []).append(r)
    workers = [rs for rs in by_thread.values() if rs[0].op == "alloc"]
    assert len(workers) == THREADS
    for rs in workers:
        assert [r.op for r in rs] == ["alloc", "free"] * ITERATIONS + ["alloc"]
        for a, f in zip(rs[0::2], rs[1::2]):
            assert (f["addr"], f["size"], f["alloc_stack"]) == (a["addr"], a["size"], a["stack"]), f.text


def test_threads_events_are_written_oldest_first(tmp_path):
    """A drain merges the threads' buffers by timestamp (preload/collector.c): a record older than
    one written before it was published after a drain had read its thread's buffer, which a
    thread's events can be once per drain at most; here, a few in 16008. The threads go in
    lockstep and the collector drains once a second, so that a drain holds every thread's events
    interleaved however the threads were scheduled (run freely, one may finish in a time slice)."""
    t = trace(tmp_path, [program("mt_alloc"), "lockstep"], env={"VRAMTRACE_FLUSH_MS": "1000"})
    assert t.returncode == 0, t.stderr
    events = t.events()
    threads = [r.thread for r in sorted(events, key=lambda r: r.ts)]
    assert sum(a != b for a, b in zip(threads, threads[1:])) >= ITERATIONS  # interleaved: a merge to do
    late, newest = 0, 0.0
    for r in events:
        late += r.ts < newest
        newest = max(newest, r.ts)
    assert late <= len(events) // 100, f"{late} of {len(events)} records older than one before them"


def test_threads_that_end_faster_than_the_collector_drains_lose_nothing(tmp_path):
    """3000 threads, one after another, each making one allocation, all between two drains (a
    drain a second): every one's events are written (a drain took 512 buffers and left the rest
    to the next; at exit the rest were counted lost: 2464 of 4000 threads' events)."""
    threads = 3000
    t = trace(tmp_path, [program("thread_churn"), threads], env={"VRAMTRACE_FLUSH_MS": "1000"})
    assert (t.returncode, t.stdout) == (0, f"thread_churn: threads={threads}\n"), t.stderr
    assert t.info["events_lost"] == 0
    made = [r.thread for r in t.events("alloc")]
    assert len(made) == len(set(made)) == threads
    assert len(t.events("free")) == threads


def test_threads_nothing_lost(mt):
    assert_nothing_lost(mt)


def test_threads_lossy_buffers_account_for_every_event(tmp_path):
    """With per-thread buffers far too small for the burst, events may be dropped, but every
    one is either written or counted lost: nothing disappears and nothing is counted twice."""
    t = trace(tmp_path, [program("mt_alloc")],
              env={"VRAMTRACE_THREAD_BUFFER": "64K", "VRAMTRACE_FLUSH_MS": "1000", "VRAMTRACE_FULL_WAIT_MS": "0"})
    assert t.returncode == 0
    made = THREADS * (2 * ITERATIONS + 1)
    written = len(t.events("alloc")) + len(t.events("free"))
    assert written + t.info["events_lost"] == made
    assert sum(r["id"] for r in t.events("lost")) == t.info["events_lost"]
    assert t.info["events_written"] == written + len(t.events("lost"))


# ---- a thread's name -------------------------------------------------------------------------


@pytest.mark.parametrize("seconds, name", [(0, "thread_rename"), (3, "renamed")])
def test_a_thread_is_named_again_2_s_after_its_name_was_read(tmp_path, seconds, name):
    """thread_rename renames itself once its first event is written under its first name; the
    collector reads a thread's name again at its first event 2 s or more after the last read (by
    the events' clock, which libstep_clockshim.so moves), and not before."""
    p, out = run(tmp_path, [program("thread_rename"), seconds], "t.vrt", extra_preload=STEP_CLOCKSHIM)
    assert p.returncode == 0, p.stderr
    tid = int(re.search(r"tid=(\d+)", p.stdout)[1])
    tables = analyze("dump", "--tables", "-q", out).stdout
    assert [n for t, n in re.findall(r'^thread \d+ tid=(\d+) "(.*)"$', tables, re.M) if int(t) == tid] == [name]
