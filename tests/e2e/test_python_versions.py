"""Python frames on every CPython the machine has, 3.9-3.14 (default GIL builds): the program of
test_python.py run by each interpreter, its stacks exact. An interpreter is found in pyenv
($PYENV_ROOT/versions/3.X.*), as python3.X on PATH, or named in VRAMTRACE_TEST_PYTHONS (paths,
space-separated); a version with none is skipped, saying so. CI's Debian 12 has 3.11 alone."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CUDART, TIMEOUT, VRAMTRACE, MiB, Traced, clean_env, frame_functions, program, trace
from test_python import ACTIVATIONS_STACK, SCRIPT, WEIGHTS_STACK, python_frames

MINORS = range(9, 15)


def interpreters():
    found = {}
    for exe in os.environ.get("VRAMTRACE_TEST_PYTHONS", "").split():
        found.setdefault(minor_of(exe), exe)
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for m in MINORS:
        for d in sorted(root.glob(f"3.{m}.*")):
            if (d / "bin" / f"python3.{m}").exists() and not d.name.endswith("t"):
                found.setdefault(m, str(d / "bin" / f"python3.{m}"))
        if shutil.which(f"python3.{m}"):
            found.setdefault(m, shutil.which(f"python3.{m}"))
    return found


def expected(stack, minor):
    """3.9 and 3.10 code objects have no qualified name: a method is named by its own name."""
    return [(f.rsplit(".", 1)[-1] if minor < 11 else f, file, line) for f, file, line in stack]


def sites_through(sites, function):
    """Every site through function: a specializing interpreter (3.13+) reaches the same line by
    another native path once warmed up, so one Python stack may be two sites."""
    return [s for s in sites if function in frame_functions(s)]


def minor_of(exe):
    out = subprocess.run([exe, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True,
                         timeout=60)
    return int(out.stdout) if out.returncode == 0 else None


FOUND = interpreters()


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_python_frames_on_each_version(tmp_path, minor):
    exe = FOUND.get(minor)
    if not exe:
        pytest.skip(f"no CPython 3.{minor} here (pyenv, python3.{minor} on PATH, VRAMTRACE_TEST_PYTHONS)")
    t = trace(tmp_path, [exe, SCRIPT, CUDART])
    assert t.returncode == 0, t.stderr
    assert "Python stacks off" not in t.stderr
    weights = sites_through(t.live_sites(), "allocate_weights")
    assert sum(s["bytes"] for s in weights) == 8 * MiB
    assert all(python_frames(s) == expected(WEIGHTS_STACK, minor) for s in weights)
    device = next(d for d in t.report["devices"] if d["kind"] == "device")
    peak = sites_through(device["top_at_peak"], "allocate_activations")
    assert sum(s["bytes"] for s in peak) == 2 * MiB
    assert all(python_frames(s) == expected(ACTIVATIONS_STACK, minor) for s in peak)


def test_free_threaded_build_gets_native_stacks_and_one_message(tmp_path):
    """tests/programs/py_freethreaded.c looks like a 3.13t to the preload: its frames must never
    be walked (its thread state is garbage), stacks stay native, and one line says why."""
    out = tmp_path / "t.vrt"
    p = subprocess.run([str(VRAMTRACE), "run", "-o", str(out), "--", str(program("py_freethreaded"))],
                       capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(), cwd=tmp_path)
    t = Traced([program("py_freethreaded")], out, p.returncode, p.stdout, p.stderr)
    assert t.returncode == 0, t.stderr
    said = [line for line in t.stderr.splitlines() if "Python stacks off" in line]
    assert len(said) == 1 and "free-threaded build" in said[0], t.stderr
    site = t.site("ft_alloc_site")
    assert (site["bytes"], site["count"]) == (1 * MiB, 1)
    assert python_frames(site) == [] and "main" in frame_functions(site)


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_names_beyond_ascii_and_reborn_code_on_each_version(tmp_path, minor):
    """What each version keeps its strings in (1-, 2- and 4-byte compact strings after its own
    PyCompactUnicodeObject) and how it frees its code objects (the wrapped deallocator): the
    tests of test_python.py that depend on them, run by each interpreter. 3.9 and 3.10 have no
    qualified names: the methods of classes made at run time are all "m" there."""
    from test_python import (test_a_code_object_born_where_a_dead_one_was_is_named_anew,
                             test_a_code_object_reborn_with_the_same_file_name_and_line_is_named_by_its_qualified_name,
                             test_python_names_and_files_beyond_ascii_keep_their_text)
    exe = FOUND.get(minor)
    if not exe:
        pytest.skip(f"no CPython 3.{minor} here (pyenv, python3.{minor} on PATH, VRAMTRACE_TEST_PYTHONS)")
    for i, test in enumerate((test_python_names_and_files_beyond_ascii_keep_their_text,
                              test_a_code_object_born_where_a_dead_one_was_is_named_anew,
                              test_a_code_object_reborn_with_the_same_file_name_and_line_is_named_by_its_qualified_name)):
        if i == 2 and minor < 11:
            continue
        d = tmp_path / str(i)
        d.mkdir()
        test(d, exe)
