"""Trust nothing that arrives: traces that other people send, cut, rewritten under the reader,
crafted to take the machine, or full of terminal escapes; outputs that other users planted
names for; options that are not numbers. Each test names the finding it guards (issue #22).

The crafted traces are tests/fuzz/bad/ (tests/fuzz/make_corpus.c), where check_bad.py also holds
each to a peak RSS and a time; here they go through the commands a user would run.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BUILD, GOLDEN, SOURCE, TIMEOUT, VRAMTRACE, analyze

BAD = SOURCE / "tests" / "fuzz" / "bad"
CUT_UNDERFOOT = BUILD / "tests" / "libcut_underfoot.so"
RING_TRACE = GOLDEN / "h200" / "leak-cycle.vrt"   # a ring that never wrapped: 25 chunks
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")


def _sanitized():
    """A sanitizer build: its allocator's shadow and quarantine make peak RSS no measure of ours."""
    try:
        options = json.loads((BUILD / "meson-info" / "intro-buildoptions.json").read_text())
        return next(o["value"] for o in options if o["name"] == "b_sanitize") != "none"
    except (OSError, StopIteration, ValueError):
        return False


SANITIZED = _sanitized()


def vramtrace(*args, env=None, timeout=TIMEOUT):
    return subprocess.run([str(VRAMTRACE), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


# Runs ARGV in a grandchild and prints its peak RSS: a process forked from pytest starts with a
# copy of pytest's memory, and the kernel counts that in its maxrss even after exec.
MEASURE = r"""
import os, resource, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status = os.waitpid(pid, 0)
sys.stderr.write("maxrss_kb=%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def peak_rss_mib(*args):
    """(CompletedProcess, peak RSS in MiB) of `vramtrace ARGS`."""
    p = subprocess.run([sys.executable, "-c", MEASURE, str(VRAMTRACE), *map(str, args)], capture_output=True,
                       text=True, timeout=TIMEOUT)
    err, _, last = p.stderr.rstrip("\n").rpartition("\n")
    assert last.startswith("maxrss_kb="), p.stderr
    return subprocess.CompletedProcess(args, p.returncode, p.stdout, err + "\n" if err else ""), \
        int(last.split("=")[1]) / 1024


# ---- a cut trace says so (finding 4) --------------------------------------------------------------

def cuts(size, n=76):
    """n cut points spread over the file, past its header."""
    return sorted({4096 + (size - 4096) * k // (n + 1) for k in range(1, n + 1)})


@pytest.fixture(scope="module")
def cut_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("cuts")
    data = RING_TRACE.read_bytes()
    paths = []
    for at in cuts(len(data)):
        p = d / f"cut-{at}.vrt"
        p.write_bytes(data[:at])
        paths.append(p)
    return paths


def test_every_cut_of_a_ring_trace_says_it_was_cut(cut_traces):
    """70 of 76 cuts of leak-cycle.vrt gave no warning and `"truncated": false`."""
    silent = []
    for p in cut_traces:
        info = json.loads(analyze("info", "--json", p).stdout)
        if not (info["truncated"] and info["completeness"]["cut_short"]
                and info["end_reason"] == "unknown: the trace was cut short"):
            silent.append(p.name)
    assert silent == [], f"{len(silent)} of {len(cut_traces)} cuts read as complete: {silent[:5]}"


def test_a_cut_trace_never_says_the_process_exited_normally(cut_traces):
    for p in cut_traces[::5]:
        r = analyze("report", p)
        assert "exited normally" not in r.stdout.split("\n\n")[0], (p.name, r.stdout[:300])
        assert "the trace was cut short" in r.stderr
        assert " peak " not in r.stdout or "(the trace ends early: as of its end)" in r.stdout


def test_the_cut_in_the_finding_reports_what_it_holds_and_what_was_written(tmp_path):
    """Cut at 65,687 bytes: 2,589 of 9,675 events, peak 1.24 of 2.36 GiB, and 'exited normally'."""
    p = tmp_path / "cut.vrt"
    p.write_bytes(RING_TRACE.read_bytes()[:65687])
    rep = json.loads(analyze("report", "--json", "-q", p).stdout)
    assert rep["truncated"] is True and rep["end"] == "unknown: the trace was cut short"
    c = rep["completeness"]
    assert (c["events_read"], c["events_written"], c["chunks_found"], c["chunks_written"]) == (2589, 9675, 15, 25)
    text = analyze("report", p).stdout
    assert "2589 events over 4.993 s; the trace was cut short (2589 of the 9675 events written are in the file): " \
           "how the process ended is unknown" in text
    whole = json.loads(analyze("report", "--json", "-q", RING_TRACE).stdout)
    assert whole["truncated"] is False and whole["end"] == "exited normally"
    assert whole["completeness"]["events_read"] == whole["completeness"]["events_written"] == 9675


def test_every_json_output_carries_the_completeness(tmp_path):
    p = tmp_path / "cut.vrt"
    p.write_bytes(RING_TRACE.read_bytes()[:65687])
    for args in (["report"], ["leaks"], ["info"], ["diff", p]):
        out = json.loads(analyze(*args, "--json", p).stdout)
        if args[0] == "diff":
            assert out["truncated"] is True and out["completeness_a"]["completeness"]["cut_short"] is True
        else:
            assert out["truncated"] is True and out["completeness"]["chunks_written"] == 25, args
    oom = GOLDEN / "oom.vrt"
    assert json.loads(analyze("oom", "--json", oom).stdout)["truncated"] is False


# ---- a trace that changes under the reader (finding 7) ----------------------------------------------

@pytest.mark.parametrize("command", [["report"], ["html", "-o", "{out}/r.html"], ["info"]])
def test_a_trace_cut_while_it_is_read_is_an_error_not_sigbus(tmp_path, command):
    """Truncated while read, the analyzer died of SIGBUS (exit 135) and html left its .partial."""
    trace = tmp_path / "t.vrt"
    shutil.copyfile(RING_TRACE, trace)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "LD_PRELOAD": str(CUT_UNDERFOOT), "CUT_UNDERFOOT_PATH": str(trace),
           "CUT_UNDERFOOT_SIZE": "30000"}
    p = vramtrace(*[a.format(out=out) for a in command], trace, env=env)
    assert trace.stat().st_size == 30000  # the shim did cut it
    assert p.returncode == 4, (p.returncode, p.stderr)
    assert "the trace changed while it was read (another process overwrote or cut it)" in p.stderr
    assert list(out.iterdir()) == []


# ---- what is not a trace file (finding 7) -------------------------------------------------------------

def test_a_fifo_as_the_trace_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    p = vramtrace("info", fifo, timeout=20)
    assert time.monotonic() - started < 10
    assert (p.returncode, p.stderr) == (4, f"vramtrace: {fifo} is a FIFO, not a trace file: traces are read from "
                                            "regular files\n")


@pytest.mark.parametrize("path,kind", [("/dev/zero", "a character device"), ("/dev/null", "a character device")])
def test_a_device_as_the_trace_says_what_it_is(path, kind):
    p = vramtrace("report", path)
    assert p.returncode == 4 and f"{path} is {kind}, not a trace file" in p.stderr, p.stderr


def test_a_directory_without_traces_says_so(tmp_path):
    p = vramtrace("info", tmp_path)
    assert p.returncode == 4 and p.stderr == f"vramtrace: {tmp_path} holds no traces (*.vrt)\n"


def test_every_trace_command_reads_a_runs_directory(tmp_path):
    """`report DIR/` worked; `oom DIR/` did not find the process that ran out of memory."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copyfile(GOLDEN / "rt_api.vrt", d / "vramtrace.100.vrt")
    shutil.copyfile(GOLDEN / "oom.vrt", d / "vramtrace.200.vrt")
    p = vramtrace("oom", f"{d}/")
    assert p.returncode == 0 and p.stdout.startswith(f"vramtrace oom: {d}/vramtrace.200.vrt"), p.stdout[:200]
    p = vramtrace("timeline", d)
    assert p.returncode == 2 and f"{d} holds 2 traces; `timeline` reads one" in p.stderr
    (d / "vramtrace.100.vrt").unlink()
    for args in (["info"], ["timeline", "--csv"], ["dump"], ["export", "--format", "folded", "-o", tmp_path / "f"],
                 ["html", "-q", "-o", tmp_path / "r.html"]):
        p = vramtrace(*args, d)
        assert p.returncode == 0, (args, p.stderr)


# ---- options that are not numbers (finding 7) ---------------------------------------------------------

@pytest.mark.parametrize("args,option", [
    (["report", "--frames", "abc"], "--frames"), (["report", "--top", "0"], "--top"),
    (["timeline", "--from", "abc"], "--from"), (["timeline", "--to", "1x"], "--to"),
    (["timeline", "--buckets", "0"], "--buckets"), (["diff", "--at", "abc", "--at", "1"], "--at"),
    (["diff", "--top", "-3"], "--top"), (["oom", "--index", "0"], "--index"), (["oom", "--top", "2.5"], "--top"),
    (["leaks", "--top", "ten"], "--top"), (["export", "--format", "chrome", "-o", "{tmp}/x", "--max-events", "1e9"],
                                           "--max-events"),
    (["report", "--max-memory", "lots"], "--max-memory"),
])
def test_a_numeric_option_that_is_not_a_number_is_a_usage_error(tmp_path, args, option):
    p = vramtrace(*[a.format(tmp=tmp_path) for a in args], GOLDEN / "oom.vrt")  # an old build wrote -o
    assert p.returncode == 2 and p.stdout == "", (args, p.returncode, p.stdout[:100])
    assert p.stderr.startswith(f"vramtrace {args[0]}: {option} takes "), p.stderr


# ---- --json: JSON on stdout or nothing (finding 7) ------------------------------------------------------

@pytest.mark.parametrize("command", ["report", "leaks"])
def test_json_on_a_file_that_cannot_be_read_writes_nothing_on_stdout(tmp_path, command):
    """`report --json` on an unreadable file wrote a bare newline."""
    bad = tmp_path / "x.vrt"
    bad.write_text("not a trace\n")
    p = vramtrace(command, "--json", bad)
    assert p.returncode == 3 and p.stdout == "" and "not a vramtrace trace" in p.stderr
    p = vramtrace(command, "--json", bad, GOLDEN / "oom.vrt")  # the readable one still gives JSON
    assert len(json.loads(p.stdout)["processes"]) == 1


# ---- strings from a trace (finding 7) -------------------------------------------------------------------

def test_terminal_escapes_in_names_are_shown_escaped():
    """A function name and a module path with escapes set the terminal's title and cleared it."""
    trace = BAD / "control-chars-in-names"
    for args in (["report"], ["dump", "--stacks", "--tables"], ["leaks"], ["info"]):
        p = vramtrace(*args, trace)
        assert p.returncode == 0, (args, p.stderr)
        assert not CONTROL.search(p.stdout + p.stderr), (args, CONTROL.search(p.stdout + p.stderr))
    text = vramtrace("report", trace).stdout
    assert "evil\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\xe2\\x80\\xaefn" in text, text  # \\x9b: not UTF-8


@pytest.mark.parametrize("args", [["report"], ["info"], ["leaks", "--phase", "train"], ["oom"], ["whatif"],
                                  ["timeline", "--from", "100"], ["diff", "--at", "999", "--at", "1000"]],
                         ids=lambda a: a[0])
def test_a_trace_file_name_with_terminal_escapes_is_shown_escaped(tmp_path, args):
    """The file name is the user's, or a directory's that others write in (`report DIR/`): its
    escapes reach the terminal through every header, note and warning that names the trace."""
    name = tmp_path / "evil\x1b]0;PWNED\x07\x1b[2J.vrt"
    shutil.copy(GOLDEN / "h200" / ("oom.vrt" if args[0] in ("oom", "whatif") else "leak-cycle.vrt"), name)
    p = vramtrace(*args, name)
    assert p.returncode == 0, (args, p.stderr)
    assert "evil\\x1b]0;PWNED\\x07" in p.stdout + p.stderr, p.stdout[:300] + p.stderr
    assert not CONTROL.search(p.stdout + p.stderr), (args, CONTROL.search(p.stdout + p.stderr))


def test_an_error_that_names_a_file_with_terminal_escapes_shows_them_escaped(tmp_path):
    """Every error line goes through one writer (vrt_fail, vrt_usage) that escapes controls."""
    name = tmp_path / "evil\x1b]0;PWNED\x07.vrt"
    name.write_bytes(b"")
    for args in (["report"], ["export", "--format", "chrome", "-o", tmp_path / "o.json"], ["dump"]):
        p = vramtrace(*args, name)
        assert p.returncode != 0 and "evil\\x1b]0;PWNED\\x07.vrt" in p.stderr, (args, p.stderr)
        assert not CONTROL.search(p.stdout + p.stderr), (args, p.stderr)


def test_an_8_mib_name_is_cut_for_every_output(tmp_path):
    """6 KB of trace with one 8 MiB function name: 17 s in html and a 604 MB memory_viz pickle."""
    trace = BAD / "name-8mib"
    started = time.monotonic()
    for args in (["html", "-q", "-o", tmp_path / "r.html"], ["export", "--format", "memory-viz", "-o", tmp_path / "m"],
                 ["export", "--format", "chrome", "-o", tmp_path / "c"], ["export", "--format", "folded", "-o",
                                                                        tmp_path / "f"]):
        assert vramtrace(*args, trace).returncode == 0
    assert time.monotonic() - started < 20
    assert all(f.stat().st_size < 512 * 1024 for f in tmp_path.iterdir()), {f.name: f.stat().st_size
                                                                           for f in tmp_path.iterdir()}
    site, = json.loads(vramtrace("report", "--json", trace).stdout)["live_at_end"]
    name = site["frames"][0]["function"]
    assert len(name.encode()) <= 4096 and name.endswith("...[cut: 8388608 bytes in all]"), name[-80:]


# ---- bounded memory (finding 3) -----------------------------------------------------------------------------

@pytest.mark.skipif(SANITIZED, reason="a sanitizer's allocator: its shadow and quarantine are not the analyzer's")
def test_memory_per_live_allocation_is_at_most_128_bytes():
    """A million live allocations (5 KB of zstd) took 515 MiB (540 B each); the model keeps 64 B
    per item and at most 24 of index (model.h). Measured against a trace with one allocation."""
    small, base = peak_rss_mib("report", "--json", "-q", BAD / "control-chars-in-names")
    big, peak = peak_rss_mib("report", "--json", "-q", BAD / "zstd-bomb-1m-allocs")
    assert small.returncode == big.returncode == 0
    assert json.loads(big.stdout)["devices"][0]["live_bytes_at_end"] == 1000000 * 4096
    raw_buffer = 13  # MiB: the largest chunk decoded (12 MB of ALLOC records)
    per_item = (peak - base - raw_buffer) * 2 ** 20 / 1e6
    assert per_item <= 128, f"{per_item:.0f} B per live allocation (peak {peak:.0f} MiB, base {base:.0f} MiB)"


def test_a_zstd_bomb_stops_at_the_memory_budget_with_one_line_and_no_json():
    """23 KB of zstd-compressed ALLOC chunks (16.8 M allocations) took 8 GB and 30 s."""
    p, rss = peak_rss_mib("report", "--json", "--max-memory", "128M", BAD / "zstd-bomb-16m-allocs")
    assert p.returncode == 6 and p.stdout == "", (p.returncode, p.stdout[:100])
    assert p.stderr.endswith("the analysis needs more memory than --max-memory 128.0 MiB allows (" +
                             p.stderr.split(" allows (")[1]) and p.stderr.count("\n") == 1, p.stderr
    assert SANITIZED or rss < 128 + 64, rss


def test_the_default_budget_is_a_share_of_the_machine():
    """No --max-memory: half the RAM, or 3/4 of what is available: a bomb larger than that stops
    cleanly. Checked on a bomb that fits: it reads whole."""
    p = vramtrace("report", "-q", BAD / "zstd-bomb-1m-allocs")
    assert p.returncode == 0


# ---- outputs are never written through what others planted (finding 2) -----------------------------------

OUTPUTS = [["export", "--format", "chrome"], ["export", "--format", "memory-viz"], ["export", "--format", "folded"],
           ["export", "--format", "folded-peak"], ["html", "-q"]]


@pytest.mark.parametrize("command", OUTPUTS, ids=lambda c: "-".join(c[:3]))
def test_an_output_that_is_a_planted_link_is_neither_followed_nor_replaced(tmp_path, command):
    """`export -o out.json` opened with fopen("wb"): a link out.json -> /etc/anything made root
    overwrite that file."""
    victim, link = tmp_path / "victim", tmp_path / "out"
    victim.write_text("precious\n")
    link.symlink_to(victim)
    p = vramtrace(*command, "-o", link, GOLDEN / "oom.vrt")
    assert p.returncode == 4 and f"not writing {link}: it is a symbolic link" in p.stderr, p.stderr
    assert victim.read_text() == "precious\n" and os.readlink(link) == str(victim)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["out", "victim"]


def test_html_never_writes_through_a_predictable_temporary(tmp_path):
    """html -o r.html wrote r.html.partial with fopen: a link planted there was followed."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "r.html.partial").symlink_to(victim)
    p = vramtrace("html", "-q", "-o", tmp_path / "r.html", GOLDEN / "oom.vrt")
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["r.html", "r.html.partial", "victim"]


@pytest.mark.parametrize("command", OUTPUTS, ids=lambda c: "-".join(c[:3]))
def test_outputs_are_0600_like_the_trace_even_with_umask_0(tmp_path, command):
    """html and export outputs were 0644 (0666 under umask 0) while traces are 0600."""
    out = tmp_path / "out"
    p = subprocess.run([str(VRAMTRACE), *command, "-o", str(out), str(GOLDEN / "oom.vrt")], capture_output=True,
                       text=True, timeout=TIMEOUT, preexec_fn=lambda: os.umask(0))
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    strict = tmp_path / "strict.vrt"
    shutil.copyfile(GOLDEN / "oom.vrt", strict)
    strict.chmod(0o400)
    out.unlink()
    assert vramtrace(*command, "-o", out, strict).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o400  # never more open than the trace it came from


def test_an_output_that_is_a_device_is_refused(tmp_path):
    p = vramtrace("export", "--format", "chrome", "-o", "/dev/null", GOLDEN / "oom.vrt")
    assert p.returncode == 4 and "not writing /dev/null: it is a character device" in p.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# ---- figures from a lossy trace say so (finding 4) ---------------------------------------------------------

def test_leaks_says_events_were_lost_where_it_calls_a_site_rising():
    """leaks called a site "keeps rising" on the strength of lost frees without saying that
    events were lost in that window."""
    p = vramtrace("leaks", BAD / "lossy-growth")
    lines = p.stdout.splitlines()
    rising = next(i for i, line in enumerate(lines) if "keeps rising across the low points" in line)
    assert lines[rising + 1].strip() == "but 18 events were lost between those low points: a lost free looks like growth"
    out = json.loads(vramtrace("leaks", "--json", BAD / "lossy-growth").stdout)
    assert out["events_lost_in_windows"] == 18 and out["growing"][0]["still_rising"] is True


def test_leaks_marks_the_calls_in_which_events_were_lost():
    p = vramtrace("leaks", BAD / "lossy-phases")
    rows = [line for line in p.stdout.splitlines() if re.match(r"^\s+\d+\s", line)]
    assert len(rows) == 48
    marked = [int(line.split()[0]) for line in rows if line.endswith("(3 events lost: bounds)")]
    assert marked == [4, 12, 20, 28, 36, 44]
    out = json.loads(vramtrace("leaks", "--json", BAD / "lossy-phases").stdout)
    assert [c["index"] for c in out["phases"] if c["events_lost"]] == marked
