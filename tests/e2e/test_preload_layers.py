"""The preload's file layering, read from its object files (nm): which file calls which.

base.c is the leaf every file uses (state, clock, the one stderr line, self-disable, fork waits):
it calls nothing of ours. lifecycle.c orchestrates start, fork and fatal signals: only the first
hook that runs before our constructor (event.c) and a late start (attach.c) call into it, so no
file that lifecycle.c starts can reach back into it. docs/DESIGN.md ("Preload layers") names the
circles the design keeps and why.
"""
import shutil
import subprocess

import pytest

from conftest import BUILD

OBJECTS = BUILD / "preload" / "libvramtrace.so.p"
LEAVES = {"base", "config", "intern", "torch_layout", "unwind"}


def symbol_graph():
    """{file: set of files whose global symbols it uses}, and {symbol: defining file}."""
    if not shutil.which("nm"):
        pytest.fail("nm (binutils) is not installed: it reads the preload's object files")
    defined, used = {}, {}
    objects = sorted(OBJECTS.glob("*.o"))
    assert len(objects) > 10, f"no preload object files in {OBJECTS}"
    for o in objects:
        name = o.name.split(".")[0]
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRVWC":
                defined[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                used.setdefault(name, set()).add(parts[1])
    graph = {name: {defined[s] for s in syms if s in defined and defined[s] != name} for name, syms in used.items()}
    return graph, defined, used


def test_the_leaves_call_nothing_of_ours_but_base():
    graph, _, _ = symbol_graph()
    assert not graph.get("base"), f"base.c calls {sorted(graph['base'])}"
    for leaf in LEAVES - {"base"}:
        assert graph.get(leaf, set()) <= {"base"}, f"{leaf}.c calls {sorted(graph[leaf] - {'base'})}"


def test_only_the_early_hook_and_a_late_start_call_the_lifecycle():
    graph, defined, used = symbol_graph()
    callers = {name for name, deps in graph.items() if "lifecycle" in deps}
    assert callers == {"event", "attach"}, callers
    entry = {s for name in callers for s in used[name] if defined.get(s) == "lifecycle"}
    assert entry == {"vrt_start_early", "vrt_lifecycle_begin", "vrt_loaded_late"}, entry
    # What lifecycle starts never reaches back into it, except through those entries.
    assert "base" in graph["lifecycle"] and "collector" in graph["lifecycle"]
