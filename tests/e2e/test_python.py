"""Python stacks: tests/programs/ctypes_alloc.py allocates through the runtime double with ctypes
from named Python functions. Expected lines come from its "# MARK:" comments."""
import os

import pytest

from conftest import CUDART, KiB, MiB, PROGRAM_SOURCES, assert_nothing_lost, assert_unchanged_behaviour, \
    marker_lines, trace

SCRIPT = PROGRAM_SOURCES / "ctypes_alloc.py"
LINE = marker_lines(SCRIPT)


def python_frames(site):
    return [(f["function"], f["file"], f["line"]) for f in site["frames"] if f["kind"] == "python"]


def expected(*names):
    """(qualname, file, line) innermost first, from (qualname, marker) pairs."""
    return [(function, str(SCRIPT), LINE[marker]) for function, marker in names]


WEIGHTS_STACK = expected(("cuda_malloc", "cuda_malloc"), ("allocate_weights", "allocate_weights"),
                         ("Model.build", "Model.build"), ("main", "main.build"), ("<module>", "module"))
ACTIVATIONS_STACK = expected(("cuda_malloc", "cuda_malloc"), ("allocate_activations", "allocate_activations"),
                             ("Model.step", "Model.step"), ("main", "main.step"), ("<module>", "module"))
PIN_STACK = expected(("pin_host", "pin_host"), ("main", "main.pin_host"), ("<module>", "module"))


@pytest.fixture(scope="module")
def py(tmp_path_factory, python_exe):
    return trace(tmp_path_factory.mktemp("ctypes"), [python_exe, SCRIPT, CUDART])


def test_python_program_behaviour_is_unchanged(py):
    assert (py.returncode, py.stdout) == (0, "ctypes_alloc: 2 weights, staging set\n")
    assert_unchanged_behaviour(py)


def test_python_exact_totals(py):
    assert py.totals() == {(0, "device"): (10 * MiB, 8 * MiB), (-1, "host_pinned"): (64 * KiB, 64 * KiB)}


def test_weights_site_has_file_function_and_line_of_each_python_frame(py):
    site = py.site("allocate_weights")
    assert (site["bytes"], site["count"]) == (8 * MiB, 2)
    assert python_frames(site) == WEIGHTS_STACK


def test_pinned_site_python_frames(py):
    site = py.site("pin_host")
    assert (site["bytes"], site["count"]) == (64 * KiB, 1)
    assert python_frames(site) == PIN_STACK


def test_transient_allocation_python_frames_at_the_peak(py):
    device = next(d for d in py.report["devices"] if d["kind"] == "device")
    site = py.site("allocate_activations", device["top_at_peak"])
    assert (site["bytes"], site["count"]) == (2 * MiB, 1)
    assert python_frames(site) == ACTIVATIONS_STACK


def test_python_frames_come_after_the_native_call_into_ctypes(py):
    """Merged view: the native frames of the foreign call, then Python from the caller out."""
    kinds = [f["kind"] for f in py.site("allocate_weights")["frames"]]
    first_python = kinds.index("python")
    assert first_python > 0 and set(kinds[:first_python]) == {"native"}


def test_python_nothing_lost(py):
    assert_nothing_lost(py)
    assert len(py.events("alloc")) == 4 and len(py.events("free")) == 1


def test_python_frames_when_ctypes_releases_the_gil(tmp_path, python_exe):
    """ctypes.CDLL drops the GIL around the foreign call (as Numba-style drivers do); the
    thread's Python frames are still its own and must still be recorded."""
    t = trace(tmp_path, [python_exe, SCRIPT, CUDART, "--release-gil"])
    assert t.returncode == 0
    assert t.totals() == {(0, "device"): (10 * MiB, 8 * MiB), (-1, "host_pinned"): (64 * KiB, 64 * KiB)}
    assert python_frames(t.site("allocate_weights")) == WEIGHTS_STACK


LINES_SCRIPT = PROGRAM_SOURCES / "py_lines.py"
LINES = marker_lines(LINES_SCRIPT)


def test_lines_of_one_frame_and_recursion_depths_are_separate_stacks(tmp_path, python_exe):
    """One frame allocating from two lines, three times over, and one function at two recursion
    depths: each line and each depth its own site, with the line it allocated from (the frame
    cache keys on the instruction offset, not the code object alone; the stack cache on every
    frame)."""
    t = trace(tmp_path, [python_exe, LINES_SCRIPT, CUDART])
    assert (t.returncode, t.stdout) == (0, "py_lines: 8 live\n")
    lines = {}
    for site in t.live_sites():
        frames = [(f["function"], f["line"]) for f in site["frames"] if f["kind"] == "python"
                  and f["file"] == str(LINES_SCRIPT)]
        lines[(site["bytes"], site["count"])] = frames
    malloc = ("cuda_malloc", LINES["cuda_malloc"])
    assert lines[(3 * MiB, 3)] == [malloc, ("two_lines", LINES["first"]), ("main", LINES["main.two_lines"]),
                                   ("<module>", LINES_SCRIPT.read_text().splitlines().index("    main()") + 1)]
    assert lines[(6 * MiB, 3)][1] == ("two_lines", LINES["second"])
    down = [malloc, ("recurse", LINES["bottom"])]
    assert lines[(3 * MiB, 1)][:-2] == down + [("recurse", LINES["recurse"])] * 2
    assert lines[(5 * MiB, 1)][:-2] == down + [("recurse", LINES["recurse"])] * 4


