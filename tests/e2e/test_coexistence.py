"""Co-existence: whatever else is loaded, the job runs as it would without vramtrace, and the
trace is exact. The matrix of docs/RELIABILITY.md ("Co-existence"), on the doubles:

  - a driver built as an ordinary -fPIC library (tests/doubles/interposable: no -Bsymbolic),
    whose cuGetProcAddress table and whose calls between its own functions bind to our exports;
  - a GPU-sharing shim in the style of HAMi-core (tests/programs/shim_vgpu.c: dlsym,
    cuGetProcAddress and cuMemAlloc* wrapped, a memory limit) preloaded before or after us;
  - two copies of the driver in one process; a runtime opened RTLD_LOCAL by ctypes; CUDA calls
    from constructors that run before ours; a runtime dlclose'd and opened again many times.

Each row checks the program's own output and exit status against a run without vramtrace (the
shim prints what it did, so its limit being enforced is part of that) and the trace's peak and
live bytes against what the program allocated.
"""
import os
import shutil
import subprocess

import pytest

from conftest import (BUILD, CUDART, DOUBLES, KiB, MiB, PROGRAM_SOURCES, TIMEOUT, Traced, assert_nothing_lost,
                      clean_env, program, trace)
from stress_helpers import PRELOAD, fields, last_line, preload_lines

INTERPOSABLE = DOUBLES / "interposable"
SHIM = BUILD / "tests" / "libshim_vgpu.so"

DRIVERS = [pytest.param(DOUBLES, id="bsymbolic-driver"), pytest.param(INTERPOSABLE, id="interposable-driver")]

# {(device, kind): (peak, live)} each program leaves (see the header of each program).
EXPECTED = {
    "rt_api": {(0, "device"): (4 * MiB, 1 * MiB + 10240 + 8192), (0, "managed"): (2 * MiB, 2 * MiB),
               (-1, "host_pinned"): (80 * KiB, 64 * KiB)},
    "static_rt": {(0, "device"): (3 * MiB, 1 * MiB), (-1, "host_pinned"): (8192, 8192)},
    "dl_driver": {(0, "device"): (3 * MiB, 1 * MiB), (-1, "host_pinned"): (4096, 4096)},
    "entry_point_vmm": {(0, "device"): (6 * MiB, 4 * MiB)},
}


def driver_env(driver, extra=None):
    return {"LD_LIBRARY_PATH": str(driver), **(extra or {})}


def plain(argv, env, preload=None):
    env = clean_env(env)
    if preload:
        env["LD_PRELOAD"] = ":".join(filter(None, [env.get("LD_PRELOAD"), str(preload)]))
    return subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=TIMEOUT, env=env)


def preloaded(tmp_path, argv, env, preload):
    """argv with LD_PRELOAD=preload (a list naming libvramtrace.so where it goes) and the trace in
    tmp_path/t.vrt: what `vramtrace run` does, but with our place in the list chosen."""
    out = tmp_path / "t.vrt"
    env = clean_env({**env, "VRAMTRACE_OUTPUT": str(out), "VRAMTRACE_QUIET": "1"})
    env["LD_PRELOAD"] = ":".join(filter(None, [env.get("LD_PRELOAD"), *map(str, preload)]))
    p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
    assert out.exists(), f"no trace (exit {p.returncode}):\n{p.stderr}"
    return Traced(list(argv), out, p.returncode, p.stdout, p.stderr)


def assert_same_job(t, reference):
    assert (t.returncode, t.stdout) == (reference.returncode, reference.stdout), t.stderr
    assert t.returncode == 0, t.stderr
    assert not preload_lines(t.stderr), t.stderr


# ---- a driver whose own tables point at our exports --------------------------------------------

@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_driver_tables_bound_to_our_exports_trace_exactly(tmp_path, driver, name):
    """The runtime (shared or static), a program's dlsym and cudaGetDriverEntryPoint all reach a
    driver opened RTLD_LOCAL whose cuGetProcAddress answers with pointers the loader bound to
    vramtrace's exports; cudaMallocHost goes through the driver's own call to its exported
    cuMemHostAlloc, bound to ours as well."""
    env = driver_env(driver)
    t = trace(tmp_path, [program(name)], env=env)
    assert_same_job(t, plain([program(name)], env))
    assert t.totals() == EXPECTED[name]
    assert_nothing_lost(t)


@pytest.mark.parametrize("driver", DRIVERS)
def test_driver_linked_by_the_program_traces_exactly(tmp_path, driver):
    env = driver_env(driver)
    t = trace(tmp_path, [program("drv_api")], env=env)
    assert_same_job(t, plain([program("drv_api")], env))
    assert t.totals() == {(0, "device"): (5 * MiB + 4096, 3 * MiB + 4096), (0, "managed"): (1 * MiB, 0),
                          (-1, "host_pinned"): (24 * KiB, 8 * KiB)}


