"""Helpers shared by test_stress.py, test_flight_recorder.py and test_security.py: running a
program under `vramtrace run` with a time limit (a deadlock fails the test, it does not hang the
suite), reading the "key=value" lines the stress programs print, and a few trace queries."""
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from conftest import BUILD, VRAMTRACE, Traced, analyze, clean_env, program

PRELOAD = BUILD / "preload" / "libvramtrace.so"
SIGSHIM = BUILD / "tests" / "libstress_sigshim.so"
CLOCKSHIM = BUILD / "tests" / "libstress_clockshim.so"
STEP_CLOCKSHIM = BUILD / "tests" / "libstep_clockshim.so"
SLOWSINK = BUILD / "tests" / "libstress_slowsink.so"
NOMMAP = BUILD / "tests" / "libstress_nommap.so"
SLOWMAP = BUILD / "tests" / "libstress_slowmap.so"
FAILMAP = BUILD / "tests" / "libstress_failmap.so"
FASTRT = BUILD / "tests" / "libstress_fastrt.so"
ATEXIT_LIB = BUILD / "tests" / "libstress_atexit_lib.so"

# The preload's writes made before the first event is written (the header, its state block, the
# process's description: issue 22, item 6): libstress_slowsink.so lets them through
# (STRESS_SLOW_SKIP), since stalling only those would fill no buffer (every thread waits for the file).
FIRST_WRITES = "6"

def run(tmp_path, argv, out, env=None, run_args=(), quiet=True, limit=60, preexec_fn=None, extra_preload=None):
    """`vramtrace run [-q] -o OUT -- ARGV` in tmp_path, in a session of its own that is killed
    whole (SIGKILL to the process group, as timeout(1) would) after `limit` seconds: then the
    test fails with "hung". extra_preload goes after libvramtrace.so in LD_PRELOAD (`run` puts
    itself first). Returns (CompletedProcess, Path of OUT)."""
    is_dir = str(out).endswith("/")
    out = Path(tmp_path) / out
    env = clean_env(env)
    if extra_preload:
        env["LD_PRELOAD"] = ":".join(filter(None, [env.get("LD_PRELOAD"), str(extra_preload)]))
    cmd = [str(VRAMTRACE), "run", *(["-q"] if quiet else []), *run_args, "-o", str(out) + ("/" if is_dir else ""),
           "--", *map(str, argv)]
    return run_command(cmd, tmp_path, env, limit, preexec_fn), out


def run_command(cmd, cwd, env, limit=60, preexec_fn=None):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            preexec_fn=preexec_fn, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"hung (killed after {limit} s): {' '.join(cmd)}\n{stdout[-2000:]}\n{stderr[-2000:]}")
    finally:
        try:  # whatever the command left behind in its session (a hung forked child)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def traced(p, path, argv=()):
    return Traced(list(argv), Path(path), p.returncode, p.stdout, p.stderr)


def fields(line):
    """{'key': int} of every key=value (integer value) in a line."""
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)\b", line)}


def last_line(text, prefix):
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert lines, f"no line starting with {prefix!r} in:\n{text[-2000:]}"
    return lines[-1]


def preload_lines(stderr):
    """What the preload printed: its lines are "vramtrace[PID]: ..."."""
    return [line for line in stderr.splitlines() if re.match(r"vramtrace\[\d+\]: ", line)]


def ring_laps(path):
    m = re.search(r"wrapped (\d+) times", analyze("info", path).stdout)
    assert m, analyze("info", path).stdout
    return int(m[1])


def info(path):
    return json.loads(analyze("info", "--json", path).stdout)


def report(path):
    return json.loads(analyze("report", "--json", "--quiet", "--top", "1000000", path).stdout)


def live_by_leaf(rep):
    """{innermost function: (count, bytes)} over report's live_at_end sites."""
    by = {}
    for s in rep["live_at_end"]:
        leaf = s["frames"][0]["function"]
        count, size = by.get(leaf, (0, 0))
        by[leaf] = (count + s["count"], size + s["bytes"])
    return by


def op_counts(path):
    """{op: number of event records} from `vramtrace dump` (checkpoint contents excluded),
    without parsing every field: the big traces here hold millions of records."""
    counts = {}
    for line in analyze("dump", "--quiet", path).stdout.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1].startswith("t") and not parts[2].startswith("cp_") and parts[2] != "checkpoint":
            counts[parts[2]] = counts.get(parts[2], 0) + 1
    return counts


def can_mount_tmpfs():
    return os.geteuid() == 0 and shutil.which("mount") and shutil.which("umount")


def run_plain_prog(name, *args, env=None, extra_preload=None, limit=60, cwd=None):
    """A test program without vramtrace (same environment rules), killed after `limit` seconds."""
    env = clean_env(env)
    if extra_preload:
        env["LD_PRELOAD"] = ":".join(filter(None, [env.get("LD_PRELOAD"), str(extra_preload)]))
    return run_command([program(name), *map(str, args)], cwd, env, limit)


__all__ = ["PRELOAD", "SIGSHIM", "CLOCKSHIM", "NOMMAP", "FASTRT", "ATEXIT_LIB", "run", "run_command", "traced", "fields", "last_line",
           "preload_lines", "ring_laps", "info", "report", "live_by_leaf", "op_counts", "can_mount_tmpfs",
           "run_plain_prog"]
