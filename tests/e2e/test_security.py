"""Never trust the input: trace files are private and never reached through a planted symlink,
the control socket answers only its own user and only well-formed requests, and no setting
makes the preload write outside the directory it was given.

Programs: tests/programs/stress_symlink.c (plants symlinks at its own trace's name),
stress_launcher.c (forked workers, so the preload names files), attach_target.c (a traced
process that waits on stdin while the control socket is probed).
"""
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import MiB, TIMEOUT, VRAMTRACE, analyze, clean_env, parse_dump, program
from stress_helpers import PRELOAD, fields, info, last_line, preload_lines, report, run, run_command, run_plain_prog

VRT_E_PERM, VRT_E_PROTO = -13, -14
CTL_MAGIC, CTL_VERSION = 0x4C544356, 1
CTL_STATUS, CTL_START, CTL_MARK, CTL_SNAPSHOT, CTL_STOP = 1, 2, 4, 5, 6
MAX_PAYLOAD = 4096


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def everything_under(root):
    return {os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files}


# ---- trace files are private ------------------------------------------------------------------

@pytest.mark.forks
def test_trace_files_are_0600_and_the_directory_0700_even_with_umask_0(tmp_path):
    p, out = run(tmp_path, [program("stress_launcher"), "fork", 3], "d/", preexec_fn=lambda: os.umask(0))
    assert p.returncode == 0, p.stderr
    files = list(out.iterdir())
    assert len(files) == 3 and all(mode(f) == 0o600 for f in files), {f.name: oct(mode(f)) for f in files}
    assert mode(out) == 0o700
    p, single = run(tmp_path, [program("stress_churn"), 100, 10], "one.vrt", preexec_fn=lambda: os.umask(0))
    assert mode(single) == 0o600


# ---- planted symlinks --------------------------------------------------------------------------

@pytest.fixture
def planted(tmp_path):
    out, victim = tmp_path / "d", tmp_path / "victim.txt"
    victim.write_text("precious\n")
    p, _ = run(tmp_path, [program("stress_symlink"), out, victim], "d/")
    assert p.returncode == 0, p.stderr
    return out, victim, fields(last_line(p.stdout, "planted"))["pid"]


def test_planted_symlinks_at_the_trace_name_are_neither_followed_nor_replaced(planted):
    out, victim, pid = planted
    assert victim.read_text() == "precious\n"
    for name in (f"vramtrace.{pid}.vrt", f"vramtrace.{pid}.vrt.1"):
        assert os.readlink(out / name) == str(victim)
    real = out / f"vramtrace.{pid}.1.vrt"  # the next free name, created O_EXCL|O_NOFOLLOW
    assert real.is_file() and not real.is_symlink() and mode(real) == 0o600
    site, = report(real)["live_at_end"]
    assert (site["frames"][0]["function"], site["bytes"]) == ("planted_site", MiB)


def test_report_of_the_directory_finds_a_trace_with_a_suffixed_name(planted):
    """The suffix goes before the extension (vramtrace.PID.1.vrt); `report DIR/` reads the
    directory's regular *.vrt files and skips the planted links with a note."""
    out, victim, pid = planted
    p = analyze("report", "--json", "--quiet", str(out) + "/")
    found, = json.loads(p.stdout)["processes"]  # a directory: a list, of one process here
    assert found["pid"] == pid
    assert sorted(p.stderr.splitlines()) == [f"vramtrace: note: {out}/vramtrace.{pid}.vrt{n} is not a regular file; "
                                             "skipped" for n in ("", ".1")]


def test_report_of_the_directory_reads_a_trace_named_by_an_older_preload(planted):
    """Before format 1.1 the preload put the suffix after the extension: vramtrace.PID.vrt.2."""
    out, victim, pid = planted
    (out / f"vramtrace.{pid}.1.vrt").rename(out / f"vramtrace.{pid}.vrt.2")
    found, = report(out)["processes"]  # a directory: a list, of one process here
    assert found["pid"] == pid


