"""What `vramtrace run` says and refuses, as a new user meets it (docs/ux-defects items 11, 12, 38-41):
an existing trace is kept unless -f, a command that cannot start gets one line, an armed job that
nobody attached is not said to have made no allocation, and a written trace comes with its size,
its event count and a next command that runs as printed."""
import re
import shlex
import subprocess
import sys
import time

import pytest

from conftest import CUDART, VRAMTRACE, analyze, clean_env, program

CHURN = [program("stress_churn"), "100", "10"]


def run(tmp_path, *args):
    return subprocess.run([str(VRAMTRACE), "run", *map(str, args)], capture_output=True, text=True,
                          env=clean_env(), cwd=tmp_path, timeout=60)


def vramtrace_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("vramtrace")]


def test_an_existing_trace_is_kept_unless_forced(tmp_path):
    out = tmp_path / "same.vrt"
    first = run(tmp_path, "-o", out, "--", *CHURN)
    assert first.returncode == 0, first.stderr
    kept = out.read_bytes()
    again = run(tmp_path, "-o", out, "--", *CHURN)
    assert again.returncode == 2 and again.stdout == ""
    assert f"vramtrace run: {out} exists: pass -f to replace it, or choose another -o" in again.stderr
    assert out.read_bytes() == kept  # and the command did not run: no second "tracing to" line
    assert "tracing to" not in again.stderr
    forced = run(tmp_path, "-f", "-o", out, "--", *CHURN)
    assert forced.returncode == 0, forced.stderr
    assert out.read_bytes() != kept


def test_a_command_that_cannot_start_gets_one_line(tmp_path):
    p = run(tmp_path, "-o", tmp_path / "t.vrt", "--", "no-such-command-here")
    assert p.returncode == 127
    assert vramtrace_lines(p.stderr) == ["vramtrace: cannot run no-such-command-here: No such file or directory"]
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\n")
    p = run(tmp_path, "--", script)
    assert p.returncode == 126
    assert vramtrace_lines(p.stderr) == [f"vramtrace: cannot run {script}: Permission denied"]


def test_an_output_directory_that_cannot_be_made_stops_before_the_job_in_one_line(tmp_path):
    """run -o DIR/ checks DIR before it starts the job, as it refuses an existing trace without
    -f: one line that says the command did not run, exit 4 (ux defect 49: the line ended in a
    second error text, ': input/output error')."""
    marker = tmp_path / "ran"
    p = run(tmp_path, "-o", "/proc/no-such-dir/traces/", "--", "/bin/touch", marker)
    assert p.returncode == 4 and p.stdout == "" and not marker.exists()
    assert p.stderr.splitlines() == ["vramtrace: cannot create directory /proc/no-such-dir/traces/: No such file or "
                                     "directory; the command was not run"]


def test_an_output_directory_that_takes_no_file_stops_before_the_job_in_one_line(tmp_path):
    """/sys/ exists and takes no file, even from root: run finds it before the job starts (one
    line, exit 4) instead of each process's preload saying so, then 'traces: /sys/ (one file per
    process)' and a next step for a directory with nothing in it (ux defect 49)."""
    marker = tmp_path / "ran"
    p = run(tmp_path, "-o", "/sys/", "--", "/bin/touch", marker)
    assert p.returncode == 4 and p.stdout == "" and not marker.exists()
    assert re.fullmatch(r"vramtrace: cannot write in /sys/: [^;]+; the command was not run\n", p.stderr), p.stderr


def test_an_armed_job_nobody_attached_is_not_said_to_allocate_nothing(tmp_path):
    p = run(tmp_path, "--armed", "-o", tmp_path / "a.vrt", "--", *CHURN)
    assert p.returncode == 0
    assert "made no CUDA allocation" not in p.stderr
    assert "no trace was written here: the command ran armed (live set only); `vramtrace attach PID` starts " \
           "tracing it (into the place its -o names)" in p.stderr.splitlines()[-1]
    # The job itself says what its live set held at exit, as stress_churn counts it.
    held = re.search(r"held_count=(\d+) held_bytes=(\d+)", p.stdout)
    assert re.search(r"^vramtrace\[\d+\]: armed and never attached: %s allocations \(%s bytes\) were live at exit; "
                     r"no trace was written \(`vramtrace attach \d+` while it runs starts one\)$" % (held[1], held[2]),
                     p.stderr, re.M), p.stderr