def test_interposable_driver_is_what_the_test_says(tmp_path):
    """The double really binds its table to the first definition in the global scope (or the
    rows above test nothing): with a preloaded cuMemAlloc_v2 that is not vramtrace's, the
    runtime's allocations reach it."""
    src = tmp_path / "first.c"
    src.write_text('#include <stddef.h>\nint cuMemAlloc_v2(void *p, size_t n) { (void)p; (void)n; return 2; }\n')
    lib = tmp_path / "libfirst.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True)
    p = plain([program("static_rt")], driver_env(INTERPOSABLE), preload=lib)
    assert p.returncode == 3 and "returned 2" in p.stderr, p.stderr  # 2: the impostor's answer
    assert plain([program("static_rt")], driver_env(DOUBLES), preload=lib).returncode == 0


# ---- a GPU-sharing shim (HAMi-core style) before and after us ----------------------------------

SHIM_ORDER = [pytest.param("before", id="shim-before"), pytest.param("after", id="shim-after")]


def shim_run(tmp_path, name, order, driver, limit):
    env = driver_env(driver, {"FAKEVGPU_LIMIT": str(limit)})
    preload = [SHIM, PRELOAD] if order == "before" else [PRELOAD, SHIM]
    return preloaded(tmp_path, [program(name)], env, preload), plain([program(name)], env, preload=SHIM)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("order", SHIM_ORDER)
def test_shim_limit_still_enforced_and_trace_exact(tmp_path, order, driver):
    t, reference = shim_run(tmp_path, "vgpu_fill", order, driver, 5 * MiB)
    assert_same_job(t, reference)
    made = fields(last_line(t.stdout, "vgpu_fill:"))
    shim = fields(last_line(t.stdout, "shim_vgpu:"))
    assert (made["allocated"], made["refused"], shim["refused"]) == (5, 1, 1)  # the shim's limit
    assert shim["calls"] == 5 + 1 + 3 + 1  # every allocation, the refusal, the frees, pinned
    assert t.totals() == {(0, "device"): (5 * MiB, 2 * MiB), (-1, "host_pinned"): (4096, 4096)}
    failed = t.events("failed")
    assert [(r["size"], r.api) for r in failed] == [(1 * MiB, "cudaMalloc")]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("order", SHIM_ORDER)
@pytest.mark.parametrize("name", ["rt_api", "static_rt"])
def test_shim_programs_unchanged_and_trace_exact(tmp_path, name, order, driver):
    t, reference = shim_run(tmp_path, name, order, driver, 1 << 40)
    assert_same_job(t, reference)
    assert t.totals() == EXPECTED[name]
    assert fields(last_line(t.stdout, "shim_vgpu:"))["calls"] > 0


# ---- two copies of the driver --------------------------------------------------------------------

@pytest.mark.parametrize("driver", DRIVERS)
def test_two_copies_of_the_driver_each_get_their_own_calls(tmp_path, driver):
    copy = tmp_path / "b" / "libcuda.so.1"
    copy.parent.mkdir()
    shutil.copy(driver / "libcuda.so.1", copy)
    argv = [program("two_drivers"), driver / "libcuda.so.1", copy]
    t = trace(tmp_path, argv)
    assert_same_job(t, plain(argv, {}))
    assert fields(t.stdout) == {"a_used": 1 * MiB, "a_live": 2, "b_used": 2 * MiB, "b_live": 2}
    assert t.totals() == {(0, "device"): (6 * MiB, 3 * MiB), (-1, "host_pinned"): (12 * KiB, 12 * KiB)}


# ---- the runtime opened RTLD_LOCAL by ctypes -----------------------------------------------------

@pytest.mark.parametrize("driver", DRIVERS)
def test_ctypes_runtime_rtld_local_with_either_driver(tmp_path, python_exe, driver):
    argv = [python_exe, PROGRAM_SOURCES / "ctypes_alloc.py", CUDART]
    t = trace(tmp_path, argv, env=driver_env(driver))
    assert_same_job(t, plain(argv, driver_env(driver)))
    assert t.totals() == {(0, "device"): (10 * MiB, 8 * MiB), (-1, "host_pinned"): (64 * KiB, 64 * KiB)}


# ---- before main, and a runtime dlclose'd again and again ----------------------------------------

def test_cuda_from_constructors_that_run_before_ours_is_recorded(tmp_path):
    """The loader orders constructors by dependencies only: a library the program links runs
    its constructor before vramtrace's, and its allocation must not go untraced."""
    t = trace(tmp_path, [program("ctor_alloc")])
    assert_same_job(t, plain([program("ctor_alloc")], {}))
    assert t.totals() == {(0, "device"): (7 * MiB, 7 * MiB)}
    assert sorted(s["bytes"] for s in t.live_sites()) == [1 * MiB, 2 * MiB, 4 * MiB]


