"""The Python module as a library: vramtrace.load() and its typed reports, the errors it raises,
the pytest fixture, and vramtrace.snapshot() without the bootstrap."""
import os
import subprocess
import sys

from conftest import BUILD, CUDART, PROGRAM_SOURCES, SOURCE, TIMEOUT, analyze, clean_env

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
