"""A SIGKILL soon after the allocations (issue 22, item 6): `run` says what happened, and the
trace holds every allocation whose call returned (tests/programs/kill_early.c prints each one
with write(2) before the kill can land)."""
import json
import re
import subprocess
import time

import pytest

from conftest import BUILD, VRAMTRACE, analyze, clean_env, program
from replay import dumped
from stress_helpers import FASTRT, FIRST_WRITES, PRELOAD, SLOWSINK, fields, info, last_line, op_counts, run

STATE_PROBE = BUILD / "tests" / "libstate_probe.so"

KILLED = "killed by signal 9 (Killed)"


def returned(stdout):
    """{index: size} of the allocations the program said had returned."""
    return {int(i): int(s) for i, s in re.findall(r"^returned (\d+) (\d+)$", stdout, re.M)}


def test_run_never_blames_the_command_for_a_kill(tmp_path):
    """Killed before its first allocation, and right after four: `run` names the signal and never
    says "made no CUDA allocation"."""
    for at in (0, 4):
        p, out = run(tmp_path, [program("kill_early"), 4, at], f"k{at}.vrt", quiet=False)
        assert p.returncode == 128 + 9, p.stderr
        assert len(returned(p.stdout)) == at
        assert "made no CUDA allocation" not in p.stderr, p.stderr
        assert KILLED in p.stderr, p.stderr
        if not out.exists():
            assert "before its trace's first write" in p.stderr, p.stderr


def test_a_killed_trace_is_named_with_a_note(tmp_path):
    """A trace the preload never closed: next to its path, one note that the process was killed
    and that the trace may miss its last events."""
    p, out = run(tmp_path, [program("stress_crash"), "kill", 400, 10, 1000], "c.vrt", quiet=False)
    assert p.returncode == 128 + 9, p.stderr
    assert out.exists(), p.stderr
    lines = p.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("vramtrace: trace: "))
    note = [line for line in lines if line.startswith("vramtrace: note: ")]
    assert len(note) == 1 and KILLED in note[0], p.stderr
    assert lines.index(note[0]) == at + 1, p.stderr


def test_the_trace_exists_from_the_first_allocation(tmp_path):
    """Killed right after its first (and its fourth) allocation returned: the file is there with a
    valid header, and every command reads it as a process killed by signal 9, never "bad magic"."""
    for at in (1, 4):
        p, out = run(tmp_path, [program("kill_early"), 4, at], f"k{at}.vrt")
        assert p.returncode == 128 + 9 and len(returned(p.stdout)) == at, p.stderr
        t = info(out)
        assert (t["end_reason"], t["signal"]) == ("killed by a signal", 9), t
        assert t["cmdline"] and "kill_early" in t["cmdline"], t


def test_the_first_allocation_returns_once_the_file_exists_even_when_making_it_is_slow(tmp_path):
    """The file's header write stalls 1 s (libstress_slowsink.so): the first allocation returns
    only once the file is made, so a kill right after it still leaves a valid trace. (Without
    the wait a kill lands while the header is stalled, every run; test_the_trace_exists_... above
    can miss that when the collector happens to be quick.)"""
    env = {"STRESS_SLOW_SKIP": "0", "STRESS_SLOW_WRITES": "1", "STRESS_SLOW_MS": "1000"}
    p, out = run(tmp_path, [program("kill_early"), 1, 1], "s.vrt", env=env, extra_preload=SLOWSINK)
    assert p.returncode == 128 + 9 and len(returned(p.stdout)) == 1, p.stderr
    t = info(out)
    assert (t["end_reason"], t["signal"]) == ("killed by a signal", 9), t


def test_armed_mode_still_makes_no_file_until_asked(tmp_path):
    p, out = run(tmp_path, [program("kill_early"), 4, 4], "armed.vrt", run_args=["--armed"])
    assert p.returncode == 128 + 9 and len(returned(p.stdout)) == 4, p.stderr
    assert not out.exists()


