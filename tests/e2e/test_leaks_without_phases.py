"""`vramtrace leaks` without phases: growth at the low points of total memory (issue 19), on the
test double. tests/programs/retain_buffers.py keeps 4, 2, 3 and 1 MiB per train() call in four
ways; run without --phase, nothing marks the calls, and the interpreter's teardown frees what the
module-level objects held: the analysis must end where teardown began. tests/programs/
steps_burst.c keeps two buffers a step: a step is counted once."""
import json

from conftest import CUDART, MiB, PROGRAM_SOURCES, analyze, program, trace as traced

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


STEPS = 10


def test_a_step_that_keeps_two_buffers_is_one_step(tmp_path):
    """steps_burst keeps two 1 MiB buffers a step from one line (and frees a scratch between
    them), each step 10 s apart on the clock vramtrace reads (libstep_clockshim.so moves it),
    after a setup that keeps two more before total memory's first low point, and one step comes
    right after the one before: the cadence counts the steps after the setup, not their
    allocations, and the two that came together are two."""
    from stress_helpers import STEP_CLOCKSHIM, run

    p, out = run(tmp_path, [program("steps_burst"), STEPS], "s.vrt", extra_preload=STEP_CLOCKSHIM)
    assert p.returncode == 0 and "steps=%d " % STEPS in p.stdout, p.stderr
    d = json.loads(analyze("leaks", "--json", "-q", out).stdout)
    top = d["growing"][0]
    assert top["headline"]["function"] == "keep_site", top
    # the growth between the first low point and the last: the steps between them, each two buffers
    steps = top["steps"]
    assert STEPS - 2 <= steps <= STEPS and top["allocations_in_window"] == 2 * steps, top
    assert top["bytes"] == steps * 2 * MiB and top["bytes_per_step"] == 2 * MiB, top
    every = 10.0 * (steps - 2) / (steps - 1)  # steps - 1 intervals, one of them (nearly) 0
    assert abs(top["step_s"] - every) < 0.05, top
    assert d["summary"].startswith("+2.00 MiB per step (%d steps, one every %.1f s" % (steps, every)), d["summary"]