NAMES_SCRIPT = '''
import ctypes, sys
rt = ctypes.PyDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
def r\u00e9server(n):              # Latin-1: one byte a character
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), n)
def \u5206\u914d_\u00e9(n):        # CJK: two bytes a character
    r\u00e9server(n)
\u5206\u914d_\u00e9(1 << 20)
'''


def test_python_names_and_files_beyond_ascii_keep_their_text(tmp_path, python_exe):
    """CPython keeps a non-ASCII str in 1, 2 or 4 bytes a character and makes no UTF-8 copy of
    it: the walk encodes the characters itself (a function name in Latin-1 and in CJK, a file
    name with an emoji), and a file name's byte that is not UTF-8 (surrogateescape) is that byte
    again, which the reports show as \\xNN."""
    script = tmp_path / os.fsdecode("\U0001F600_\u00e9".encode() + b"\xff.py")
    script.write_text(NAMES_SCRIPT, encoding="utf-8")
    t = trace(tmp_path, [python_exe, script, CUDART])
    assert t.returncode == 0, t.stderr
    (site,) = t.live_sites()
    frames = [(f["function"], f["file"]) for f in site["frames"] if f["kind"] == "python"]
    shown = str(tmp_path / "\U0001F600_\u00e9") + "\\xff.py"
    assert frames == [("r\u00e9server", shown), ("\u5206\u914d_\u00e9", shown), ("<module>", shown)], frames


REBORN_SCRIPT = '''
import ctypes, gc, sys, time
rt = ctypes.PyDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
p = ctypes.c_void_p()
def alloc(n):
    rt.cudaMalloc(ctypes.byref(p), n)
addresses = set()
for i in range(12):
    ns = {"alloc": alloc}
    exec(compile(f"def fn_{i}(n):\\n    alloc(n)\\n", f"gen_{i}.py", "exec"), ns)
    fn = ns[f"fn_{i}"]
    addresses.add(id(fn.__code__))
    fn((i + 1) << 20)
    time.sleep(0.2)  # the collector drains (every 10 ms here): the thread's stack cache knows this stack
    del ns, fn
    gc.collect()
print(len(addresses))
'''


def callers_by_size(tmp_path, python_exe, name, text):
    """Runs one of the scripts below, which allocate (i + 1) MiB from the i-th code object made
    at run time: the Python frame that called alloc in each size's site, by the size in MiB."""
    script = tmp_path / name
    script.write_text(text)
    t = trace(tmp_path, [python_exe, script, CUDART], env={"VRAMTRACE_FLUSH_MS": "10"})
    assert t.returncode == 0, t.stderr
    assert int(t.stdout) < 12, "no code object took a dead one's address: the test checks nothing"
    return {site["bytes"] >> 20: [f for f in site["frames"] if f["kind"] == "python"][1] for site in t.live_sites()}


def test_a_code_object_born_where_a_dead_one_was_is_named_anew(tmp_path, python_exe):
    """Code made at run time (exec, as dataclasses, namedtuple and torch.compile do) dies and the
    next takes its address, running the same instruction from the same caller, its file name and
    name strings at theirs too: the walk memo, the thread's frame cache and the stack hash hold
    only while no code object died, not name the new frame after the dead one (its stack's hash
    would be the dead one's, which the thread's stack cache knows)."""
    named = {mib: (f["function"], f["file"]) for mib, f in callers_by_size(tmp_path, python_exe, "reborn.py",
                                                                           REBORN_SCRIPT).items()}
    assert named == {i + 1: (f"fn_{i}", f"gen_{i}.py") for i in range(12)}, named


SAME_NAME_SCRIPT = '''
import array, ctypes, gc, sys, time
rt = ctypes.PyDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
p = ctypes.c_void_p()
def alloc(n):
    rt.cudaMalloc(ctypes.byref(p), n)
FILE = "gen.py"  # one string object: every code object's co_filename is it
seen = array.array("Q", bytes(8 * 12))
for i in range(12):
    ns = {"alloc": alloc}
    exec(compile(f"class C_{i}:\\n    def m(self, n):\\n        alloc(n)\\n", FILE, "exec"), ns)
    obj = ns[f"C_{i}"]()
    seen[i] = id(obj.m.__code__)
    obj.m((i + 1) << 20)
    time.sleep(0.2)  # the collector drains (every 10 ms here)
    del ns, obj
    gc.collect()
print(len(set(seen)))
'''


def test_a_code_object_reborn_with_the_same_file_name_and_line_is_named_by_its_qualified_name(tmp_path, python_exe):
    """Methods of classes made at run time: the same file name object, the same name ("m",
    interned), the same first line, another qualified name (C_0.m, C_1.m...). Where a code object
    dies and the next takes its address, what the code index kept for the address is checked by
    its text, not by those addresses alone."""
    named = {mib: (f["function"], f["file"], f["line"])
             for mib, f in callers_by_size(tmp_path, python_exe, "same_name.py", SAME_NAME_SCRIPT).items()}
    assert named == {i + 1: (f"C_{i}.m", "gen.py", 3) for i in range(12)}, named
