"""The trace reader's second thread (format/trace_reader.c: the next chunk decompressed and its
records decoded while the replay applies the current one) changes how fast a report comes, not
what it says. Where no thread can be started (a process limit; tests/programs/no_threads.c makes
every pthread_create fail), the replay decodes every chunk itself and every report is the same,
byte for byte."""
import os
import subprocess

import pytest

from conftest import BUILD, GOLDEN, VRAMTRACE

NO_THREADS = BUILD / "tests" / "libno_threads.so"
TRACES = sorted((GOLDEN / "h200").glob("*.vrt")) + sorted(GOLDEN.glob("*.vrt"))
COMMANDS = (("report", "--json"), ("leaks", "--json"), ("oom", "--json"), ("timeline",), ("dump",))


def run(args, preload):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMTRACE_") and k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = str(preload)
    return subprocess.run([str(VRAMTRACE), *map(str, args)], capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_reports_without_the_second_thread_are_the_same(trace):
    for command in COMMANDS:
        args = [*command, "-q", trace]
        threaded, alone = run(args, None), run(args, NO_THREADS)
        assert threaded.returncode in (0, 1) and (threaded.stdout or threaded.stderr), (command, threaded.stderr)
        assert (alone.returncode, alone.stdout, alone.stderr) == (threaded.returncode, threaded.stdout, threaded.stderr)
