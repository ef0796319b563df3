"""The flight recorder (issue 5): a bounded ring that a job can run in for days.

- A run many times longer than its ring keeps the exact live set, and the stack of every
  survivor, however long ago it was allocated (tests/programs/stress_churn.c, with the
  zero-cost runtime tests/programs/stress_fastrt.c so a 4 MiB ring wraps 15-25 times in seconds).
- A process killed (SIGKILL) or aborted in the middle leaves a trace that decodes, loses at most
  what was made within about VRAMTRACE_FLUSH_MS of its death (asserted: 3 x), and says how it
  ended; at any instant of a run the file lags the program by no more than that
  (tests/programs/stress_crash.c).
- A forking launcher gets one trace per worker, named by pid and rank
  (tests/programs/stress_launcher.c).
- `vramtrace run -o FILE` never writes through a symlink planted at FILE.
"""
import os
import re
import signal
import struct
import subprocess
import time

import pytest

from conftest import MiB, VRAMTRACE, analyze, clean_env, program
from stress_helpers import (FASTRT, fields, info, last_line, live_by_leaf, op_counts, preload_lines, report,
                            ring_laps, run, run_command)

RING = ["--ring", "4M"]
FAST = {"VRAMTRACE_THREAD_BUFFER": "16M", "VRAMTRACE_TS_UNIT_NS": "1"}


# ---- a run ~20 times longer than the ring -----------------------------------------------------

def churn(tmp_path, rounds, keep_every):
    argv = [program("stress_churn"), rounds, keep_every]
    p, out = run(tmp_path, argv, "c.vrt", env=FAST, run_args=RING, extra_preload=FASTRT, limit=120)
    assert p.returncode == 0, p.stderr
    sites = {line.split()[1]: fields(line) for line in p.stdout.splitlines() if line.startswith("site ")}
    return p, out, sites, fields(last_line(p.stdout, "stress_churn:"))


def check_survivors(out, sites, made):
    t = info(out)
    assert t["events_lost"] == 0 and t["ring"] and t["history_lost"]
    rep = report(out)
    assert [(d["device"], d["kind"], d["live_bytes_at_end"]) for d in rep["devices"]] == \
        [(0, "device", made["held_bytes"])]
    # Every survivor, with its stack: per allocating function, exactly what the program kept.
    assert live_by_leaf(rep) == {name: (s["count"], s["bytes"]) for name, s in sites.items()}
    for s in rep["live_at_end"]:
        leaf, caller = (f["function"] for f in s["frames"][:2])
        assert re.fullmatch(r"site_\d\d", leaf) and caller == "main", s["frames"][:3]


def test_ring_wrapped_twice_keeps_exact_survivors_and_stacks(tmp_path):
    p, out, sites, made = churn(tmp_path, 600000, 100)
    assert ring_laps(out) >= 2
    check_survivors(out, sites, made)


