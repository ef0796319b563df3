"""Why memory survives where a program's own objects do not name it, with the cyclic GC off:
tests/programs/retain_elsewhere.py keeps a buffer a call through signal handlers (a named and a
real-time signal), a context variable, a __slots__ attribute, a reference cycle, an atexit
callback, an asyncio task's coroutine, an itertools.cycle's iterator, a WeakKeyDictionary's value,
an unstarted generator expression's iterable, a dict's key and the local of the loop that calls
train();
tests/programs/retry_in_except.py retries inside the except block.
The retention walks must change nothing (a buffer the next call replaces is freed then, traced or
not; nothing printed at teardown), name each holder, and tell memory kept until the next call
from memory that grows every call. Run by this interpreter, and again by every CPython here.
"""
import json
import signal
import sys

import pytest

from conftest import CUDART, PROGRAM_SOURCES, SOURCE, MiB, analyze, clean_env, program_constant, trace as traced
from conftest import kept_line as program_kept_line
from test_python_versions import FOUND, MINORS

SCRIPT = PROGRAM_SOURCES / "retain_elsewhere.py"
CALLS = 3
LINES = SCRIPT.read_text().splitlines()
KEPT_MIB = program_constant(SCRIPT, "KEPT")
REPLACED = program_constant(SCRIPT, "REPLACED")


def kept_line(way):
    return program_kept_line(SCRIPT, way)


EXPECTED_CHAINS = {
    "signal": "signal handler for SIGUSR1 (function train.<locals>.<lambda>) -> closure variable held (DeviceBuffer)",
    "rtsignal": "signal handler for signal %d (function train.<locals>.<lambda>) -> closure variable realtime "
                "(DeviceBuffer)" % (signal.SIGRTMIN + 5),
    "context": "context of thread MainThread: variable step_buffer (DeviceBuffer)",
    "slot": "__main__.HOLDER (Holder) -> .buf (DeviceBuffer)",
    "cycle": "a reference cycle (the cyclic GC is off): Node.other (Node) -> .other (Node) -> .buf (DeviceBuffer)",
    # a hop no attribute names is the step's type alone
    "iterator": "__main__.ITERATORS[0] (cycle) -> (list_iterator) -> [0] (DeviceBuffer)",
    "weakkey": "__main__.BY_KEY (WeakKeyDictionary) -> .data[weakref to Holder2] (DeviceBuffer)",
    "dictkey": "__main__.BY_BUFFER key (DeviceBuffer)",  # as a set's member
    # the hidden argument ".0" of a generator expression is what it loops over
    "genexpr": "__main__.PENDING[0] (generator <genexpr> at retain_elsewhere.py:%d) -> its iterable "
               "(tuple_iterator) -> [0] (DeviceBuffer)" % next(
                   n for n, line in enumerate(LINES, 1) if "# kept: genexpr" in line),
    "atexit": "held by native code (function train.<locals>.<lambda>) -> closure variable at_exit (DeviceBuffer)",
    "local": "main (retain_elsewhere.py:%d): last (DeviceBuffer)" % next(
        n for n, line in enumerate(LINES, 1) if line.strip() == "last = train(i)"),
    "task": "__main__.LOOP (_UnixSelectorEventLoop) -> ._scheduled[0] (TimerHandle) -> ._args[0] (Future) -> "
            "._callbacks (method Task.task_wakeup) -> .__self__ (Task) -> ._coro (coroutine sleeper at "
            "retain_elsewhere.py:%d) -> local buffer (DeviceBuffer)" % next(
                n for n, line in enumerate(LINES, 1) if line.strip() == "await asyncio.sleep(3600)"),
}


def printed(stdout, what):
    line = next(row for row in stdout.splitlines() if row.startswith(what + ": "))
    return json.loads(line[len(what) + 2:])


def alive(stdout):
    return printed(stdout, "alive")


