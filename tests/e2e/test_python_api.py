"""The Python module as a library: vramtrace.load() and its typed reports, the errors it raises,
the pytest fixture, and vramtrace.snapshot() without the bootstrap."""
import json
import os
import shutil
import subprocess
import sys

from conftest import (BUILD, CUDART, MiB, PROGRAM_SOURCES, SOURCE, TIMEOUT, analyze, big_torch_trace, clean_env,
                      on_a_terminal, run_plain, trace)

PRELOAD = BUILD / "preload" / "libvramtrace.so"


def test_snapshot_without_the_bootstrap_asks_the_blocked_thread_for_no_walk(tmp_path):
    snap, out = tmp_path / "snap.vrt", tmp_path / "t.vrt"
    env = clean_env({"LD_PRELOAD": str(PRELOAD), "VRAMTRACE_OUTPUT": str(out), "CUDART": str(CUDART),
                     "VRAMTRACE_TEST_PYTHON": str(SOURCE / "python"), "VRAMTRACE_QUIET": "1"})
    p = subprocess.run([sys.executable, PROGRAM_SOURCES / "snapshot_no_bootstrap.py", snap], env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "snapshot True, walks asked for 0", p.stdout + p.stderr
    assert "size=1048576" in analyze("dump", "-q", snap).stdout


# ---- vramtrace.load() and the typed reports ---------------------------------------------------

import pytest  # noqa: E402

sys.path.insert(0, str(SOURCE / "python"))
import vramtrace  # noqa: E402

H200 = SOURCE / "tests" / "golden" / "h200"


def test_leaks_are_dataclasses_with_the_analyzers_integer_bytes():
    path = H200 / "leak-cycle.vrt"
    raw = json.loads(analyze("leaks", "--json", "-q", path).stdout)
    leaks = vramtrace.load(path).leaks
    assert leaks.phase == raw["phase"] == "train"
    assert [c.survivor_bytes for c in leaks.calls] == [p["survivor_bytes"] for p in raw["phases"]]
    assert [c.growth_bytes for c in leaks.calls] == \
        [p["live_bytes_at_next_entry"] - p["live_bytes_at_entry"] for p in raw["phases"]]
    assert leaks.growth_per_invocation_bytes == raw["growth_per_invocation_bytes"] > 0
    assert [(s.bytes, s.stack, s.frames[0].function) for s in leaks.survivors] == \
        [(s["bytes"], s["stack"], s["frames"][0]["function"]) for s in raw["survivors"]]
    assert all(isinstance(s.bytes, int) and isinstance(s.stack, int) for s in leaks.survivors)


def test_a_runs_directory_reads_as_its_one_trace_and_two_traces_are_a_usage_error(tmp_path):
    """`--json` on a directory is always a list of processes; the library's report() and leaks()
    of a run's directory with one trace give that trace's report, and ask for one when there are
    more."""
    (tmp_path / "run").mkdir()
    shutil.copy(H200 / "leak-cycle.vrt", tmp_path / "run" / "a.vrt")
    assert vramtrace.report(tmp_path / "run").file == str(tmp_path / "run" / "a.vrt")
    assert vramtrace.leaks(tmp_path / "run").phase == vramtrace.leaks(H200 / "leak-cycle.vrt").phase == "train"
    shutil.copy(H200 / "oom.vrt", tmp_path / "run" / "b.vrt")
    with pytest.raises(vramtrace.UsageError, match="holds 2 traces"):
        vramtrace.report(tmp_path / "run")


def test_oom_categories_and_a_timeline_in_integer_bytes():
    oom = vramtrace.oom(SOURCE / "tests" / "golden" / "oom.vrt")
    assert (oom.requested_bytes, oom.live_bytes) == (8 * MiB, 12 * MiB)
    assert [(c.name, c.bytes) for c in oom.categories] == [("non_pytorch", 12 * MiB)]
    assert oom.top_sites[0].top_function == "big_site"
    timeline = vramtrace.timeline(H200 / "leak-cycle.vrt", buckets=50)
    assert len(timeline.time_s) == 50
    report = vramtrace.report(H200 / "leak-cycle.vrt")
    peak = next(d.peak_bytes for d in report.devices if (d.device, d.kind) == (0, "device"))
    assert max(timeline.series["dev0.device"]) <= peak
    assert all(type(v) is int for v in timeline.series["dev0.device"]) and max(timeline.series["dev0.device"]) > 0


def test_oom_remedies_say_the_failing_calls_peak_and_the_largest_size():
    oom = vramtrace.oom(H200 / "remedies-ds-oom-offload.vrt")
    raw = oom.raw["oom"]
    assert oom.largest_size_that_fits == raw["largest_size_that_fits"]["size"] == 10
    assert oom.failing_call_peak_bytes == raw["failing_call"]["peak_bytes"] > oom.live_bytes
    fits = {r.name: r.fits for r in oom.remedies}
    assert fits["activation checkpointing"] is True and fits["expandable_segments:True"] is False
    assert vramtrace.oom(SOURCE / "tests" / "golden" / "oom.vrt").largest_size_that_fits is None


def test_a_trace_without_an_oom_loads_with_oom_none():
    assert vramtrace.load(H200 / "leak-cycle.vrt").oom is None


def test_errors_are_trace_errors_that_carry_the_analyzers_message(tmp_path):
    with pytest.raises(vramtrace.TraceNotFound):
        vramtrace.report(tmp_path / "missing.vrt")
    bad = tmp_path / "bad.vrt"
    bad.write_bytes(b"not a trace at all" * 10)
    with pytest.raises(vramtrace.TraceDamaged) as e:
        vramtrace.report(bad)
    assert "not a vramtrace trace" in str(e.value) and e.value.returncode == 3 and e.value.path == str(bad)
    with pytest.raises(vramtrace.NotInTrace) as e:
        vramtrace.oom(H200 / "leak-cycle.vrt")
    assert "no out-of-memory event" in str(e.value)
    assert issubclass(vramtrace.AnalyzerFailed, vramtrace.TraceError)


def test_the_package_says_it_is_typed():
    assert (SOURCE / "python" / "vramtrace" / "py.typed").exists()


# ---- the pytest plugin ------------------------------------------------------------------------

PLUGIN_TESTS = '''
import ctypes, os
import pytest
rt = ctypes.CDLL(os.environ["CUDART"])
KEPT = []

def cuda_malloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p

def test_keeps_a_buffer(vramtrace_no_growth):
    KEPT.append(cuda_malloc(3 << 20))

def test_frees_what_it_allocates(vramtrace_no_growth):
    rt.cudaFree(cuda_malloc(5 << 20))

@pytest.mark.vramtrace_no_growth(limit_bytes=2 << 20)
def test_keeps_less_than_its_limit():
    KEPT.append(cuda_malloc(1 << 20))

@pytest.mark.vramtrace_no_growth
def test_marked_and_keeping():
    KEPT.append(cuda_malloc(1 << 20))
'''


def run_plugin_tests(tmp_path, traced):
    script = tmp_path / "test_gpu.py"
    script.write_text(PLUGIN_TESTS)
    env = {"CUDART": str(CUDART), "PYTHONPATH": str(SOURCE / "python")}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "vramtrace.pytest_plugin", "-p", "no:cacheprovider",
            "-rA", str(script)]
    if traced:
        return trace(tmp_path, argv, env=env)
    return run_plain(argv, env=env, cwd=tmp_path)