def allocated_sizes(path):
    """Sizes of the cudaMalloc records in a trace, read from `vramtrace dump` by tests/e2e/replay.py."""
    _, records = dumped(str(VRAMTRACE), str(path))
    return sorted(int(r.fields["size"]) for r, _ in records if r.op == "alloc")


@pytest.mark.forks  # the parent's collector thread runs while it forks
def test_frames_without_symbols_are_not_taken_for_recursion(tmp_path):
    """Killed before it wrote its symbol tables (the collector waits 10 s between drains here, and
    the job is killed in milliseconds), the recovered trace names its frames by address only; a
    report shows each of them, not one line "(x5, recursion)" for five different addresses."""
    p, out = run(tmp_path, [program("kill_early"), 3, 2], "k.vrt", env={"VRAMTRACE_FLUSH_MS": "10000"})
    assert p.returncode == 128 + 9, p.stderr
    rep = json.loads(analyze("report", "--json", "-q", "--frames", "100", out).stdout)
    site = rep["live_at_end"][0]
    addresses = [f["address"] for f in site["frames"] if f["kind"] == "native"]
    assert {f["function"] for f in site["frames"]} == {"??"}, site["frames"]
    assert len(addresses) > 3 and len(set(addresses)) == len(addresses), addresses
    text = analyze("report", "-q", "--frames", "100", out).stdout
    assert "recursion" not in text
    assert all(a[2:] in text for a in addresses[1:]), text


def test_every_allocation_that_returned_is_in_the_recovered_trace(tmp_path):
    """Twenty processes killed by SIGKILL (tests/programs/kill_early.c, "fork"): ten right after
    their 1st, 2nd, ... 50th allocation, ten by another thread while allocating. `run -o DIR/`
    recovers each trace from its sidecar: every allocation whose call returned (the program said
    so before the kill could land) is in it, and nothing that never happened; no sidecar is left."""
    k = 50
    p, out = run(tmp_path, [program("kill_early"), k, "fork"], "d/", quiet=False, limit=120)
    assert p.returncode == 0, p.stderr
    children = re.findall(r"^child (\d+) (\d+) (self|thread)$", p.stdout, re.M)
    killed = set(re.findall(r"^killed (\d+)$", p.stdout, re.M))
    assert len(children) == 20 and killed == {c[0] for c in children}, p.stdout
    said = {}
    for pid, i, size in re.findall(r"^returned (\d+) (\d+) (\d+)$", p.stdout, re.M):
        said.setdefault(pid, []).append(int(size))
    assert not list(out.glob("*.rings")), p.stderr
    # A child whose collector did not make the file within the bound says so (F32: a forked
    # child's collector on a loaded machine, under a sanitizer); what it recorded before may be
    # lost, and that is the loss it reported. Every other child is checked in full.
    late = set(re.findall(r"^vramtrace\[(\d+)\]: the trace file was not made within", p.stderr, re.M))
    assert len(late) < len(children) // 2, p.stderr
    for pid, at, mode in children:
        if pid in late:
            continue
        trace = out / f"vramtrace.{pid}.vrt"
        got, returned_sizes = allocated_sizes(trace), sorted(said.get(pid, []))
        if mode == "self":  # killed right after the at-th call returned: exactly those
            assert got == returned_sizes and len(got) == int(at), (pid, at, got, returned_sizes)
        else:  # from another thread: the main thread may have made one more call, never fewer
            possible = [1048576 + 4096 * i for i in range(len(returned_sizes) + 1)]
            assert set(returned_sizes) <= set(got) <= set(possible) and len(returned_sizes) >= int(at), (pid, at)
        t = info(trace)  # run knows how its own child ended, not how the processes it forked did
        assert t["end_reason"].startswith("not closed") and t["events_written"] == len(got), (pid, t)