def test_a_wrapped_ring_cut_in_half_says_what_is_missing(tmp_path):
    """A copy of a wrapped ring's first half (taken while it was written, or truncated): its
    records name stacks whose definitions were in the part cut off. One line says so and what
    to do, exit 3 (bad data), instead of "a bad record: reference to an undefined id"."""
    p, out, _, _ = churn(tmp_path, 600000, 100)
    assert ring_laps(out) >= 2
    half = tmp_path / "half.vrt"
    half.write_bytes(out.read_bytes()[:out.stat().st_size // 2])
    r = subprocess.run([str(VRAMTRACE), "report", "-q", str(half)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert re.search(r"^vramtrace: .*half\.vrt: stopped after \d+ events: a record names a stack, string or thread "
                     r"whose definition is in the part of the file that is missing \(it was cut short\); read a "
                     r"whole copy of it$", r.stderr, re.M), r.stderr


def damage_checkpoints(path):
    """Flips a payload byte of every CHECKPOINT chunk in the ring (a header's crc still holds)."""
    data = bytearray(path.read_bytes())
    ring_offset, ring_size = struct.unpack_from("<QQ", data, 24)
    damaged, off = 0, ring_offset
    while off + 32 <= ring_offset + ring_size and off + 32 <= len(data):
        magic, kind, _, _, stored = struct.unpack_from("<IBBHI", data, off)
        if magic != 0x4b484356:
            off += 8
            continue
        if kind == 3 and stored:
            data[off + 32] ^= 0xff
            damaged += 1
        off += (32 + stored + 7) & ~7
    path.write_bytes(bytes(data))
    return damaged


def test_a_wrapped_ring_without_a_whole_checkpoint_says_there_is_nothing_to_replay(tmp_path):
    """As after a kill while the only checkpoint the ring could hold was being written: the
    reader must not present an empty replay as the exact live set."""
    p, out, sites, made = churn(tmp_path, 600000, 100)
    assert ring_laps(out) >= 2 and damage_checkpoints(out) > 0
    r = analyze("report", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "holds no whole checkpoint" in r.stderr and "live set and stacks are exact" not in r.stderr, r.stderr


@pytest.mark.slow
def test_run_20x_longer_than_the_ring_keeps_exact_survivors_and_stacks(tmp_path):
    p, out, sites, made = churn(tmp_path, 3500000, 100)
    laps = ring_laps(out)
    assert laps >= 15, f"the ring wrapped only {laps} times"
    assert os.path.getsize(out) < 5 * MiB  # bounded: the 4 MiB ring, the header and the tables
    check_survivors(out, sites, made)


def test_small_ring_with_a_large_live_set_keeps_tracing(tmp_path):
    """100000 survivors at scattered addresses: every late checkpoint is over 1 MiB compressed,
    more than a ring chunk may hold, so it is written in parts. The trace goes on to the end and
    keeps every survivor with its stack. (As many frees again make the ring wrap twice whatever
    the timing of the checkpoints; 100000 allocations alone filled it to within 0.3% and left it
    unwrapped in half the runs on a loaded machine.)"""
    argv = [program("stress_churn"), 200000, 2]
    p, out = run(tmp_path, argv, "c.vrt", env=FAST, run_args=RING, extra_preload=FASTRT, quiet=False)
    assert p.returncode == 0
    assert [line for line in preload_lines(p.stderr) if "tracing to" not in line] == [], p.stderr
    assert info(out)["events_written"] == 300000
    sites = {line.split()[1]: fields(line) for line in p.stdout.splitlines() if line.startswith("site ")}
    check_survivors(out, sites, fields(last_line(p.stdout, "stress_churn:")))


def churn_bytes(n):
    """Bytes of stress_churn's first n allocations (its xorshift sequence)."""
    s, total, mask = 0x2545f4914f6cdd1d, 0, (1 << 64) - 1
    for _ in range(n):
        s ^= (s << 13) & mask
        s ^= s >> 7
        s ^= (s << 17) & mask
        total += 1 + (s >> 8) % (256 * 1024)
    return total


def test_a_live_set_too_large_for_the_ring_ends_the_trace_with_one_line(tmp_path):
    """300000 survivors cannot fit a 4 MiB ring: once a checkpoint would span more than half of
    it (no room left for a whole one and the events after it), the trace ends there, cleanly,
    with one line that names the ring size needed; the job runs on unharmed, and the trace holds
    the exact live set up to its end."""
    argv = [program("stress_churn"), 300000, 1]
    p, out = run(tmp_path, argv, "c.vrt", env=FAST, run_args=RING, extra_preload=FASTRT, quiet=False)
    assert p.returncode == 0 and fields(last_line(p.stdout, "stress_churn:"))["held_count"] == 300000
    lines = [line for line in preload_lines(p.stderr) if "tracing to" not in line]
    assert len(lines) == 1, p.stderr
    m = re.search(r"ends here: the live set \((\d+) allocations\) needs --ring of at least (\d+)M", lines[0])
    assert m, lines[0]
    n, need = int(m[1]), int(m[2])
    assert 50000 < n < 300000 and need > 4, lines[0]
    t = info(out)
    assert (t["end_code"], t["events_written"], t["events_lost"]) == (7, n, 0)  # VRT_END_WRITE_FAILED
    # run and the analyzer say why, in the same words
    why = "the live set outgrew the ring; run with a larger --ring"
    assert f"vramtrace: trace: {out} (cut short: writing it failed: {why})" in p.stderr.splitlines(), p.stderr
    assert f"({why})" in analyze("info", out).stdout
    rep = report(out)
    assert sum(s["count"] for s in rep["live_at_end"]) == n
    assert [d["live_bytes_at_end"] for d in rep["devices"]] == [churn_bytes(n)]


# ---- a retained window that starts at its peak ----------------------------------------------

def test_a_peak_inside_the_checkpoint_the_ring_starts_from_has_its_sites(tmp_path):
    """The replay of a wrapped ring starts from a checkpoint's items. When nothing after them
    holds more, the peak is set inside that checkpoint, where no event count can name it: the
    sites at the peak are the checkpoint's items (report and export took the state after the
    checkpoint's first record, and had no site to show)."""
    p, out = run(tmp_path, [program("ring_peak_at_start"), 3000000], "r.vrt", env=FAST, run_args=RING, limit=120)
    assert p.returncode == 0, p.stderr
    t = info(out)
    assert t["events_lost"] == 0 and t["history_lost"], t
    (dev,) = report(out)["devices"]
    assert (dev["peak_bytes"], dev["live_bytes_at_end"]) == (64 * MiB, 32 * MiB)
    assert [(s["frames"][0]["function"], s["count"], s["bytes"]) for s in dev["top_at_peak"]] == \
        [("keep_site", 64, 64 * MiB)]
    folded = analyze("export", "--format", "folded-peak", "-q", "-o", "-", out).stdout.splitlines()
    assert len(folded) == 1 and re.fullmatch(rf"device 0 at its peak \([\d.]+ s\);.*;main[^;]*;keep_site[^;]* {64 * MiB}",
                                             folded[0]), folded


def test_a_ring_whose_first_lap_defined_more_strings_than_the_id_slack_reads(tmp_path):
    """900000 marks, each its own label: the ring's first lap defines more strings than
    VRT_ID_SLACK (65536). Its TABLES chunks that survive the wrap come before the consolidated
    one, which repeats what the overwritten ones defined, so their ids run far ahead of what was
    read so far: the reader counts what the chunks still to read may define (it refused the file,
    "reference to an undefined id", which a job with that many distinct stacks would meet too)."""
    p, out = run(tmp_path, [program("ring_peak_at_start"), 900000, "distinct"], "r.vrt", env=FAST, run_args=RING,
                 limit=120)
    assert p.returncode == 0, p.stderr
    t = info(out)
    assert t["events_lost"] == 0 and t["history_lost"], t
    (dev,) = report(out)["devices"]
    assert (dev["peak_bytes"], dev["live_bytes_at_end"]) == (64 * MiB, 32 * MiB)
    marks = analyze("dump", "-q", out).stdout.count(' mark ')
    assert 0 < marks < 900000, marks


# ---- death in the middle ---------------------------------------------------------------------

# VRAMTRACE_FLUSH_MS is "the longest time an event waits in memory before it is written" (README):
# what a SIGKILL loses is at most what was made within about that long of the death. Asserted
# with room for a busy machine's scheduling: everything made more than LOSS_BOUND before the
# death (or before a copy of the file) must be in it. A collector that writes 4 times less often
# than it should loses more than that (scripts/mutants.sh: flush-4x).
FLUSH_MS = 50
LOSS_BOUND_FLUSHES = 3


def crash(tmp_path, mode, ms, keep_every, ring=None, fast=False):
    argv = [program("stress_crash"), mode, ms, keep_every]
    env = {"VRAMTRACE_FLUSH_MS": str(FLUSH_MS), "FAKECUDA_TOTAL_BYTES": "4T", **FAST}
    p, out = run(tmp_path, argv, "k.vrt", env=env, run_args=ring or [], extra_preload=FASTRT if fast else None)
    return (p, out, *made_lines(p.stdout))


def made_lines(stdout):
    """[{n, t}] of stress_crash's "made N T" lines, and N, T of its "dying N T" line."""
    made = [{"n": int(line.split()[1]), "t": int(line.split()[2])}
            for line in stdout.splitlines() if line.startswith("made ")]
    dying = stdout.splitlines()[-1].split()
    assert dying[0] == "dying", stdout[-500:]
    return made, int(dying[1]), int(dying[2])


def recorded_prefix(out, keep_every):
    """How much of the run the trace holds. Allocation i is 4096 + 8 i bytes and every k-th is
    kept, so the live set at death must be kept allocations 0, k, 2k, ... (a prefix of the run),
    plus, after a SIGKILL, possibly the one allocation made last whose free was not written yet.
    Returns the index of the first allocation (or free) the trace does not have."""
    rep = report(out)
    (count, size), = live_by_leaf(rep).values()
    assert rep["live_at_end"][0]["frames"][0]["function"] == "crash_site"
    k = keep_every

    def prefix(m):
        return sum(4096 + 8 * i for i in range(0, m * k, k))
    if size == prefix(count):
        return count * k
    extra, rest = divmod(size - prefix(count - 1) - 4096, 8)
    assert rest == 0 and (count - 2) * k < extra < (count - 1) * k, \
        f"the live set ({count} allocations, {size} bytes) is not a prefix of the run"
    return extra


def check_bounded_loss(made, first_missing, death_us, flush_ms=FLUSH_MS, what="the death"):
    """Every allocation made more than LOSS_BOUND_FLUSHES x flush_ms before death_us is in the
    trace: first_missing is past the last one of them that the program reported."""
    bound_us = LOSS_BOUND_FLUSHES * flush_ms * 1000
    old = [m["n"] for m in made if m["t"] < death_us - bound_us]
    must_have = old[-1] + 1 if old else 0
    assert first_missing >= must_have, \
        (f"allocation {first_missing} is missing, but {must_have} were made more than "
         f"{LOSS_BOUND_FLUSHES} x {flush_ms} ms before {what}")


@pytest.mark.parametrize("ring", [pytest.param(None, id="default-ring"), pytest.param(RING, id="4M-ring")])
def test_sigkill_mid_run_trace_decodes_loss_bounded_live_set_at_death(tmp_path, ring):
    p, out, made, total, death = crash(tmp_path, "kill", 1000, 10, ring)
    assert p.returncode == 128 + 9
    t = info(out)
    assert (t["end_reason"], t["end_detail"], t["events_lost"]) == ("killed by a signal", 9, 0)
    # `run` records when it saw the process die, not only how.
    after = re.search(r"killed by a signal \(signal 9\) after (\d+\.\d+) s", analyze("info", out).stdout)
    assert after and 0.9 < float(after[1]) < 60, analyze("info", out).stdout
    check_bounded_loss(made, recorded_prefix(out, 10), death)


PACED_FLUSH_MS = 100


def test_the_file_never_lags_the_program_by_more_than_the_flush_interval(tmp_path):
    """stress_crash at one allocation a millisecond for 3 s, then SIGKILL: nothing but the
    collector's timer writes events at that pace. The file is copied every 10 ms while the
    program runs - each copy is what a SIGKILL at that instant would leave (the page cache
    survives it) - and each copy, and the file left by the real SIGKILL at the end, must hold
    every allocation made more than 3 x VRAMTRACE_FLUSH_MS before it was taken."""
    out = tmp_path / "p.vrt"
    argv = [program("stress_crash"), "kill", 3000, 10, 1000]
    cmd = [str(VRAMTRACE), "run", "-q", "-o", str(out), "--", *map(str, argv)]
    env = clean_env({"VRAMTRACE_FLUSH_MS": str(PACED_FLUSH_MS), "FAKECUDA_TOTAL_BYTES": "4T"})
    copies = []
    with open(tmp_path / "stdout", "w") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
                                start_new_session=True)
        try:
            limit = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < limit:
                taken = time.monotonic()  # the file holds at least what was written before now
                data = out.read_bytes() if out.exists() else b""
                if proc.poll() is None:  # a copy made after the death says nothing about the timer
                    copies.append((int(taken * 1e6), data))
                time.sleep(0.01)
        finally:
            try:  # a hung run: whatever is left of its session
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    assert proc.returncode == 128 + 9
    made, total, death = made_lines((tmp_path / "stdout").read_text())
    assert total > 1000 and len(copies) > 100, (total, len(copies))
    check_bounded_loss(made, recorded_prefix(out, 10), death, PACED_FLUSH_MS)
    held = {}  # the file changes at each flush only: each different copy is read once
    for i, (taken, data) in enumerate(copies):
        if data not in held:
            held[data] = copied_allocations(tmp_path / "copy.vrt", data)
        assert held[data] == [4096 + 8 * n for n in range(len(held[data]))], f"copy {i}: not a prefix of the run"
        check_bounded_loss(made, len(held[data]), taken, PACED_FLUSH_MS, f"copy {i} of the file was taken")


def copied_allocations(path, data):
    """Sizes of the allocations in a copy of a trace being written, in order."""
    if len(data) < 4096:
        return []  # not even the header yet
    path.write_bytes(data)
    p = analyze("dump", "-q", path, check=False)
    assert p.returncode == 0, f"a copy of a trace being written does not read: {p.stderr}"
    return [int(m[1]) for m in re.finditer(r"^\S+ t\d+ alloc .* size=(\d+)", p.stdout, re.M)]


@pytest.mark.parametrize("ring", [pytest.param(None, id="default-ring"), pytest.param(RING, id="4M-ring")])
def test_abort_mid_run_loses_nothing_and_says_how_it_ended(tmp_path, ring):
    p, out, made, total, death = crash(tmp_path, "abort", 1000, 10, ring)
    assert p.returncode == 128 + 6
    t = info(out)
    assert (t["end_reason"], t["end_detail"], t["events_lost"]) == ("died from a signal", 6, 0)
    assert recorded_prefix(out, 10) >= total  # the fatal-signal flush wrote everything
    if not t["history_lost"]:
        ops = op_counts(out)
        assert (ops["alloc"], ops["free"]) == (total, total - (total + 9) // 10)
    # A 4 MiB ring wraps within the second on a fast machine: it then holds the run's end, every
    # allocation from its oldest kept one to the last one made before the abort.
    sizes = copied_allocations(tmp_path / "copy.vrt", out.read_bytes())
    first = total - len(sizes)
    assert sizes == [4096 + 8 * n for n in range(first, total)]
    assert (first == 0) == (not t["history_lost"]), (first, t["history_lost"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["kill", "abort"])
def test_death_in_a_ring_that_wrapped_many_times(tmp_path, mode):
    p, out, made, total, death = crash(tmp_path, mode, 3000, 100, RING, fast=True)
    assert ring_laps(out) >= 1  # typically 5-10 laps in the 3 s; how many depends on the machine
    t = info(out)
    assert t["events_lost"] == 0 and t["history_lost"]
    first_missing = recorded_prefix(out, 100)
    if mode == "abort":
        assert t["end_reason"] == "died from a signal" and first_missing >= total
    else:
        assert t["end_reason"] == "killed by a signal"
        check_bounded_loss(made, first_missing, death)


# ---- launchers ------------------------------------------------------------------------------

def launch(tmp_path, mode, n, rank):
    env = {"RANK": "0"} if rank else {}
    p, out = run(tmp_path, [program("stress_launcher"), mode, n], "d/", env=env)
    assert (p.returncode, last_line(p.stdout, "launcher:")) == (0, f"launcher: {n} workers"), p.stderr
    workers = {w["pid"]: w for w in (fields(line) | {"i": int(line.split()[1]), "rank_text": line.split()[3]}
                                     for line in p.stdout.splitlines() if line.startswith("worker "))}
    assert len(workers) == n
    return out, workers


@pytest.mark.forks
@pytest.mark.parametrize("mode", ["fork", "exec"])
@pytest.mark.parametrize("rank", [False, True], ids=["no-rank", "rank"])
def test_launcher_one_trace_per_worker_named_by_pid_and_rank(tmp_path, mode, rank):
    out, workers = launch(tmp_path, mode, 4, rank)
    expected = {f"vramtrace.{pid}.rank{w['i']}.vrt" if rank else f"vramtrace.{pid}.vrt" for pid, w in workers.items()}
    assert {f.name for f in out.iterdir()} == expected  # the launcher allocated nothing: no trace
    everything = report(out)
    processes = {p["pid"]: p for p in everything["processes"]}
    assert set(processes) == set(workers)
    for pid, w in workers.items():
        proc = processes[pid]
        assert proc["rank"] == (w["i"] if rank else -1)
        assert [(d["kind"], d["live_bytes_at_end"]) for d in proc["devices"]] == [("device", w["bytes"])]
        assert proc["live_at_end"][0]["frames"][0]["function"] == "worker_site"
        assert proc["end"] == "exited normally"
    if rank:  # ordered by rank
        assert [p["rank"] for p in everything["processes"]] == sorted(w["i"] for w in workers.values())


# ---- a planted symlink at -o FILE --------------------------------------------------------------

@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_run_output_symlink_is_never_followed(tmp_path, dangling):
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious\n")
    link = tmp_path / "file.vrt"
    link.symlink_to(victim)
    p = run_command([str(VRAMTRACE), "run", "-o", str(link), "--", program("stress_churn"), "100", "10"], tmp_path,
                    clean_env())
    assert p.returncode != 0 and "not a trace file of yours" in p.stderr, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(victim)
    if dangling:
        assert not victim.exists()
    else:
        assert victim.read_text() == "precious\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(["file.vrt", *([] if dangling else ["victim.txt"])])