def test_an_armed_job_behind_shells_says_so_once_with_its_own_pid(tmp_path):
    """A job reached through shells that fork subshells and exec (a pyenv shim is a chain of
    them): only the process that allocated says what it held, once, under its own pid. An image
    that allocated and then execs did not exit: its successor says what is live at the end."""
    job = " ".join(map(str, CHURN))
    p = run(tmp_path, "--armed", "-o", tmp_path / "a.vrt", "--", "sh", "-c",
            f'x=$(true); y=$(sh -c true); sh -c "z=\\$(true); exec {job}"')
    assert p.returncode == 0, p.stderr
    said = re.findall(r"^vramtrace\[(\d+)\]: armed and never attached: .*`vramtrace attach (\d+)`", p.stderr, re.M)
    pid = re.search(r"pid=(\d+)", p.stdout)
    assert len(said) == 1, p.stderr
    assert said[0][0] == said[0][1] and (not pid or pid[1] == said[0][0])
    # stress_exec 2: three images, each allocates (k + 1) MiB and execs the next; the last says
    p = run(tmp_path, "--armed", "-o", tmp_path / "b.vrt", "--", program("stress_exec"), "2")
    assert p.returncode == 0, p.stderr
    said = re.findall(r"^vramtrace\[(\d+)\]: armed and never attached: (\d+) allocations \((\d+) bytes\)", p.stderr,
                      re.M)
    assert said == [(re.search(r"image 0 pid=(\d+)", p.stdout)[1], "1", str(1 << 20))], p.stderr


def next_step(stderr):
    line, = [line for line in stderr.splitlines() if line.startswith("vramtrace: next: ")]
    return shlex.split(line[len("vramtrace: next: "):].split("  (")[0])