def test_preload_output_file_that_is_a_symlink_gets_a_name_of_its_own(tmp_path):
    """VRAMTRACE_OUTPUT=FILE with FILE a planted symlink (bare LD_PRELOAD: `run` would refuse)."""
    victim, link = tmp_path / "victim.txt", tmp_path / "t.vrt"
    victim.write_text("precious\n")
    link.symlink_to(victim)
    p = run_plain_prog("stress_churn", 100, 10, env={"LD_PRELOAD": str(PRELOAD), "VRAMTRACE_OUTPUT": str(link)},
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n" and os.readlink(link) == str(victim)
    made, = [f for f in tmp_path.iterdir() if f.name not in ("victim.txt", "t.vrt")]
    assert made.name.startswith("t.") and made.name.endswith(".vrt") and mode(made) == 0o600
    assert preload_lines(p.stderr) == [f"vramtrace[{made.name.split('.')[1]}]: tracing to {made}"]


# ---- no setting writes outside the chosen directory ---------------------------------------------

HOSTILE_RANKS = ["../../escape", "/tmp/escape", "1/../../escape", "-1", "99999999", "0x10", " 3", "3\n", ""]


@pytest.mark.forks
@pytest.mark.parametrize("rank", HOSTILE_RANKS, ids=[repr(r) for r in HOSTILE_RANKS])
@pytest.mark.parametrize("target", ["d/", "d/t.vrt"])
def test_rank_and_friends_cannot_move_the_trace_out_of_its_directory(tmp_path, rank, target):
    """Two forked workers inherit RANK, LOCAL_RANK and WORLD_SIZE as given: their traces (one in
    a directory, or one at the file name and one beside it) stay where they were asked to be."""
    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": rank}
    p, out = run(work, [program("stress_launcher"), "inherit", 2], target, env=env)
    assert p.returncode == 0, p.stderr
    files = list((work / "d").iterdir())
    assert everything_under(tmp_path) == {str(work), str(work / "d"), *map(str, files)}
    assert not os.path.exists("/tmp/escape")
    assert len(files) == 2
    numeric = re.fullmatch(r"\s*\d{1,6}", rank) is not None  # what strtol and the preload accept as a rank
    for f in files:  # the first process takes the file name exactly; the other writes beside it
        assert (".rank" in f.name) == (numeric and f.name != "t.vrt"), f.name
        assert info(f)["rank"] == (int(rank) if numeric else -1)


def test_a_numeric_rank_is_used_in_the_name_inside_the_directory(tmp_path):
    p, out = run(tmp_path, [program("stress_launcher"), "worker", 0], "d/", env={"RANK": "7"})
    name, = [f.name for f in out.iterdir()]
    assert name.endswith(".rank7.vrt") and info(out / name)["rank"] == 7


# ---- the control socket ---------------------------------------------------------------------------

class Target:
    """attach_target under `vramtrace run` (full tracing), parked on stdin."""

    def __init__(self, tmp_path):
        self.out = tmp_path / "target.vrt"
        self.proc = subprocess.Popen([str(VRAMTRACE), "run", "-q", "-o", str(self.out), "--",
                                      program("attach_target"), "steps"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
                                     cwd=tmp_path)
        line = self.proc.stdout.readline().strip()
        assert line.startswith("ready pid="), line
        self.pid = int(line.split("=")[1])
        self.address = f"\0vramtrace.{self.pid}"

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def finish(self):
        assert self.send("go") == "late done"
        assert self.send("go") == "bye"
        self.proc.stdin.close()
        assert self.proc.wait(timeout=TIMEOUT) == 0
        return self.proc.stderr.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    t = Target(tmp_path_factory.mktemp("control"))
    yield t
    t.kill()


def message(type_, payload=b"", *, magic=CTL_MAGIC, version=CTL_VERSION, length=None, status=0):
    return struct.pack("<IHHIi", magic, version, type_, len(payload) if length is None else length, status) + payload


def exchange(address, datagram, timeout=10):
    """Sends one raw datagram; returns (status, reply text) or None if the connection gave nothing back."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(timeout)
        s.connect(address)
        try:
            s.send(datagram)
        except OSError:  # the peer may close on an oversize datagram before it is all sent
            pass
        reply = s.recv(65536)
    if len(reply) < 16:
        return None
    magic, version, type_, length, status = struct.unpack("<IHHIi", reply[:16])
    assert (magic, version, type_, length) == (CTL_MAGIC, CTL_VERSION, 128, len(reply) - 16)
    return status, reply[16:].decode()


MALFORMED = {
    "empty": b"",
    "short": b"VCT",
    "bad magic": message(CTL_STATUS, magic=0xDEADBEEF),
    "bad version": message(CTL_STATUS, version=99),
    "unknown type": message(99),
    "a reply as a request": message(128, b"x"),
    "length says more": message(CTL_MARK, b"abc", length=100),
    "length says less": message(CTL_MARK, b"abc", length=1),
    "length overflows": message(CTL_MARK, b"abc", length=0xFFFFFFFF),
    "NUL inside the payload": message(CTL_MARK, b"ab\0cd"),
    "mark without a label": message(CTL_MARK),
    "snapshot to a relative path": message(CTL_SNAPSHOT, b"snap.vrt"),
    "payload over the limit": message(CTL_MARK, b"x" * (MAX_PAYLOAD + 1)),
    "oversize datagram": message(CTL_MARK, b"y" * 60000),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_control_socket_rejects_malformed_requests(target, name):
    status, text = exchange(target.address, MALFORMED[name])
    # A reply sent as a request parses (it is a message) and is refused by type, without a text.
    assert (status, text) == (VRT_E_PROTO, "" if name == "a reply as a request" else "malformed request")


def test_control_socket_still_serves_after_malformed_requests(target):
    for datagram in MALFORMED.values():
        exchange(target.address, datagram)
    status, text = exchange(target.address, message(CTL_STATUS))
    assert status == 0 and text.startswith(f"pid {target.pid} mode full trace {target.out}")


def as_user(uid, gid, fn):
    """Runs fn() in a forked child that has become uid/gid; returns what it returned (via a pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.write(w, repr(fn()).encode())
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(w, repr(("error", str(e))).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return eval(data.decode())  # noqa: S307 - our own child's repr of a tuple


@pytest.fixture
def other_user():
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user for the peer (running as uid %d)" % os.geteuid())
    return 65534, 65534  # nobody / nogroup


@pytest.mark.parametrize("request_", [message(CTL_STATUS), message(CTL_STOP),
                                      message(CTL_SNAPSHOT, b"/tmp/vramtrace-stolen.vrt")],
                         ids=["status", "stop", "snapshot"])
def test_control_socket_refuses_a_peer_of_another_user(target, other_user, request_):
    # 20 rounds: the server reads (and drops) the request before it answers, so the peer always
    # gets the refusal, never a connection reset (unread data at close would reset it).
    replies = as_user(*other_user, lambda: [exchange(target.address, request_) for _ in range(20)])
    assert replies == [(VRT_E_PERM, "refused: not the same user")] * 20, replies
    assert not os.path.exists("/tmp/vramtrace-stolen.vrt")
    status, text = exchange(target.address, message(CTL_STATUS))
    assert status == 0 and " mode full " in text  # a refused stop stopped nothing


def test_control_socket_probing_leaves_the_program_and_its_trace_intact(tmp_path):
    t = Target(tmp_path)
    try:
        for datagram in MALFORMED.values():
            exchange(t.address, datagram)
        stderr = t.finish()
    finally:
        t.kill()
    assert preload_lines(stderr) == []
    assert info(t.out)["end_reason"] == "exited normally"
    rep = report(t.out)
    assert rep["devices"][0]["live_bytes_at_end"] == 6 * MiB  # b (2 MiB) + c (4 MiB), a freed


# ---- nobody else's control socket ------------------------------------------------------------------

SQUATTER = r"""
import select, socket, struct, sys
socks = []
for pid in map(int, sys.argv[1:]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.bind("\0vramtrace.%d" % pid)
        s.listen(16)
        socks.append(s)
    except OSError:
        s.close()
print("bound", len(socks), flush=True)
forged = b"marked \x1b]0;PWNED\x07FORGED; tracing everything to /tmp/fake.vrt \x1b[2J"
while True:
    for s in select.select(socks, [], [], 60)[0]:
        c, _ = s.accept()
        try:
            c.settimeout(1)
            c.recv(65536)
            c.send(struct.pack("<IHHIi", 0x4C544356, 1, 128, len(forged), 0) + forged)
        except OSError:
            pass
        c.close()
"""


def become(uid, gid):
    """preexec_fn: the child drops to uid/gid (the suite runs as root)."""
    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return drop


class Squatter:
    """Another user's process (nobody when the suite is root, else our own uid: the pid check
    holds either way) that binds the control socket names of pids and answers every request
    with a forged reply full of terminal escapes."""

    def __init__(self, pids, uid=65534, gid=65534):
        self.uid = uid if os.geteuid() == 0 else os.geteuid()
        drop = become(uid, gid) if os.geteuid() == 0 else None
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable  # not under /root
        self.proc = subprocess.Popen([python, "-c", SQUATTER, *map(str, pids)], stdout=subprocess.PIPE,
                                     text=True, preexec_fn=drop)
        line = self.proc.stdout.readline()
        assert line.startswith("bound "), line
        self.pid = self.proc.pid

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def untraced_sleep():
    p = subprocess.Popen(["sleep", "60"])
    yield p.pid
    p.kill()
    p.wait()


def test_a_squatter_at_the_control_socket_name_is_refused_and_named(untraced_sleep):
    """Any local user can bind @vramtrace.<pid> first: mark and snapshot check who answers
    (SO_PEERCRED), refuse a process that is not <pid>, and say which process holds the name."""
    squat = Squatter([untraced_sleep])
    try:
        for args in (["mark", untraced_sleep, "x"], ["snapshot", untraced_sleep, "-o", "/tmp/vrt-never.vrt"],
                     ["attach", "--stop", untraced_sleep]):
            p = analyze(*args, check=False)
            assert p.returncode == 4 and p.stdout == "", (args, p.stdout, p.stderr)
            assert f"held by process {squat.pid} (uid {squat.uid}, python" in p.stderr, p.stderr
            assert "FORGED" not in p.stderr and "\x1b" not in p.stderr
        assert not os.path.exists("/tmp/vrt-never.vrt")
    finally:
        squat.stop()


def _ptrace_works():
    from test_attach import _ptrace_unavailable
    return _ptrace_unavailable() is None


def test_attach_injects_past_a_squatter(tmp_path):
    """The name of a process started without vramtrace taken: attach does not believe the
    squatter's "tracing everything to /tmp/fake.vrt", injects, and the injected library listens
    in a directory of its own; mark and stop reach it there."""
    if not _ptrace_works():
        pytest.skip("ptrace is not permitted here")
    out = tmp_path / "real.vrt"
    prog = subprocess.Popen([program("attach_target"), "steps"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=tmp_path)
    pid = int(prog.stdout.readline().split("=")[1])
    squat = Squatter([pid])
    try:
        p = analyze("attach", "-o", out, pid, check=False)
        assert p.returncode == 0, p.stderr
        assert re.fullmatch(rf"process {pid}: libvramtrace.so injected in [0-9.]+ s, tracing [0-9.]+ s later; "
                            rf"tracing everything to {re.escape(str(out))}\n", p.stdout), p.stdout
        assert f"@vramtrace.{pid} is held by process {squat.pid}" in p.stderr
        assert analyze("mark", pid, "past-the-squatter", check=False).stdout == \
            f'process {pid}: marked "past-the-squatter"\n'
        assert analyze("attach", "--stop", pid, check=False).returncode == 0
        for _ in range(2):  # to its end: the socket file goes with it
            prog.stdin.write("go\n")
            prog.stdin.flush()
            prog.stdout.readline()
        prog.stdin.close()
        assert prog.wait(timeout=TIMEOUT) == 0
    finally:
        squat.stop()
        if prog.poll() is None:
            prog.kill()
            prog.wait()
    assert not os.path.exists(f"/run/vramtrace/ctl.{pid}")
    assert any(r.op == "mark" for r in parse_dump(analyze("dump", out).stdout))
    assert not os.path.exists("/tmp/fake.vrt")


# Runs in a pid and network namespace of its own (unshare), so that its pids are small and known
# and its abstract socket names are nobody else's: the squatter takes the names of pids 2..64,
# among them the job's, and no process of another test can be in the way.
ARMED_PAST_SQUATTERS = r"""
import json, os, subprocess, sys
vramtrace, target, out, job_uid, squat_uid, python, squatter = sys.argv[1:8]
job_uid, squat_uid = int(job_uid), int(squat_uid)

def become(uid):
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop if uid != os.geteuid() else None

squat = subprocess.Popen([python, "-c", squatter, *map(str, range(2, 65))], stdout=subprocess.PIPE, text=True,
                         preexec_fn=become(squat_uid))
squat.stdout.readline()
run = subprocess.Popen([vramtrace, "run", "--armed", "-o", out, "--", target, "steps"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=become(job_uid))
pid = int(run.stdout.readline().split("=")[1])
client = lambda *a: subprocess.run([vramtrace, *map(str, a)], capture_output=True, text=True, timeout=60,
                                   preexec_fn=become(job_uid))
attach, mark = client("attach", pid), client("mark", pid, "armed-past-squatters")
for _ in range(2):
    run.stdin.write("go\n")
    run.stdin.flush()
    run.stdout.readline()
run.stdin.close()
status = run.wait(timeout=60)
squat.kill()
print(json.dumps({"pid": pid, "squatter": squat.pid, "status": status, "stderr": run.stderr.read(),
                  "attach": [attach.returncode, attach.stdout, attach.stderr],
                  "mark": [mark.returncode, mark.stdout, mark.stderr]}))
"""


@pytest.mark.parametrize("job_user", ["root", "nobody", "nobody, /tmp/vramtrace-65534 planted"])
def test_armed_run_keeps_a_control_socket_when_its_name_is_taken(tmp_path, job_user, request):
    """Pre-squatting the next pids' names made a root `run --armed` run without its socket and
    lose the capture. The preload says once who took the name and listens in a directory only
    its user can enter (/run/vramtrace for root, /tmp/vramtrace-<uid> otherwise); attach finds
    it there, checks it is the process, and the capture is whole."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1): the squatting happens in a pid and network namespace of its own")
    uid = 0 if job_user == "root" else 65534
    squatter_uid = 65533 if uid else 65534
    if uid:
        tmp_path = Path(tempfile.mkdtemp(prefix="vrt-nobody-"))  # pytest's tmp_path is closed to nobody
        os.chown(tmp_path, uid, uid)
        request.addfinalizer(lambda: shutil.rmtree(tmp_path, ignore_errors=True))
    planted = job_user.endswith("planted")
    if planted:  # the squatter's user made nobody's first choice first: open to all, and theirs
        shutil.rmtree("/tmp/vramtrace-65534", ignore_errors=True)
        os.mkdir("/tmp/vramtrace-65534")
        os.chown("/tmp/vramtrace-65534", 65533, 65533)
        os.chmod("/tmp/vramtrace-65534", 0o777)
        request.addfinalizer(lambda: shutil.rmtree("/tmp/vramtrace-65534", ignore_errors=True))
    out = tmp_path / "armed.vrt"
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    p = subprocess.run(["unshare", "--pid", "--net", "--fork", "--mount-proc", python, "-c", ARMED_PAST_SQUATTERS,
                        str(VRAMTRACE), program("attach_target"), str(out), str(uid), str(squatter_uid), python,
                        SQUATTER], capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    pid = got["pid"]
    assert 2 < pid < 65 and got["status"] == 0, got
    home = "/run/vramtrace" if uid == 0 else "/dev/shm/vramtrace-65534" if planted else "/tmp/vramtrace-65534"
    note = (f"vramtrace: note: @vramtrace.{pid} is held by process {got['squatter']} (uid {squatter_uid}, python3), "
            f"not by process {pid}: ignored it; process {pid} answered at {home}/ctl.{pid}\n")
    assert got["attach"] == [0, f"process {pid}: tracing everything to {out}\n", note], got["attach"]
    assert got["mark"] == [0, f'process {pid}: marked "armed-past-squatters"\n', note], got["mark"]
    taken = [line for line in got["stderr"].splitlines() if "is taken by" in line]
    assert taken == [f"vramtrace[{pid}]: the control socket name @vramtrace.{pid} is taken by process "
                     f"{got['squatter']} (uid {squatter_uid}); listening at {home}/ctl.{pid} instead"], got["stderr"]
    assert stat.S_IMODE(os.lstat(home).st_mode) == 0o700 and os.lstat(home).st_uid == uid
    assert not os.path.exists(f"{home}/ctl.{pid}")  # removed at exit
    if planted:
        assert os.listdir("/tmp/vramtrace-65534") == []  # never the planted one
    assert [r for r in parse_dump(analyze("dump", out).stdout) if r.op == "mark"]


def test_what_a_traced_process_says_back_is_printed_escaped(target):
    """A reply is text from another process: its control characters never reach the terminal."""
    label = "\x1b]0;title\x07\x1b[2Jlabel"
    p = analyze("mark", target.pid, label, check=False)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert p.stdout == f'process {target.pid}: marked "\\x1b]0;title\\x07\\x1b[2Jlabel"\n'


# ---- places no trace goes ---------------------------------------------------------------------------

@pytest.mark.parametrize("output,why", [("/dev/null", "/dev/null is a character device, not a trace file"),
                                        ("/", "/ is the root directory")])
def test_an_output_naming_a_device_or_the_root_is_refused_and_the_job_runs(tmp_path, output, why):
    """VRAMTRACE_OUTPUT=/dev/null made root create /dev/null.PID.vrt; / made /vramtrace.PID.vrt."""
    before = set(os.listdir("/dev")), set(os.listdir("/"))
    p = run_plain_prog("stress_churn", 100, 10, env={"LD_PRELOAD": str(PRELOAD), "VRAMTRACE_OUTPUT": output},
                       cwd=tmp_path)
    plain = run_plain_prog("stress_churn", 100, 10)
    assert (p.returncode, p.stdout) == (plain.returncode, plain.stdout)
    line, = preload_lines(p.stderr)
    assert line.endswith(f"disabled: not writing a trace to {output}: {why}; the program continues untraced"), line
    assert (set(os.listdir("/dev")), set(os.listdir("/"))) == before


def _owned_dir(path, uid, mode):
    path.mkdir()
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("owner,mode,refused", [
    ("self", 0o777, "is writable by other users (mode 0777) and not sticky"),
    ("nobody", 0o777, "belongs to uid 65534, who could replace the trace"),
    ("nobody", 0o1777, "belongs to uid 65534, who could replace the trace"),
    ("nobody", 0o755, "belongs to uid 65534, who could replace the trace"),
    ("self", 0o1777, None),  # like /tmp: sticky, ours
    ("self", 0o700, None),
])
def test_run_into_a_directory_another_user_can_change_is_refused(tmp_path, owner, mode, refused):
    """`run -o DIR/` took a world-writable directory owned by another user: they could rename or
    replace the trace after it was written. Sticky and owned by us (or root), it is fine."""
    if owner == "nobody" and os.geteuid() != 0:
        pytest.skip("needs root to make a directory of another user")
    d = _owned_dir(tmp_path / "d", 65534 if owner == "nobody" else os.geteuid(), mode)
    p = run_command([str(VRAMTRACE), "run", "-o", f"{d}/", "--", program("stress_churn"), "100", "10"], tmp_path,
                    clean_env())
    assert p.returncode == 0, p.stderr
    files = os.listdir(d)
    if refused is None:
        assert len(files) == 1 and files[0].endswith(".vrt"), (files, p.stderr)
        return
    assert files == []
    line, = preload_lines(p.stderr)
    assert f"disabled: not writing a trace to {d}/: {d}/ {refused}" in line, line
    assert f"vramtrace: no trace was written: {d}/ {refused}" in p.stderr, p.stderr


def test_the_default_output_names_the_path_it_could_not_create(tmp_path):
    """With VRAMTRACE_OUTPUT unset the message named an empty path ("cannot write the trace :")."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run as nobody in a directory nobody cannot write")
    ro = _owned_dir(tmp_path / "ro", 0, 0o755)
    tmp_path.chmod(0o755)
    p = subprocess.run([program("stress_churn"), "100", "10"], capture_output=True, text=True, cwd=ro, timeout=TIMEOUT,
                       env=clean_env({"LD_PRELOAD": str(PRELOAD)}), preexec_fn=become(65534, 65534))
    line, = preload_lines(p.stderr)
    assert re.search(r"disabled: cannot write the trace \./vramtrace\.\d+\.vrt: Permission denied;", line), line
