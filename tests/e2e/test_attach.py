"""`vramtrace attach`, `mark` and `snapshot` on running processes (tests/programs/attach_target.c).

Two ways in:
  - a process started with `vramtrace run --armed` answers on its control socket: attach switches
    it to full tracing with its exact live set (allocations from before are labelled, with sizes);
  - a process started without vramtrace gets libvramtrace.so injected with ptrace: allocations
    from before attach are one unattributed seed (from cuMemGetInfo), later ones have stacks, and
    `attach --stop` puts the program's own pointers back (it goes on and exits normally).

The program waits on stdin lines the test sends, so each step happens while it is parked.
"""
import ast
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (BUILD, DOUBLES, KiB, MiB, PROGRAM_SOURCES, PROGRAMS, TIMEOUT, VRAMTRACE, Traced, analyze,
                      build_fake_c10, clean_env, frame_functions, program)
from replay import dumped
from test_live_set_agreement import checkpoints

BEFORE_TRACING = "[allocated before tracing started]"
BEFORE_ATTACH = "[allocated before attach, unattributed]"
LOOP_BYTES = 64 * KiB


# ---- the program ----------------------------------------------------------------------------

def _toolkit_include():
    try:
        options = json.loads((BUILD / "meson-info" / "intro-buildoptions.json").read_text())
        return next(o["value"] for o in options if o["name"] == "toolkit_include")
    except (OSError, StopIteration, ValueError):
        return "/usr/local/cuda/include"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """attach_target, built by meson when tests/meson.build lists it, else here with gcc, the
    same way: against the runtime double, -O0 with frame pointers and exported symbols."""
    built = PROGRAMS / "attach_target"
    if built.exists():
        return str(built)
    out = tmp_path_factory.mktemp("attach_target") / "attach_target"
    cmd = ["gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-rdynamic", f"-I{_toolkit_include()}",
           f"-I{PROGRAM_SOURCES}", "-o", str(out), str(PROGRAM_SOURCES / "attach_target.c"),
           f"-L{DOUBLES}", "-l:libcudart.so.13", "-ldl", f"-Wl,-rpath,{DOUBLES}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"cannot build attach_target:\n{p.stderr}"
    return str(out)


class Running:
    """A started program driven line by line; its pid is the one it reports ("ready pid=N")."""

    def __init__(self, argv, cwd, env=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=clean_env(env), cwd=cwd)
        ready = self.line()
        m = re.fullmatch(r"ready pid=(\d+)", ready)
        assert m, f"unexpected first line {ready!r}: {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.pid = int(m[1])

    def line(self):
        text = self.proc.stdout.readline()
        assert text, f"the program ended early (exit {self.proc.poll()})"
        return text.rstrip("\n")

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.line()

    def running(self):
        return self.proc.poll() is None

    def finish(self, command="stop"):
        last = self.send(command)
        rest, err = self.proc.communicate(timeout=TIMEOUT)
        return last, rest, err, self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def vramtrace(*args, check=True):
    return analyze(*args, check=check)


# ---- armed -> attach (no ptrace) -------------------------------------------------------------

@pytest.fixture(scope="module")
def armed(tmp_path_factory, target):
    """run --armed; attach; the program allocates c and frees a; mark and snapshot from outside
    while it runs; attach --stop; the program finishes."""
    tmp = tmp_path_factory.mktemp("armed")
    out, snap = tmp / "armed.vrt", tmp / "snap.vrt"
    prog = Running([str(VRAMTRACE), "run", "--armed", "-q", "-o", str(out), "--", target, "steps"], tmp)
    try:
        steps = {"mark_while_armed": vramtrace("mark", prog.pid, "too-early", check=False),
                 "attach": vramtrace("attach", prog.pid)}
        steps["late"] = prog.send("go")
        steps["mark"] = vramtrace("mark", prog.proc.pid, "after-late")  # the launcher's pid: redirected
        steps["snapshot"] = subprocess.run(  # a relative path, made absolute in our cwd
            [str(VRAMTRACE), "snapshot", str(prog.pid), "-o", "snap.vrt"], capture_output=True, text=True,
            timeout=TIMEOUT, cwd=tmp)
        steps["running_after_snapshot"] = prog.running()
        steps["stop"] = vramtrace("attach", "--stop", prog.pid)
        steps["end"] = prog.finish("go")
    finally:
        prog.kill()
    return steps, Traced([target, "steps"], out, steps["end"][3], "", ""), Traced([], snap, 0, "", "")


def test_armed_attach_switches_to_full_tracing(armed):
    steps, t, _ = armed
    assert "tracing everything to" in steps["attach"].stdout
    assert steps["late"] == "late done"
    assert steps["end"][0] == "bye" and steps["end"][3] == 0, steps["end"]


def test_armed_attach_exact_live_bytes_with_labels_and_stacks(armed):
    _, t, _ = armed
    assert t.totals()[(0, "device")][1] == 6 * MiB  # b (before) + c (after); a freed after attach
    before = [s for s in t.live_sites() if frame_functions(s) == [BEFORE_TRACING]]
    assert [(s["bytes"], s["count"]) for s in before] == [(2 * MiB, 1)]
    late = t.site("late_site")
    assert (late["bytes"], late["count"]) == (4 * MiB, 1)
    assert frame_functions(late)[0] == "late_site"


def test_armed_attach_free_of_an_early_allocation_is_recorded(armed):
    _, t, _ = armed
    assert [r["size"] for r in t.events("free", "cudaFree")] == [1 * MiB]
    assert [r["size"] for r in t.events("alloc", "cudaMalloc")] == [4 * MiB]


def test_mark_from_outside_is_in_the_dump(armed):
    steps, t, _ = armed
    assert 'marked "after-late"' in steps["mark"].stdout
    assert "is `vramtrace run`; using the program it runs" in steps["mark"].stderr
    assert re.search(r"\bmark\b.*after-late", t.dump_text), t.dump_text


def test_mark_while_armed_is_refused(armed):
    steps, _, _ = armed
    p = steps["mark_while_armed"]
    assert p.returncode != 0 and "not recording" in p.stderr and "vramtrace attach" in p.stderr


def test_snapshot_is_readable_while_the_process_runs(armed):
    steps, _, snap = armed
    assert steps["snapshot"].returncode == 0, steps["snapshot"].stderr
    assert str(snap.trace) in steps["snapshot"].stdout, "the relative path was made absolute in our cwd"
    assert steps["running_after_snapshot"]
    assert snap.totals()[(0, "device")][1] == 6 * MiB


def test_stop_closes_the_trace_as_detached(armed):
    steps, t, _ = armed
    assert "tracing stopped" in steps["stop"].stdout
    assert t.info["end_code"] == 6, t.info  # VRT_END_DETACHED


# ---- errors -----------------------------------------------------------------------------------

def _free_pid():
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_no_such_process():
    p = vramtrace("attach", _free_pid(), check=False)
    assert p.returncode == 4 and "no process" in p.stderr


def test_mark_and_snapshot_on_an_untraced_process(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"], env=clean_env())
    try:
        for args in (("mark", sleeper.pid, "x"), ("snapshot", sleeper.pid, "-o", tmp_path / "s.vrt")):
            p = vramtrace(*args, check=False)
            assert p.returncode != 0
            assert f"is not traced: run `vramtrace attach {sleeper.pid}` first" in p.stderr, p.stderr
        p = vramtrace("attach", "--stop", sleeper.pid, check=False)
        assert p.returncode != 0 and "not traced" in p.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


def test_usage_errors():
    assert vramtrace("attach", check=False).returncode == 2
    assert vramtrace("attach", "--stop", "--armed", "1", check=False).returncode == 2
    assert vramtrace("mark", "1", check=False).returncode == 2
    assert vramtrace("snapshot", "1", check=False).returncode == 2


# ---- injection with ptrace --------------------------------------------------------------------

def _ptrace_unavailable():
    """Why this environment cannot ptrace a sibling process, or None."""
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        scope = 0
    caps = next((int(line.split()[1], 16) for line in Path("/proc/self/status").read_text().splitlines()
                 if line.startswith("CapEff:")), 0)
    if scope >= 1 and not caps >> 19 & 1:
        return f"kernel.yama.ptrace_scope={scope} without CAP_SYS_PTRACE: vramtrace may not ptrace a sibling"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    child = subprocess.Popen(["sleep", "30"])
    try:
        if libc.ptrace(16, child.pid, None, None) != 0:  # PTRACE_ATTACH
            return f"PTRACE_ATTACH on a child failed: {os.strerror(ctypes.get_errno())}"
        os.waitpid(child.pid, 0)
        libc.ptrace(17, child.pid, None, None)  # PTRACE_DETACH
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return None


@pytest.fixture(scope="module")
def injected(tmp_path_factory, target):
    """The loop program started without vramtrace; attach injects; it keeps allocating; pause;
    mark; attach --stop; it resumes and stops by itself."""
    why = _ptrace_unavailable()
    if why:
        pytest.skip(f"ptrace is not permitted here: {why}")
    tmp = tmp_path_factory.mktemp("injected")
    out = tmp / "inject.vrt"
    prog = Running([target, "loop"], tmp)
    try:
        time.sleep(0.2)  # some allocations before attach
        steps = {"attach": vramtrace("attach", "-o", out, prog.pid, check=False)}
        steps["where_attached"] = prog.send("where")
        time.sleep(0.3)  # recorded allocations
        steps["paused"] = prog.send("pause")
        steps["mark"] = vramtrace("mark", prog.pid, "while-attached", check=False)
        steps["stop"] = vramtrace("attach", "--stop", prog.pid, check=False)
        steps["where_after"] = prog.send("where")
        steps["reattach"] = vramtrace("attach", prog.pid, check=False)
        steps["mark_after_stop"] = vramtrace("mark", prog.pid, "late", check=False)
        steps["resumed"] = prog.send("resume")
        time.sleep(0.1)
        steps["end"] = prog.finish("stop")
    finally:
        prog.kill()
    return steps, Traced([target, "loop"], out, steps["end"][3], "", "")


def test_inject_borrows_a_thread_waiting_in_sigsuspend(tmp_path, target):
    """A program whose only thread waits in sigsuspend(2) is attached to (ux audit 77: "no
    thread waited in a system call where it is safe to borrow it" after 10 s); the wait goes on
    after the attach, and what the program allocates when its signal comes is in the trace."""
    why = _ptrace_unavailable()
    if why:
        pytest.skip(f"ptrace is not permitted here: {why}")
    out = tmp_path / "suspend.vrt"
    prog = Running([target, "suspend"], tmp_path)
    try:
        p = vramtrace("attach", "-o", out, prog.pid, check=False)
        assert p.returncode == 0 and "injected" in p.stdout, p.stderr
        assert prog.running()
        os.kill(prog.pid, signal.SIGUSR1)
        assert prog.line() == "late done"
        assert prog.proc.wait(timeout=TIMEOUT) == 0
    finally:
        prog.kill()
    t = Traced([target, "suspend"], out, 0, "", "")
    assert [r["size"] for r in t.events("alloc", "cudaMalloc")] == [4 << 20]


def _count(line, key="n"):
    return int(re.search(rf"\b{key}=(\d+)", line)[1])


def test_inject_attaches(injected):
    steps, _ = injected
    assert steps["attach"].returncode == 0, steps["attach"].stderr
    assert "injected" in steps["attach"].stdout
    assert steps["where_attached"].startswith("where libvramtrace.so "), "the program's own pointer is hooked"


def test_inject_stop_restores_the_program(injected):
    steps, _ = injected
    assert steps["stop"].returncode == 0, steps["stop"].stderr
    assert "restored" in steps["stop"].stdout
    assert steps["where_after"].startswith("where libcudart.so.13 "), "the pointer is the runtime's again"
    last, rest, err, code = steps["end"]
    assert code == 0 and re.fullmatch(r"loop: \d+ allocations", last), steps["end"]
    assert rest == "" and err == "", "nothing from vramtrace in the program's output"


def test_inject_refuses_a_second_trace_after_stop(injected):
    steps, _ = injected
    p = steps["reattach"]
    assert p.returncode != 0 and "is closed" in p.stderr, p.stderr
    # and a mark says so, not "run `vramtrace attach` first", which would be refused
    p = steps["mark_after_stop"]
    assert p.returncode != 0 and "tracing was stopped" in p.stderr and "attach" not in p.stderr, p.stderr


def test_inject_records_later_allocations_with_stacks(injected):
    _, t = injected
    allocs = t.events("alloc", "cudaMalloc")
    assert allocs and {r["size"] for r in allocs} == {LOOP_BYTES}
    site = t.site("loop_site")
    assert frame_functions(site)[:2] == ["loop_site", "loop"]
    # Once (a full suite at 30a0243, not seen again in 20 runs of this file) 33 of 34: say which.
    others = [(r.text, t.stack_of(r)) for r in allocs if r["stack"] != allocs[-1]["stack"]]
    assert site["count"] == len(allocs), (others, t.report_text)


def _recorded_before_full_tracing(t):
    """The allocations the preload recorded while it came up, before full tracing began: no
    events of the trace, the first checkpoint restates them (its items made by an ALLOC)."""
    _, records = dumped(str(VRAMTRACE), str(t.trace))
    first = checkpoints(records)[0][3]
    return [r for r in first if r.api == "cudaMalloc" and r["made"] == "alloc"]


def test_inject_seed_covers_everything_from_before_exactly(injected):
    """Nothing is freed: live at the end = 3 MiB + n * 64 KiB, n counted by the program at the
    pause, split between the seed (one unattributed figure) and recorded allocations: events,
    and any the program made while the preload came up (a race: they are in the first
    checkpoint, and the seed does not count them twice)."""
    steps, t = injected
    n = _count(steps["paused"])
    assert t.totals()[(0, "device")][1] == 3 * MiB + n * LOOP_BYTES
    seed = [s for s in t.live_sites() if frame_functions(s) == [BEFORE_ATTACH]]
    assert len(seed) == 1 and seed[0]["count"] == 1
    recorded = len(t.events("alloc", "cudaMalloc")) + len(_recorded_before_full_tracing(t))
    assert seed[0]["bytes"] == 3 * MiB + (n - recorded) * LOOP_BYTES
    assert [r.op for r in t.events("seed")] == ["seed"]
    text = analyze("report", t.trace).stdout  # the figure says what it is, under the list that shows it
    assert BEFORE_ATTACH in text and "did not hold - the CUDA context" in text.split(BEFORE_ATTACH, 1)[1]


def test_inject_mark_and_end(injected):
    steps, t = injected
    assert steps["mark"].returncode == 0, steps["mark"].stderr
    assert re.search(r"\bmark\b.*while-attached", t.dump_text)
    assert t.info["end_code"] == 6, t.info  # VRT_END_DETACHED


def test_leaks_of_an_attached_job_names_the_growing_site_and_its_rate(injected):
    """No phases in an attached job: the site that keeps what it allocates is the growing one,
    by exactly what it allocated between the first low point and the last."""
    _, t = injected
    d = json.loads(analyze("leaks", "--json", "-q", t.trace).stdout)
    top = d["growing"][0]
    assert frame_functions(top)[:2] == ["loop_site", "loop"]
    assert top["still_rising"] and top["bytes"] == LOOP_BYTES * top["allocations_in_window"] > 0
    assert top["bytes_per_second"] > 0 and d["window_s"] > 0
    assert top["bytes_per_step"] in (None, LOOP_BYTES)
    assert re.fullmatch(r"\+64\.0 KiB per step \(\d+ steps, one every \d+ ms; \+[\d.]+ [KM]iB/s\): 100% from "
                        r"loop_site \(attach_target\)|\+[\d.]+ [KM]iB over (\d+ ms|[\d.]+ s) \(\+[\d.]+ [KM]iB/s\): 100% from loop_site "
                        r"\(attach_target\)", d["summary"]), d["summary"]
    assert BEFORE_ATTACH not in json.dumps(d["growing"])  # the seed is not growth


def test_an_attached_python_job_ends_where_its_teardown_began(tmp_path):
    """Attached to an untraced Python job that keeps a buffer per step until it exits: the
    interpreter's teardown frees them all, and the analysis must end where teardown began (the
    preload asks the attached interpreter to say so), naming the growing line."""
    why = _ptrace_unavailable()
    if why:
        pytest.skip(f"ptrace is not permitted here: {why}")
    script = PROGRAM_SOURCES / "attach_grow.py"
    job = subprocess.Popen([sys.executable, str(script), program("libpyalloc_lib.so")], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    out = tmp_path / "grow.vrt"
    try:
        pid, word = job.stdout.readline().split()
        assert word == "ready"
        attached = vramtrace("attach", "-o", out, pid, check=False)
        assert attached.returncode == 0, attached.stderr
        time.sleep(0.5)
    finally:
        job.stdin.close()
        kept = job.stdout.read()
        job.wait(timeout=TIMEOUT)
    assert job.returncode == 0 and kept.startswith("kept "), kept
    t = Traced([sys.executable, script], out, 0, "", "")
    assert len(t.events("exiting")) == 1
    d = json.loads(analyze("leaks", "--json", "-q", out).stdout)
    assert d["teardown_s"] is not None
    line = next(n for n, text in enumerate(script.read_text().splitlines(), 1) if "the growing line" in text)
    top = d["growing"][0]
    assert [(f["function"], f["line"]) for f in top["frames"] if f.get("function") == "step"] == [("step", line)]
    assert top["still_rising"] and top["bytes"] == MiB * top["allocations_in_window"] > 0
    assert "100%% from step (attach_grow.py:%d)" % line in d["summary"], d["summary"]


def test_watch_names_the_growing_site_of_a_running_process(tmp_path, target):
    """`vramtrace watch` on a traced process that keeps 64 KiB every 10 ms (the loop program):
    each look's growth is whole allocations of loop_site, rising from look to look, and the
    process goes on (it then stops by itself)."""
    run = [str(VRAMTRACE), "run", "-q", "-o", str(tmp_path / "w.vrt")]
    prog = Running(run + ["--", target, "loop"], tmp_path)
    try:
        scratch = tmp_path / "tmp"
        scratch.mkdir()
        p = subprocess.run([str(VRAMTRACE), "watch", "--interval", "0.3", "--count", "3", "--json", str(prog.pid)],
                           capture_output=True, text=True, timeout=TIMEOUT, env=dict(os.environ, TMPDIR=str(scratch)))
        assert p.returncode == 0, p.stderr
        looks = [json.loads(line) for line in p.stdout.splitlines()]
        assert prog.running()
        last, _, _, code = prog.finish("stop")
    finally:
        prog.kill()
    assert code == 0 and re.fullmatch(r"loop: \d+ allocations", last)
    assert len(looks) == 3 and all(look["pid"] == prog.pid for look in looks)
    assert looks[0]["since_first_bytes"] == 0 and looks[0]["growing"] == []
    grown = []
    for look in looks[1:]:
        top = look["growing"][0]
        assert top["site"] == "loop_site (attach_target)", look
        assert top["since_first_bytes"] % LOOP_BYTES == 0 and top["since_first_bytes"] > 0
        assert look["since_first_bytes"] == top["since_first_bytes"]  # nothing else grows
        grown.append(top["since_first_bytes"])
    assert grown[1] > grown[0]
    assert not list(scratch.iterdir())  # the snapshots and their directory are gone


def test_watch_of_an_armed_process_says_to_attach_first(tmp_path, target):
    prog = Running([str(VRAMTRACE), "run", "-q", "--armed", "-o", str(tmp_path / "a.vrt"), "--", target, "loop"],
                   tmp_path)
    try:
        p = vramtrace("watch", "--interval", "0.2", "--count", "2", prog.pid, check=False)
        assert prog.running()
    finally:
        prog.finish("stop")
        prog.kill()
    assert p.returncode == 4 and "armed, not recording: run `vramtrace attach` first" in p.stderr, p.stderr
    assert p.stdout == "", p.stdout  # no banner for a watch that never began


# ---- what the driver counts beside what the trace sees (docs/ux-audit.md #72) ----------------

def _watch_across_a_big_allocation(tmp_path, target, mode, text=False, nvml_for_target=True):
    """attach_target MODE started without vramtrace and attached to, its small allocations
    paused; `watch` (with the NVML double, which reads what the driver double counts) looks,
    the program allocates 100 MiB (big_site), watch looks again. Returns watch's stdout lines."""
    why = _ptrace_unavailable()
    if why:
        pytest.skip(f"ptrace is not permitted here: {why}")
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    (nvml / "1").write_text(f"{5 << 30}\n")  # another process on the device, 5 GiB
    prog = Running([target, mode], tmp_path, {"FAKE_NVML_DIR": str(nvml)} if nvml_for_target else None)
    try:
        vramtrace("attach", "-o", tmp_path / "w.vrt", prog.pid)
        assert prog.send("pause").startswith("paused")
        # the second look 1.5 s after the first: "big" (an answer within ~20 ms) lands between
        watch = subprocess.Popen([str(VRAMTRACE), "watch", "--interval", "1.5", "--count", "2",
                                  *([] if text else ["--json"]), str(prog.pid)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=dict(clean_env(), LD_LIBRARY_PATH=str(DOUBLES), FAKE_NVML_DIR=str(nvml)))
        lines = []
        while not lines or (text and " live " not in lines[-1]):  # the first look
            line = watch.stdout.readline()
            assert line, watch.stderr.read()
            lines.append(line.rstrip("\n"))
        assert prog.send("big") == "big done"
        rest = watch.stdout.read()  # not communicate(): it would skip what readline buffered
        assert watch.wait(timeout=TIMEOUT) == 0, watch.stderr.read()
        prog.finish("stop")
    finally:
        prog.kill()
    return lines + rest.splitlines()


def test_watch_shows_what_the_driver_counts_and_the_trace_did_not_see(tmp_path, target):
    """The attach's blind spot: a program allocating through the cudaMalloc dlsym gave it before
    the attach. The trace sees none of its 100 MiB; the driver counts all of it, and watch says
    how much grew unseen."""
    first, second = [json.loads(line) for line in _watch_across_a_big_allocation(tmp_path, target, "lookedup")]
    # the program's 3 MiB and its loop's 64 KiB allocations; not the other process's 5 GiB
    assert 3 * MiB <= first["driver_bytes"] < 1 << 30 and first["unseen_since_first_bytes"] == 0, first
    assert second["driver_since_first_bytes"] == 100 * MiB, second
    assert second["traced_cuda_since_first_bytes"] == 0 and second["since_first_bytes"] == 0, second
    assert second["unseen_since_first_bytes"] == 100 * MiB, second


def test_watch_sees_nothing_unseen_where_the_trace_saw_it_all(tmp_path, target):
    """The same program allocating through its own call (the GOT the attach redirects): the
    driver's growth and the trace's are the same 100 MiB."""
    first, second = [json.loads(line) for line in _watch_across_a_big_allocation(tmp_path, target, "loop")]
    assert second["driver_since_first_bytes"] == 100 * MiB, second
    assert second["traced_cuda_since_first_bytes"] == 100 * MiB, second
    assert second["unseen_since_first_bytes"] == 0, second
    assert second["growing"][0]["site"] == "big_site (attach_target)", second


def test_watch_text_says_what_grew_unseen_and_without_a_driver_figure_says_so(tmp_path, target):
    (tmp_path / "a").mkdir()
    lines = _watch_across_a_big_allocation(tmp_path / "a", target, "lookedup", text=True)
    driver = [line.strip() for line in lines if line.strip().startswith("driver:")]
    assert len(driver) == 2 and driver[1].endswith("(+100 MiB since the first look)"), lines
    assert any(line.strip().startswith("! 100 MiB of that growth is not in the trace") for line in lines), lines
    (tmp_path / "b").mkdir()
    lines = _watch_across_a_big_allocation(tmp_path / "b", target, "loop", text=True)
    assert not any(line.strip().startswith("!") for line in lines), lines
    (tmp_path / "c").mkdir()  # the driver (its double) lists no such process: no figure, one line says why
    lines = _watch_across_a_big_allocation(tmp_path / "c", target, "loop", text=True, nvml_for_target=False)
    assert any(line.startswith("(the driver lists no process ") for line in lines), lines
    assert not any(line.strip().startswith(("driver:", "!")) for line in lines), lines


def test_watch_usage_errors():
    for args, words in ((["watch"], "expected a process id"), (["watch", "--interval", "0", "1"], "at least 0.05"),
                        (["watch", "--count", "x", "1"], "--count"), (["watch", "abc"], "not a process id")):
        p = vramtrace(*args, check=False)
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)


# ---- an attached PyTorch job: what its allocator held before (issue 19, item 3) ---------------

SEGMENT_BEFORE = "[PyTorch allocator segment, allocated before attach]"
TENSOR_BEFORE = "[tensor allocated before attach]"
SNAPSHOT_API = "torch.memory_snapshot"


@pytest.fixture(scope="module")
def fake_c10(tmp_path_factory):
    return build_fake_c10(tmp_path_factory.mktemp("fake_c10"))


def _torch_job(tmp_path, mode, env=None, commands=("free-D",)):
    """tests/programs/torch_seed_job.py (its docstring says what it holds) started without
    vramtrace, attached to; once the attach's snapshot is done it runs commands (torch modes),
    then ends. Returns the segments' addresses and the trace."""
    why = _ptrace_unavailable()
    if why:
        pytest.skip(f"ptrace is not permitted here: {why}")
    script = PROGRAM_SOURCES / "torch_seed_job.py"
    out = tmp_path / f"{mode}.vrt"
    job = Running([sys.executable, str(script), program("libpyalloc_lib.so"), mode], tmp_path, env)
    try:
        attached = vramtrace("attach", "-o", out, job.pid, check=False)
        assert attached.returncode == 0, attached.stderr
        m = re.fullmatch(r"attached hooked=1 snapshots=(\d+) segments=(.*)", job.send("attached"))
        assert m, "the attach's pending calls did not run"
        for command in commands if mode.startswith("torch") else ():
            assert job.send(command) == f"{command} done"
        last, _, err, code = job.finish("stop")
    finally:
        job.kill()
    assert (last, code) == ("bye", 0), err
    segments = {k: int(v, 16) for k, v in ast.literal_eval(m[2]).items()}
    return int(m[1]), segments, Traced([sys.executable, script], out, code, "", err)


@pytest.fixture(scope="module")
def torch_job(tmp_path_factory, fake_c10):
    """With the tensor layer attached to the fake libc10_cuda; a1 and D are freed after the attach."""
    return _torch_job(tmp_path_factory.mktemp("torch_job"), "torch", {"FAKETORCH_C10": fake_c10},
                      ("free-a1", "free-D"))


def _labelled(t, label):
    return [s for s in t.live_sites() if frame_functions(s) == [label]]


def test_torch_seed_takes_each_segment_out_of_the_unattributed_seed(torch_job):
    """The seed starts as every byte from before (A 4 + B 2 + D 2 + E 1 + F 1 + X 3 MiB) and
    loses each snapshot segment's bytes as it is seeded, down to X and F: what no one can name,
    and an expandable segment (VMM mappings: a SEED could not be ended by their release). E,
    released after the snapshot was built and before its records were taken, is not seeded, but
    its bytes leave the seed all the same: they were in it. C, allocated after the attach, was
    never in it."""
    snapshots, seg, t = torch_job
    assert snapshots == 1
    assert [r["size"] for r in t.events("seed", "unknown")] == [13 * MiB, 9 * MiB, 7 * MiB, 5 * MiB, 4 * MiB]
    assert {r["addr"] for r in t.events("seed", "unknown")} == {0xfffe000000000000}
    seed = _labelled(t, BEFORE_ATTACH)
    assert [(s["bytes"], s["count"]) for s in seed] == [(4 * MiB, 1)]
    seeded = [r["addr"] for r in t.events("seed", SNAPSHOT_API)]
    assert seeded == [seg["A"], seg["B"], seg["D"]]
    assert [r["size"] for r in t.events("seed", SNAPSHOT_API)] == [4 * MiB, 2 * MiB, 2 * MiB]


def test_torch_seed_makes_the_tensors_from_before_live_blocks(torch_job):
    """a1, b1 and f1 (in the expandable segment) are tensors at the attach, with their block and
    requested sizes (and b1, recorded with history, where Python allocated it); a2, freed before the attach and only waiting on its stream, is not (no event
    would ever end it), nor a3, freed after the snapshot was built and before its records were
    taken; c1, handed out after the attach, is the tensor layer's own record, not a seed."""
    _, seg, t = torch_job
    blocks = t.events("block_alloc", SNAPSHOT_API)
    assert [(r["addr"], r["size"], r["aux"]) for r in blocks] == [
        (seg["A"], MiB, MiB - 24), (seg["B"], 2 * MiB, 2 * MiB - 100), (seg["F"], 256 * KiB, 256 * KiB)]
    traced = t.events("block_alloc", "torch.CUDACachingAllocator")
    assert [(r["addr"], r["size"]) for r in traced] == [(seg["C"], 256 * KiB)]
    assert [(s["bytes"], s["count"]) for s in _labelled(t, TENSOR_BEFORE)] == [(256 * KiB, 1)]  # f1; a1 freed since
    b1 = _labelled(t, TENSOR_BEFORE + " at /srv/train.py:42 in make_batch")  # its innermost Python frame
    assert [(s["bytes"], s["count"]) for s in b1] == [(2 * MiB, 1)]
    assert t.report["tensors"][0]["live_bytes_at_end"] == 2 * MiB + 512 * KiB, t.report["tensors"]


def test_torch_seed_frees_after_the_attach_are_known_frees(torch_job):
    """a1's free (the tensor layer's) and D's cudaFree after the attach end what was seeded, with
    its size and allocating stack (not unknown frees); A and B stay, labelled."""
    _, seg, t = torch_job
    block_frees = {r["addr"]: r for r in t.events("block_free", "torch.CUDACachingAllocator")}
    assert block_frees[seg["A"]]["size"] == MiB and block_frees[seg["A"]].get("alloc_stack")
    assert not block_frees[seg["A"] + 2 * MiB].get("alloc_stack"), "a3 was freed before its seed was taken"
    frees = {r["addr"]: r for r in t.events("free", "cudaFree")}
    assert frees[seg["D"]]["size"] == 2 * MiB and frees[seg["D"]].get("alloc_stack")
    assert frees[seg["E"]]["size"] == 0, "E was freed before its seed was taken: unknown then"
    # A and B stay PyTorch's allocator's: what no tensor holds in them is its cache, as with any
    # segment the allocator made (no site of their own: the cache pseudo-site holds it)
    assert not _labelled(t, SEGMENT_BEFORE)
    cache = [s for s in t.live_sites() if frame_functions(s)[0].startswith("[PyTorch allocator cache")]
    assert [s["bytes"] for s in cache] == [6 * MiB - 2 * MiB - 512 * KiB]


def test_torch_seed_without_the_tensor_layer_seeds_segments_only(tmp_path):
    """No tracker on PyTorch's allocator (no libc10_cuda it can attach to): a block seeded then
    would never see its free, so none is; the segments are seeded as with it."""
    _, seg, t = _torch_job(tmp_path, "torch")
    assert not t.events("block_alloc") and "tensors" not in t.report_text
    assert [r["addr"] for r in t.events("seed", SNAPSHOT_API)] == [seg["A"], seg["B"], seg["D"]]
    assert [(s["bytes"], s["count"]) for s in _labelled(t, BEFORE_ATTACH)] == [(4 * MiB, 1)]


def test_torch_seed_never_counts_a_traced_segment_twice(torch_job):
    """C, allocated after the attach (traced, with its stack) and listed by the snapshot, is
    counted once; the device totals are exact at the peak (13 MiB before + C) and at the end
    (A + B + C + F + X), with no moment where a seeded segment and the seed both hold its bytes."""
    _, seg, t = torch_job
    c = t.site("Segment.__init__")
    assert (c["bytes"], c["count"]) == (MiB, 1) and "make_c" in frame_functions(c)
    assert seg["C"] not in {r["addr"] for r in t.events("seed")}
    assert t.totals()[(0, "device")] == (14 * MiB, 11 * MiB)


def test_torch_seed_gives_back_a_segment_its_traced_allocation_replaces(tmp_path):
    """C allocated on another thread as the snapshot begins: its allocation, stamped after the
    snapshot began, reaches the collector after the snapshot's records (one drain: a long flush
    interval), so C is seeded first and then replaced; the seed takes C's bytes back."""
    _, seg, t = _torch_job(tmp_path, "torch-reorder", {"VRAMTRACE_FLUSH_MS": "10000"})
    assert [(s["bytes"], s["count"]) for s in _labelled(t, BEFORE_ATTACH)] == [(3 * MiB, 1)]
    c = t.site("make_c")
    assert (c["bytes"], c["count"]) == (MiB, 1)
    # no tensor layer in this job: sites are CUDA allocations, the seeded segments among them
    assert [(s["bytes"], s["count"]) for s in _labelled(t, SEGMENT_BEFORE)] == [(6 * MiB, 2)]
    assert t.totals()[(0, "device")] == (12 * MiB, 10 * MiB)


def test_torch_seed_ends_the_unattributed_seed_when_the_allocator_holds_everything(tmp_path):
    """Without X every byte from before is PyTorch's: the seed shrinks to nothing and is freed,
    so no unattributed site is left."""
    _, _, t = _torch_job(tmp_path, "torch-only")
    assert [r["size"] for r in t.events("seed", "unknown")] == [9 * MiB, 5 * MiB, 3 * MiB, MiB]
    ended = [r for r in t.events("free") if r["addr"] == 0xfffe000000000000]
    assert [r["size"] for r in ended] == [MiB]
    assert not _labelled(t, BEFORE_ATTACH)
    assert t.totals()[(0, "device")] == (10 * MiB, 7 * MiB)


@pytest.mark.parametrize("mode", ["none", "uninitialized"])
def test_torch_seed_without_an_initialized_torch_seeds_as_before(tmp_path, mode):
    """No torch in sys.modules, or CUDA never initialized in it: one unattributed seed of every
    byte from before, and no snapshot is asked for."""
    snapshots, _, t = _torch_job(tmp_path, mode)
    assert snapshots == 0
    assert [r["size"] for r in t.events("seed")] == [3 * MiB]
    assert not [r for r in t.records if r.api == SNAPSHOT_API]
    assert [(s["bytes"], s["count"]) for s in _labelled(t, BEFORE_ATTACH)] == [(3 * MiB, 1)]


def test_torch_seed_survives_a_snapshot_that_raises(tmp_path, fake_c10):
    """_snapshot() raising (and memory_snapshot(), which calls it): the error does not reach the
    program, which goes on (a pending call that failed would raise in it), and the seed is as
    without PyTorch's help."""
    snapshots, _, t = _torch_job(tmp_path, "torch-raises", {"FAKETORCH_C10": fake_c10})
    assert snapshots == 2  # _snapshot, then memory_snapshot
    assert "Traceback" not in t.stderr and "RuntimeError" not in t.stderr, t.stderr
    assert [r["size"] for r in t.events("seed")] == [11 * MiB]
    assert not [r for r in t.records if r.api == SNAPSHOT_API]


def test_torch_seed_takes_only_what_is_well_formed(tmp_path, fake_c10):
    """Segments without a device, address and size that are integers in range, or that wrap
    around the address space, are skipped, and so are blocks outside their segment or of no
    integer size, and blocks that are not a list: of the hostile answer B and b1 are taken, and
    the one well-formed segment with no list of blocks."""
    _, seg, t = _torch_job(tmp_path, "torch-hostile", {"FAKETORCH_C10": fake_c10})
    assert "Traceback" not in t.stderr, t.stderr
    seeded = [(r.device, r["addr"], r["size"]) for r in t.events("seed", SNAPSHOT_API)]
    assert seeded == [(0, seg["B"], 2 * MiB), (0, 1 << 40, MiB)]
    blocks = [(r["addr"], r["size"]) for r in t.events("block_alloc", SNAPSHOT_API)]
    assert blocks == [(seg["B"], 2 * MiB)]


def test_torch_seed_is_told_apart_in_the_categories(torch_job):
    """The seeded segments are PyTorch's allocator's (what no tensor holds in them is its cache,
    not memory outside PyTorch); a seeded tensor with no frame to go by is 'unattributed', not a
    CUDA allocation outside PyTorch."""
    _, seg, t = torch_job
    cats = {c["name"]: c["bytes"] for c in t.report["categories_at_end"]}
    # A and B (6 MiB) less b1 (2 MiB) and the 512 KiB that A's freed a1 and a3 left: the cache
    assert cats["allocator_cache"] == 6 * MiB - 2 * MiB - 512 * KiB
    # the unattributed seed (X 3 + F 1 MiB), b1 and f1 (seeded tensors)
    assert cats["unattributed"] == 4 * MiB + 2 * MiB + 256 * KiB
    assert cats["non_pytorch"] == 1 * MiB  # C's segment, which the stand-in allocates itself


ARMED_PYTHON = """
import ctypes, os, sys
rt = ctypes.CDLL(os.environ["CUDART"])
print(f"ready pid={os.getpid()}", flush=True)
sys.stdin.readline()
ptr = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(ptr), 1 << 20) == 0
print("done", flush=True)
"""


def test_an_attached_python_jobs_trace_has_the_facts_it_recorded_while_armed(tmp_path):
    """The facts an armed job recorded at its start (its bootstrap's python.library_paths, which
    tell its own code from libraries) are kept, and the trace an attach starts has them."""
    out = tmp_path / "armed.vrt"
    prog = Running([str(VRAMTRACE), "run", "-q", "--armed", "-o", str(out), "--", sys.executable, "-c", ARMED_PYTHON],
                   tmp_path, env={"CUDART": str(DOUBLES / "libcudart.so.13")})
    try:
        p = vramtrace("attach", prog.pid, check=False)
        assert p.returncode == 0, p.stderr
        assert prog.send("go") == "done"
        assert prog.proc.wait(timeout=TIMEOUT) == 0
    finally:
        prog.kill()
    dump = analyze("dump", "-q", out).stdout
    assert "# python.library_paths = " in dump and " alloc " in dump, dump[:3000]