def test_a_trace_file_the_collector_could_not_make_in_time_is_said(tmp_path):
    """The collector's first write (the file's header) stalls 7 s (libstress_slowsink.so): the
    first allocation waits for the file at most 5 s, then returns, and the process says in one
    line that until the file exists a kill loses what it recorded (the program then kills
    itself, 1 s later, while the header is still stalled)."""
    env = {"STRESS_SLOW_SKIP": "0", "STRESS_SLOW_WRITES": "1", "STRESS_SLOW_MS": "7000",
           "KILL_EARLY_PAUSE_MS": "1000"}
    started = time.monotonic()
    p, out = run(tmp_path, [program("kill_early"), 1, 1], "w.vrt", env=env, extra_preload=SLOWSINK, quiet=False)
    assert p.returncode == 128 + 9, p.stderr
    assert len(returned(p.stdout)) == 1, p.stdout
    said = [line for line in p.stderr.splitlines() if "the trace file was not made within 5 s" in line]
    assert len(said) == 1 and "a kill loses what this process recorded" in said[0], p.stderr
    assert time.monotonic() - started >= 5


def test_events_the_collector_was_writing_when_killed_are_recovered(tmp_path):
    """The kill lands while the collector is inside the write of the chunk that holds the events
    (libstress_slowsink.so stalls that write 5 s; the program pauses 300 ms, then kills itself):
    the buffers still hold them, as the file does not, and recovery brings all of them back."""
    env = {"VRAMTRACE_FLUSH_MS": "1", "STRESS_SLOW_SKIP": FIRST_WRITES, "STRESS_SLOW_WRITES": "1",
           "STRESS_SLOW_MS": "5000", "KILL_EARLY_PAUSE_MS": "300"}
    p, out = run(tmp_path, [program("kill_early"), 8, 8], "w.vrt", env=env, extra_preload=SLOWSINK)
    assert p.returncode == 128 + 9, p.stderr
    assert allocated_sizes(out) == sorted(returned(p.stdout).values()) and len(returned(p.stdout)) == 8


def test_every_thread_buffer_is_recovered_in_time_order(tmp_path):
    """Eight threads allocate 30 times each, in rounds (their events interleave in time), then the
    process is killed: the recovered trace holds all 240 allocations (one slot of the sidecar per
    thread, merged by time), each thread's own in the order it made them, and the report's live
    bytes are their sum. The collector's first write
    after the file's header stalls (libstress_slowsink.so) until after the kill, so every event
    is recovered, whatever the machine's speed: none was written in the order a drain gives."""
    env = {"VRAMTRACE_FLUSH_MS": "1", "STRESS_SLOW_SKIP": FIRST_WRITES, "STRESS_SLOW_WRITES": "1",
           "STRESS_SLOW_MS": "5000"}
    p, out = run(tmp_path, [program("kill_early"), 30, "threads", 8], "t.vrt", env=env, extra_preload=SLOWSINK)
    assert p.returncode == 128 + 9, p.stderr
    said = returned(p.stdout)
    assert len(said) == 240
    _, records = dumped(str(VRAMTRACE), str(out))
    allocs = [r for r, _ in records if r.op == "alloc"]
    assert sorted(int(r.fields["size"]) for r in allocs) == sorted(said.values())
    assert [r.ts for r in allocs] == sorted(r.ts for r in allocs)
    for thread in {r.thread for r in allocs}:
        sizes = [int(r.fields["size"]) for r in allocs if r.thread == thread]
        assert sizes == sorted(sizes), thread
    assert info(out)["events_written"] == 240
    rep = json.loads(analyze("report", "--json", out).stdout)
    assert sum(d["live_bytes_at_end"] for d in rep["devices"]) == sum(said.values())