def test_runtime_dlclosed_and_reopened_elsewhere_stays_traced(tmp_path):
    """20 copies of the runtime, one after another at 20 addresses: more than the 8 trampolines
    an API has, so the slots of unloaded copies must be reused."""
    argv = [program("dlclose_rt"), CUDART, 20]
    t = trace(tmp_path, argv)
    assert_same_job(t, plain(argv, {}))
    assert fields(t.stdout)["distinct_bases"] == 20  # or this proves nothing
    assert t.totals() == {(0, "device"): (20 * MiB + 64 * KiB, 20 * MiB)}
    assert {r.api for r in t.events("alloc")} == {"cudaMalloc"}
    assert len(t.events("alloc")) == 40


PRIMARY_REFS = r"""
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
ctx, p = ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(3 << 20)) == 0
assert cu.cuDevicePrimaryCtxRelease_v2(0) == 0  # one reference left: the context and its memory stay
print("released once", flush=True)
if sys.argv[2:] == ["twice"]:
    assert cu.cuDevicePrimaryCtxRelease_v2(0) == 0  # the last: the context goes, and its memory
"""


def test_a_primary_context_still_referenced_keeps_its_memory(tmp_path):
    """Retained twice, released once: the context is still active, nothing is reset."""
    prog = tmp_path / "refs.py"
    prog.write_text(PRIMARY_REFS)
    t = trace(tmp_path, ["python3", prog, DOUBLES / "libcuda.so.1"])
    assert t.returncode == 0 and "released once" in t.stdout, t.stderr
    assert not t.events("context")
    assert t.totals() == {(0, "device"): (3 * MiB, 3 * MiB)}


def test_the_last_release_of_a_primary_context_takes_its_memory(tmp_path):
    prog = tmp_path / "refs.py"
    prog.write_text(PRIMARY_REFS)
    t = trace(tmp_path, ["python3", prog, DOUBLES / "libcuda.so.1", "twice"])
    assert t.returncode == 0, t.stderr
    assert len(t.events("context")) == 1
    assert t.totals() == {(0, "device"): (3 * MiB, 0)}


def test_a_context_released_while_the_process_exits_is_not_a_reset(tmp_path):
    """The double's destructor releases its context at exit too (FAKECUDART_RELEASE_ON_UNLOAD=1):
    that is teardown after the trace ended (vramtrace's destructor ran first), and what was live
    when the program ended stays live."""
    argv = [program("rt_api")]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    released = trace(tmp_path / "a", argv, {"FAKECUDART_RELEASE_ON_UNLOAD": "1"})
    kept = trace(tmp_path / "b", argv)
    assert not released.events("context")
    assert released.totals() == kept.totals() and any(live for _, live in kept.totals().values())


UNLOADED_DRIVER = r"""
import ctypes, ctypes.util, sys, _ctypes
cu = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
p = ctypes.c_uint64()
assert cu.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
_ctypes.dlclose(cu._handle)  # the driver's last reference: it may be unloaded now
for _ in range(3):  # later unloads of anything else must not reach into it
    h = _ctypes.dlopen(ctypes.util.find_library("m"), ctypes.RTLD_LOCAL)
    _ctypes.dlclose(h)
print("done", flush=True)
"""


def test_dlclose_after_the_driver_was_unloaded_leaves_it_alone(tmp_path):
    """dlclose asks the driver about its contexts only while the driver is loaded: once the
    program unloaded it, the pointers kept into it are not called (a crash before)."""
    prog = tmp_path / "unload.py"
    prog.write_text(UNLOADED_DRIVER)
    argv = ["python3", prog, DOUBLES / "libcuda.so.1"]
    t = trace(tmp_path, argv)
    assert t.returncode == 0 and t.stdout == "done\n", t.stderr
    assert not preload_lines(t.stderr), t.stderr


def test_a_runtime_unloaded_takes_its_context_and_memory_with_it(tmp_path):
    """The real runtime releases its primary context when it is dlclose'd, and the last release
    destroys the context with its memory: on the H200 every copy's 1 MiB came back at the same
    address. The double does the same under FAKECUDART_RELEASE_ON_UNLOAD=1: each release that
    left the context inactive is a context reset in the trace, so nothing stays live."""
    argv = [program("dlclose_rt"), CUDART, 12]
    env = {"FAKECUDART_RELEASE_ON_UNLOAD": "1"}
    t = trace(tmp_path, argv, env)
    assert_same_job(t, plain(argv, env))
    assert len(t.events("alloc")) == 24
    assert len(t.events("context")) == 12, t.dump_text[-2000:]  # a context record has no api field
    assert t.totals() == {(0, "device"): (1 * MiB + 64 * KiB, 0)}