def run_leaks(tmp_path, exe, *args):
    t = traced(tmp_path, [exe, SCRIPT, CALLS, *args], env={"CUDART": str(CUDART)}, run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    out = json.loads(analyze("leaks", "--json", "--quiet", "--phase", "train", t.trace).stdout)
    return t, out


@pytest.fixture(scope="module")
def run(tmp_path_factory, python_exe):
    return run_leaks(tmp_path_factory.mktemp("elsewhere"), python_exe)


def of_way(out, way):
    line = kept_line(way)
    return [s for s in out["survivors"]
            if any(f.get("file", "").endswith("retain_elsewhere.py") and f.get("line") == line for f in s["frames"])]


def what_stays_alive(tmp_path, exe):
    import subprocess

    p = subprocess.run([exe, SCRIPT, str(CALLS)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env=clean_env({"CUDART": str(CUDART)}))
    assert p.returncode == 0, p.stderr
    return alive(p.stdout)


def test_the_walks_keep_nothing_the_program_let_go(run, python_exe, tmp_path):
    """With the GC off a walk that left a cycle behind would keep the frames it saw, and with
    them each call's locals: the replaced buffers would stay."""
    t, out = run
    assert out["retention_walks"]["count"] >= CALLS - 1  # the walks ran
    untraced = what_stays_alive(tmp_path, python_exe)
    assert untraced == {way: [way not in REPLACED] * (CALLS - 1) + [True] for way in KEPT_MIB}
    assert alive(t.stdout) == untraced
    assert printed(t.stdout, "rebound") == [False] * (CALLS - 1)


def test_nothing_is_printed_at_teardown(run):
    """Buffers freed at teardown run __del__, a Python call the phase hook still sees after this
    module's globals are gone."""
    t, _ = run
    assert "Exception ignored" not in t.stderr and "Traceback" not in t.stderr, t.stderr


HOOK_AT_TEARDOWN = """
import sys
from vramtrace import _phases
_phases._targets[:] = _phases.parse("train")
_phases._labels = None  # as at teardown, when a module's globals are None
def train():
    pass
if sys.version_info >= (3, 12):
    _phases._install_monitoring()
    train()
else:
    _phases._profile(sys._getframe(), "call", None)
print("ran")
"""


@pytest.mark.parametrize("minor", [None, 12, 13], ids=["this", "3.12", "3.13"])
def test_the_phase_hook_never_raises_into_the_program(python_exe, tmp_path, minor):
    """An object freed at teardown runs Python code while the hook is still set and this
    module's globals are None already: the hook must not raise into the program (a profile
    function before 3.12, sys.monitoring callbacks from 3.12)."""
    import subprocess

    exe = python_exe if minor is None else FOUND.get(minor)
    if not exe:
        pytest.skip(f"no CPython 3.{minor} here")
    p = subprocess.run([exe, "-c", HOOK_AT_TEARDOWN], capture_output=True, text=True, timeout=60,
                       env=clean_env({"PYTHONPATH": str(SOURCE / "python")}), cwd=tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (0, "ran\n", "")


@pytest.mark.parametrize("way", sorted(EXPECTED_CHAINS))
def test_each_holder_is_named(run, way):
    _, out = run
    first = [s for s in of_way(out, way) if s["phase_index"] == 1]
    assert [" -> ".join(c) for s in first for c in s["held_by"]] == [EXPECTED_CHAINS[way]]


@pytest.mark.parametrize("way", sorted(KEPT_MIB))
def test_kept_until_the_next_call_is_told_from_growth(run, way):
    _, out = run
    groups = of_way(out, way)
    # the last call's local is freed when main() returns, before teardown
    assert sorted(s["phase_index"] for s in groups) == list(range(1, CALLS + (way != "local")))
    want = "kept until the next call" if way in REPLACED else "grows every call"
    assert {s["verdict"] for s in groups} == {want}, groups


def test_the_headline_grows_by_what_is_never_freed(run):
    _, out = run
    assert out["growth_per_invocation_bytes"] == sum(KEPT_MIB[w] for w in KEPT_MIB if w not in REPLACED) * MiB
    text = analyze("leaks", "--quiet", "--phase", "train", run[0].trace).stdout
    assert "kept until the next call (each call's were freed during the next one" in text, text


def test_a_profiler_that_replaces_the_phase_hook_is_said(tmp_path, python_exe):
    """Before 3.12 cProfile takes the one profile function a thread has: the calls after it are
    not seen, and the run says so. From 3.12 the two coexist: every call is seen."""
    t, out = run_leaks(tmp_path, python_exe, "cprofile")
    said = "--phase stopped following calls on the main thread" in t.stderr
    assert said == (sys.version_info < (3, 12)), t.stderr
    assert len(out["phases"]) == (1 if said else CALLS)


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_each_version(tmp_path, minor):
    exe = FOUND.get(minor)
    if not exe:
        pytest.skip(f"no CPython 3.{minor} here (pyenv, python3.{minor} on PATH, VRAMTRACE_TEST_PYTHONS)")
    t, out = run_leaks(tmp_path, exe)
    assert alive(t.stdout) == {way: [way not in REPLACED] * (CALLS - 1) + [True] for way in KEPT_MIB}
    # a walk read the loop's locals: what the local named then is freed once it names another
    assert printed(t.stdout, "rebound") == [False] * (CALLS - 1)
    assert "Exception ignored" not in t.stderr, t.stderr
    chains = {way: [" -> ".join(c) for s in of_way(out, way) if s["phase_index"] == 1 for c in s["held_by"]]
              for way in EXPECTED_CHAINS}
    want = dict(EXPECTED_CHAINS)
    if minor == 9:  # the atexit module's own state, which the GC sees until 3.10
        want["atexit"] = "atexit (function train.<locals>.<lambda>) -> closure variable at_exit (DeviceBuffer)"
    if minor == 9:  # a task's wakeup is a C object of its own, whose task no attribute names
        want["task"] = want["task"].replace("(method Task.task_wakeup) -> .__self__ (Task)",
                                            "(TaskWakeupMethWrapper) -> (Task)")
    assert chains == {way: [c] for way, c in want.items()}


RETRY = PROGRAM_SOURCES / "retry_in_except.py"


def retry_chain(tmp_path, exe, variant):
    t = traced(tmp_path, [exe, RETRY, *([variant] if variant else [])], env={"CUDART": str(CUDART)},
               run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    out = json.loads(analyze("leaks", "--json", "--quiet", "--phase", "train", t.trace).stdout)
    return [(s["phase_index"], s["bytes"], [" -> ".join(c) for c in s["held_by"]]) for s in out["survivors"]]


def expected_retry(variant):
    lines = RETRY.read_text().splitlines()
    # the named variant comes first in main()
    retried = [n for n, line in enumerate(lines, 1) if line.strip().startswith("train(1, False)")][variant != "named"]
    raised = next(n for n, line in enumerate(lines, 1) if line.strip().startswith("raise MemoryError"))
    return [(1, 8 * MiB, [f"exception being handled in main at retry_in_except.py:{retried} (MemoryError) -> "
                          f".__traceback__.tb_next, in train at retry_in_except.py:{raised}: local activations "
                          "(DeviceBuffer)"])]


@pytest.mark.parametrize("variant", ["", "named"], ids=["bare", "named"])
def test_a_retry_inside_the_except_block_names_the_exception_that_keeps_the_failed_attempt(
        tmp_path, python_exe, variant):
    """The first call fails after it allocated; the handler calls again before its block ends:
    the failed call's frames are still the exception's, held by the thread whether the handler
    binds it to a name or not. The chain starts at the exception and says where it is handled."""
    assert retry_chain(tmp_path, python_exe, variant) == expected_retry(variant)


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_a_retry_inside_the_except_block_on_each_version(tmp_path, minor):
    exe = FOUND.get(minor)
    if not exe:
        pytest.skip(f"no CPython 3.{minor} here (pyenv, python3.{minor} on PATH, VRAMTRACE_TEST_PYTHONS)")
    assert retry_chain(tmp_path, exe, "") == expected_retry("")