def test_recover_by_hand(tmp_path):
    """Killed outside `run`: the sidecar stays, every report says so and names the command;
    `vramtrace recover` appends the events (the end stays "not closed": which signal is not
    known), removes the sidecar, and a second recover has nothing to do."""
    env = clean_env({"LD_PRELOAD": str(PRELOAD), "VRAMTRACE_OUTPUT": str(tmp_path / "h.vrt")})
    p = subprocess.run([str(program("kill_early")), "6", "6"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == -9, p.stderr
    out, rings = tmp_path / "h.vrt", tmp_path / "h.vrt.rings"
    assert rings.exists()
    r = analyze("report", out)
    assert f"`vramtrace recover {out}` adds them" in r.stderr, r.stderr
    # never closed: how long it ran is not in its state block (report reads it from the events)
    ended, = [l for l in analyze("info", "-q", out).stdout.splitlines() if l.startswith("ended ")]
    assert ended == "ended      not closed: still running, or killed (SIGKILL, OOM killer)", ended
    r = subprocess.run([str(VRAMTRACE), "recover", str(out)], capture_output=True, text=True, timeout=60)
    # (how many the collector had written before the kill depends on the machine's load)
    assert r.returncode == 0 and re.search(rf"recovered \d+ events from 1 thread buffers into {re.escape(str(out))}|"
                                           rf"{re.escape(str(out))} already held every event", r.stderr), r.stderr
    assert not rings.exists()
    assert allocated_sizes(out) == sorted(returned(p.stdout).values())
    assert info(out)["end_reason"].startswith("not closed")
    assert "vramtrace recover" not in analyze("report", out).stderr
    again = subprocess.run([str(VRAMTRACE), "recover", str(out)], capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "nothing to recover" in again.stderr


def test_a_normal_exit_leaves_no_sidecar(tmp_path):
    """The preload itself removes it when it closes the trace (not `run`, which is not there)."""
    out = tmp_path / "n.vrt"
    env = clean_env({"LD_PRELOAD": str(PRELOAD), "VRAMTRACE_OUTPUT": str(out)})
    p = subprocess.run([str(program("kill_early")), "4", "5"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "done" in p.stdout, p.stderr
    assert info(out)["end_reason"] == "exited normally" and not (tmp_path / "n.vrt.rings").exists()
    assert "rings" in analyze("dump", out).stdout  # the trace named it while it ran


def test_an_empty_trace_says_why(tmp_path):
    """The name is taken (O_EXCL) a moment before the header is written: a kill in between leaves
    0 bytes, which every command explains instead of saying "bad magic"."""
    empty = tmp_path / "e.vrt"
    empty.write_bytes(b"")
    for cmd in ("info", "report"):
        r = subprocess.run([str(VRAMTRACE), cmd, str(empty)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "is empty: its process was killed" in r.stderr and "bad magic" not in r.stderr


def test_a_wrapped_ring_killed_mid_run_is_exact_after_recovery(tmp_path):
    """A 4 MiB ring that wraps many times (tests/programs/stress_crash.c with the zero-cost
    runtime), SIGKILLed mid-run: after recovery the trace counts every allocation and free the
    program made, and the live bytes at the end are what it held, to the byte."""
    p, out = run(tmp_path, [program("stress_crash"), "kill", 1000], "c.vrt", run_args=["--ring", "4M"],
                 env={"VRAMTRACE_THREAD_BUFFER": "16M", "VRAMTRACE_TS_UNIT_NS": "1"}, extra_preload=FASTRT)
    assert p.returncode == 128 + 9, p.stderr
    made = fields(last_line(p.stdout, "dying"))
    t = info(out)  # (the ring wraps 10-30 times in a second here; fewer on a loaded machine: exact either way)
    assert t["ring"], t
    assert (t["events_written"], t["events_lost"]) == (made["allocs"] + made["frees"], 0), (t, made)
    rep = json.loads(analyze("report", "--json", out).stdout)
    assert [d["live_bytes_at_end"] for d in rep["devices"]] == [made["held_bytes"]]


def test_every_state_block_counts_the_events_the_file_holds_then(tmp_path):
    """The file as a kill would leave it, after each write of its state block (tests/programs/
    state_probe.c copies it then): the events the state counts are the events its chunks hold.
    Events chunks are written mid-drain here (1 MiB of events long before the 10 s flush), the
    case where the state once followed its chunk with the last chunk's count."""
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    p, _ = run(tmp_path, [program("stress_crash"), "kill", 400], "s.vrt",
               env={"VRAMTRACE_RING": "0", "VRAMTRACE_FLUSH_MS": "10000", "VRAMTRACE_THREAD_BUFFER": "16M",
                    "STATE_PROBE_SNAPSHOTS": str(snaps)},
               extra_preload=f"{FASTRT}:{STATE_PROBE}")
    assert p.returncode == 128 + 9, p.stderr
    copies = sorted(snaps.glob("state.*.vrt"))
    assert len(copies) >= 10, copies
    counted = [(info(c)["events_written"], sum(op_counts(c).values())) for c in copies]
    assert sum(held for _, held in counted) > 200000, counted  # several events chunks among them
    assert all(said == held for said, held in counted), counted


def test_a_kill_between_an_events_chunk_and_its_state_block_counts_every_event(tmp_path):
    """SIGKILL right after an EVENTS chunk is in the file, before the state block that counts it
    (tests/programs/state_probe.c): the threads' tails have not moved, recovery takes the events
    after the chunk, and the recovered trace counts the chunk's events too."""
    p, out = run(tmp_path, [program("stress_crash"), "kill", 5000], "k.vrt",
                 env={"VRAMTRACE_RING": "0", "VRAMTRACE_FLUSH_MS": "10000", "VRAMTRACE_THREAD_BUFFER": "16M",
                      "STATE_PROBE_KILL_AFTER": "3"},
                 extra_preload=f"{FASTRT}:{STATE_PROBE}")
    assert p.returncode == 128 + 9 and "dying" not in p.stdout, (p.stdout[-300:], p.stderr)
    t = info(out)
    held = sum(op_counts(out).values())
    assert t["end_reason"] == "killed by a signal" and held > 1000, (t, held)
    assert (t["events_written"], t["events_lost"]) == (held, 0), (t, held)


def test_a_sidecar_name_taken_by_a_link_is_never_followed(tmp_path):
    """Another user planted TRACE.rings as a link: the preload does not write through it, says
    once that the buffers stay in private memory, the job and its trace go on, and nothing
    removes or recovers through the link."""
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    (tmp_path / "l.vrt.rings").symlink_to(target)
    p, out = run(tmp_path, [program("kill_early"), 4, 4], "l.vrt", quiet=False)
    assert p.returncode == 128 + 9, p.stderr
    said = [line for line in p.stderr.splitlines() if "thread buffers stay in private memory" in line]
    assert len(said) == 1 and "cannot create" in said[0], p.stderr
    assert target.read_bytes() == b"precious" and (tmp_path / "l.vrt.rings").is_symlink()
    assert "recovered" not in p.stderr and info(out)["end_reason"] == "killed by a signal"


@pytest.mark.forks
def test_a_launchers_killed_workers_are_recovered_beside_its_trace(tmp_path):
    """`run -o FILE` of a launcher whose workers write FILE.PID.vrt beside it (kill_early "fork":
    twenty children, each SIGKILLed): every worker's trace is recovered too, exactly."""
    p, out = run(tmp_path, [program("kill_early"), 10, "fork"], "w.vrt", limit=120)
    assert p.returncode == 0, p.stderr
    children = re.findall(r"^child (\d+) (\d+) (self|thread)$", p.stdout, re.M)
    assert len(children) == 20 and not list(tmp_path.glob("*.rings")), p.stderr
    traces = {str(info(t)["pid"]): t for t in tmp_path.glob("w*.vrt")}  # the first took w.vrt itself
    assert sorted(traces) == sorted(c[0] for c in children)
    for pid, at, mode in children:
        got = allocated_sizes(traces[pid])
        said = sorted(int(s) for q, _, s in re.findall(r"^returned (\d+) (\d+) (\d+)$", p.stdout, re.M) if q == pid)
        assert set(said) <= set(got) and (mode == "thread" or got == said), (pid, at, got, said)