def test_a_written_trace_comes_with_its_size_and_a_next_step_that_runs(tmp_path):
    odd = tmp_path / "it's a dir"
    odd.mkdir()
    out = odd / "t.vrt"
    p = run(tmp_path, "-o", out, "--", *CHURN)
    assert p.returncode == 0, p.stderr
    events = analyze("info", "--json", out).stdout
    m = re.search(r"^vramtrace: trace: (.+) \(([\d.]+ (?:B|KiB|MiB)), (\d+) events\)$", p.stderr, re.M)
    assert m and m[1] == str(out), p.stderr
    assert f'"events_written": {m[3]},' in events
    argv = next_step(p.stderr)
    assert argv == ["vramtrace", "report", str(out)]
    r = subprocess.run([str(VRAMTRACE), *argv[1:]], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"{m[3]} events" in r.stdout, r.stderr
    # With phases the next step is leaks; for a directory it reads the directory.
    p = run(tmp_path, "--phase", "train", "-o", tmp_path / "dir/", "--", *CHURN)
    assert p.returncode == 0, p.stderr
    assert next_step(p.stderr)[:2] == ["vramtrace", "leaks"]
    assert "(also: report, oom, html -o report.html; vramtrace help)" in p.stderr


def test_unknown_help_topic_and_missing_file_say_what_is_wrong(tmp_path):
    p = subprocess.run([str(VRAMTRACE), "help", "nonsense"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("vramtrace help: no command or topic named 'nonsense'")
    p = analyze("report", tmp_path / "nowhere.vrt", check=False)
    assert p.returncode != 0
    assert p.stderr.strip() == f"vramtrace: cannot read {tmp_path / 'nowhere.vrt'}: no such file"


def test_a_job_that_changes_directory_writes_where_run_was_started(tmp_path):
    """A launcher that `cd`s before it starts the program: -o FILE, -o DIR/ and the default are
    taken against the directory `run` was started in, not the one the job writes from, and the
    summary names what was written (the default's file is the child's, not the command's)."""
    (tmp_path / "sub").mkdir()
    job = ["sh", "-c", f"cd sub && {program('rt_api')}"]
    p = run(tmp_path, "-o", "a.vrt", "--", *job)
    assert p.returncode == 0 and (tmp_path / "a.vrt").is_file() and not (tmp_path / "sub" / "a.vrt").exists()
    assert "vramtrace: trace: a.vrt (" in p.stderr, p.stderr
    p = run(tmp_path, "-o", "d/", "--", *job)
    assert p.returncode == 0 and len(list((tmp_path / "d").glob("vramtrace.*.vrt"))) == 1, p.stderr
    p = run(tmp_path, "--", *job)
    written = list(tmp_path.glob("vramtrace.*.vrt"))
    assert p.returncode == 0 and len(written) == 1 and not list((tmp_path / "sub").iterdir()), p.stderr
    assert f"vramtrace: trace: ./{written[0].name} (written by a process the command started)" in p.stderr, p.stderr
    assert "no trace was written" not in p.stderr


@pytest.mark.parametrize("option,value", [("--depth", "-3"), ("--depth", "129"), ("--ring", "1M"), ("--ring", "x")])
def test_a_bad_run_option_stops_before_the_job(tmp_path, option, value):
    """Said by run, under the option's name, before the job starts; not by each process's preload
    under its environment variable's, after."""
    marker = tmp_path / "ran"
    p = run(tmp_path, option, value, "--", "/bin/touch", marker)
    assert p.returncode == 2 and not marker.exists(), p.stderr
    assert p.stderr.startswith(f"vramtrace run: {option} takes ") and "VRAMTRACE_" not in p.stderr, p.stderr


def test_the_summary_names_what_a_forking_job_wrote_and_only_that(tmp_path):
    """-o FILE: the other processes' "<stem>.<pid>.vrt" beside it are named too (a shell runs the
    program twice: the first takes f.vrt); -o DIR/ that stayed empty (armed, nobody attached) is
    not announced as holding traces. (A shell, not stress_fork: a child forked while threads are
    inside ASan's allocator can hang on its lock under the sanitizer run.)"""
    job = ["sh", "-c", f"{program('rt_api')} && {program('rt_api')} && {program('rt_api')}"]
    p = run(tmp_path, "-o", "f.vrt", "--", *job)
    assert p.returncode == 0, p.stderr
    siblings = sorted(f.name for f in tmp_path.glob("f.*.vrt"))
    named = sorted(re.findall(r"^vramtrace: trace: \./(f\.\d+\.vrt) \(beside it", p.stderr, re.M))
    assert len(siblings) == 2 and named == siblings, p.stderr
    assert p.stderr.splitlines()[-1].startswith("vramtrace: next: vramtrace report f.vrt")
    p = run(tmp_path, "--armed", "-o", "armed/", "--", *job)
    assert p.returncode == 0 and not list((tmp_path / "armed").iterdir()), p.stderr
    assert "traces: armed/" not in p.stderr and "no trace was written here" in p.stderr, p.stderr


FORK_AND_ALLOCATE = """
import ctypes, os
rt = ctypes.CDLL(os.environ["CUDART"])
pid = os.fork()
ptr = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(ptr), 1 << 20) == 0
if pid:
    os.waitpid(pid, 0)
else:
    os._exit(0)
"""


def test_processes_that_make_no_cuda_allocation_write_no_trace(tmp_path):
    """A job's helper processes (two Python interpreters that never touch CUDA) leave no trace
    file: the facts their start records (python.library_paths) and their exit mark wait for a
    first event that never comes (ux audit 73). The one process that allocates writes its trace,
    and run's summary names that one only."""
    script = f"{shlex.quote(sys.executable)} -c pass; {shlex.quote(sys.executable)} -c 'import os'; " \
             + " ".join(map(shlex.quote, map(str, CHURN)))
    p = run(tmp_path, "--", "/bin/sh", "-c", script)
    assert p.returncode == 0, p.stderr
    traces = sorted(tmp_path.glob("vramtrace.*.vrt"))
    assert len(traces) == 1, (traces, p.stderr)
    said = [line for line in p.stderr.splitlines() if line.startswith("vramtrace: trace: ")]
    assert said == [f"vramtrace: trace: ./{traces[0].name} (written by a process the command started)"], p.stderr


def test_a_forked_child_trace_has_the_facts_its_parent_recorded_before_the_fork(tmp_path):
    """The facts a process recorded before its trace began are kept, and written when its file
    is made: a child forked before either process allocated has them in its own file too."""
    env = clean_env({"CUDART": str(CUDART)})
    p = subprocess.run([str(VRAMTRACE), "run", "-o", "d/", "--", sys.executable, "-c", FORK_AND_ALLOCATE],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    traces = sorted((tmp_path / "d").glob("*.vrt"))
    assert len(traces) == 2, (traces, p.stderr)
    for t in traces:
        dump = analyze("dump", "-q", t).stdout
        assert "python.library_paths" in dump and " alloc " in dump, dump[:2000]


def test_a_trace_from_before_the_run_is_not_named_as_the_jobs(tmp_path):
    """run names the traces a launcher's children wrote by their times: one written by an earlier
    run a moment before (the same second) is not among them."""
    first = run(tmp_path, "--", *CHURN)
    assert first.returncode == 0, first.stderr
    earlier = next(tmp_path.glob("vramtrace.*.vrt")).name
    time.sleep(0.05)  # past the coarse clock's tick, well inside the second
    p = run(tmp_path, "--", "/bin/sh", "-c", " ".join(map(shlex.quote, map(str, CHURN))))
    assert p.returncode == 0, p.stderr
    said = [line for line in p.stderr.splitlines() if line.startswith("vramtrace: trace: ")]
    assert len(said) == 1 and earlier not in said[0], p.stderr


MANY_FACTS = """
import ctypes
lib = ctypes.CDLL(None)
for i in range(40):
    lib.vramtrace_record_info(b"fact.%d" % i, b"x" * 2000)
"""


def test_facts_past_what_the_preload_keeps_still_reach_the_trace(tmp_path):
    """A process keeps at most 32 facts (and 32 KiB of them) until its file exists; past that a
    fact is sent as any record, which makes the file: every one of 40 facts of 2000 bytes is in it."""
    p = run(tmp_path, "-o", tmp_path / "f.vrt", "--", sys.executable, "-c", MANY_FACTS)
    assert p.returncode == 0, p.stderr
    dump = analyze("dump", "-q", tmp_path / "f.vrt").stdout
    assert sorted(re.findall(r"^# (fact\.\d+) = x{2000}$", dump, re.M)) == sorted(f"fact.{i}" for i in range(40))