def test_the_plugin_fails_the_tests_whose_gpu_memory_grows(tmp_path):
    t = run_plugin_tests(tmp_path, traced=True)
    out = t.stdout
    assert t.returncode == 1, out + t.stderr
    assert "PASSED test_gpu.py::test_frees_what_it_allocates" in out, out
    assert "PASSED test_gpu.py::test_keeps_less_than_its_limit" in out, out
    assert "ERROR test_gpu.py::test_keeps_a_buffer" in out, out
    assert "GPU memory grew by 3145728 bytes (limit 0)" in out, out
    assert "ERROR test_gpu.py::test_marked_and_keeping" in out and "grew by 1048576 bytes" in out, out
    leaks = vramtrace.leaks(t.trace, "test:test_gpu.py::test_keeps_a_buffer")
    assert [c.live_bytes_at_exit - c.live_bytes_at_entry for c in leaks.calls] == [3 * MiB]


def test_the_plugin_outside_vramtrace_warns_and_checks_nothing(tmp_path):
    p = run_plugin_tests(tmp_path, traced=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not running under `vramtrace run`" in p.stdout and "4 passed" in p.stdout, p.stdout


def test_dump_json_has_every_event_with_its_stack_given_once():
    path = SOURCE / "tests" / "golden" / "oom.vrt"
    lines = [json.loads(line) for line in analyze("dump", "--json", "-q", path).stdout.splitlines()]
    events = [x for x in lines if x["type"] == "event"]
    assert lines[0]["type"] == "header" and lines[-1] == {"type": "end", "events": len(events), "complete": True}
    stacks = {x["stack"]: x["frames"] for x in lines if x["type"] == "stack"}
    assert len(stacks) == len([x for x in lines if x["type"] == "stack"])
    assert len(events) == len([line for line in analyze("dump", "-q", path).stdout.splitlines() if line[0] != "#"])
    assert [(e["op"], e["size"]) for e in events if e["op"] in ("alloc", "failed")] == \
        [("alloc", 12 * MiB), ("failed", 8 * MiB), ("alloc", 2 * MiB)]
    assert stacks[events[0]["stack"]][0]["function"] == "big_site"
    assert all(e["stack"] in stacks for e in events if e["stack"])


def test_load_still_reads_as_the_dict_it_used_to_return():
    """Code written against load()'s old dict keeps working: the same JSON under the same keys."""
    path = H200 / "leak-cycle.vrt"
    a = vramtrace.load(path)
    assert a["report"] == a.report.raw and a["report"]["devices"][0]["peak_bytes"] == a.report.devices[0].peak_bytes
    assert a["leaks"] == a.leaks.raw and a["oom"] is None
    assert a["timeline"] == a.timeline.rows()
    with pytest.raises(KeyError):
        a["nothing"]


def test_load_takes_the_timelines_resolution():
    """load()'s timeline had a fixed 100 buckets (ux defect 43); its ints add up as timeline()'s."""
    a = vramtrace.load(H200 / "leak-cycle.vrt", buckets=7)
    assert len(a.timeline.time_s) == 7
    assert a.timeline == vramtrace.timeline(H200 / "leak-cycle.vrt", buckets=7)
    assert all(isinstance(v, int) for values in a.timeline.series.values() for v in values)


class _Outer:
    class Engine:
        def __init__(self):
            self.ready = True

        @classmethod
        def make(cls):
            return cls()

        def step(self):
            return self.ready


class _SubEngine(_Outer.Engine):
    pass


def test_a_methods_qualified_name_is_found_without_co_qualname():
    """CPython 3.9/3.10 code objects have no co_qualname, so --phase Engine.__init__ matched
    nothing there (ux defect 47). The name rebuilt from the call's first argument (the class in
    its MRO that holds this code) equals 3.11's co_qualname: methods, classmethods, nested
    classes, a method inherited by a subclass."""
    from vramtrace import _phases

    seen = {}

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name in ("__init__", "make", "step"):
            seen[frame.f_code.co_name] = (_phases._method_qualname(frame.f_code, frame),
                                          getattr(frame.f_code, "co_qualname", None))

    sys.setprofile(profile)
    try:
        _SubEngine.make().step()
    finally:
        sys.setprofile(None)
    assert seen == {name: ("_Outer.Engine." + name, "_Outer.Engine." + name if sys.version_info >= (3, 11) else None)
                    for name in ("__init__", "make", "step")}


def test_the_namespace_is_the_api():
    """dir(vramtrace) shows the API (its __all__), not the modules it uses (json, os, subprocess,
    contextlib, typing's names)."""
    public = {n for n in dir(vramtrace) if not n.startswith("_")}
    assert public - {"pytest_plugin"} == set(vramtrace.__all__), public ^ set(vramtrace.__all__)


def test_load_shows_the_analyzers_progress_on_a_terminal(tmp_path):
    """vramtrace.load() reads its answers through pipes; the analyzer's progress bars still reach
    the caller's terminal, through a descriptor handed down (VRAMTRACE_PROGRESS_FD; ux defect 9)."""
    big = big_torch_trace(tmp_path / "big.vrt")
    code = "import sys, vramtrace; a = vramtrace.load(sys.argv[1]); print('loaded', a.leaks is not None)"
    env = dict(os.environ, VRAMTRACE_PROGRESS_DELAY="0", PYTHONPATH=str(SOURCE / "python"),
               VRAMTRACE_ANALYZER=str(BUILD / "analyzer" / "vramtrace"))
    text = on_a_terminal([sys.executable, "-c", code, big], env)
    assert "loaded True" in text and "vramtrace leaks [" in text, text[-800:]
