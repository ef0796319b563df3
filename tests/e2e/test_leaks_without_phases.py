"""`vramtrace leaks` without phases: growth at the low points of total memory (issue 19), on the
test double. tests/programs/retain_buffers.py keeps 4, 2, 3 and 1 MiB per train() call in four
ways; run without --phase, nothing marks the calls, and the interpreter's teardown frees what the
module-level objects held: the analysis must end where teardown began."""
import json

from conftest import CUDART, MiB, PROGRAM_SOURCES, analyze, trace as traced

SCRIPT = PROGRAM_SOURCES / "retain_buffers.py"
CALLS = 12


def line_of(text, kept=True):
    return next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                if text in line and (not kept or "# kept" in line))


CYCLE, RAW = line_of("self.buf = DeviceBuffer(nbytes)", False), line_of("rt.cudaMalloc(ctypes.byref(ptr)", False)


def test_growth_is_measured_before_teardown_and_named_by_the_users_lines(tmp_path, python_exe):
    t = traced(tmp_path, [python_exe, SCRIPT, CALLS], env={"CUDART": str(CUDART)})
    assert t.returncode == 0, t.stderr
    d = json.loads(analyze("leaks", "--json", "-q", t.trace).stdout)
    assert d["phase"] is None and d["teardown_s"] is not None
    # each way of keeping is one growing site, at the line of train() (or Cycle) that allocated it
    lines = {}
    for g in d["growing"]:
        user = [f for f in g["frames"] if f.get("function") in ("train", "Cycle.__init__", "keep_raw")]
        lines[(user[0]["function"], user[0]["line"])] = g
    kept = {("train", line_of("REGISTRY")): 4 * MiB, ("train", line_of("HOOKS")): 2 * MiB,
            ("Cycle.__init__", CYCLE): 3 * MiB, ("keep_raw", RAW): 1 * MiB}
    assert set(lines) == set(kept), lines.keys()
    for key, size in kept.items():
        g = lines[key]
        assert g["still_rising"] and g["bytes"] % size == 0 and g["bytes"] >= (CALLS - 2) * size, (key, g["bytes"])
    top = d["growing"][0]
    assert top["bytes"] == 4 * MiB * top["allocations_in_window"]
    assert top["bytes_per_step"] in (None, 4 * MiB)
    assert ": 59%% from train (retain_buffers.py:%d-%d), 31%% from Cycle.__init__ (retain_buffers.py:%d), 10%% from " \
           "keep_raw (retain_buffers.py:%d)" % (line_of("REGISTRY"), line_of("HOOKS"), CYCLE, RAW) in d["summary"], \
        d["summary"]
    text = analyze("leaks", "-q", t.trace).stdout
    assert "the end is where teardown began" in text and d["summary"] in text
