"""Why memory survives: retention walks on the test double.

tests/programs/retain_buffers.py keeps, in every train() call, one buffer in each of four ways
(a module-level list, a hook's closure in a module-level dict, a reference cycle the disabled GC
never collects, a raw allocation no Python object owns); the sizes are the program's own
(4, 2, 3 and 1 MiB). `leaks --json` must name what holds each, call by call.
"""
import pytest

from conftest import CUDART, DOUBLES, MiB, PROGRAM_SOURCES, SOURCE, analyze, trace as traced

SCRIPT = PROGRAM_SOURCES / "retain_buffers.py"
CALLS = 3
KEPT = {"registry": 4 * MiB, "hook": 2 * MiB, "cycle": 3 * MiB, "raw": 1 * MiB}


def trace(tmp_path, argv, run_args=()):
    return traced(tmp_path, argv, env={"CUDART": str(CUDART)}, run_args=run_args)


def leaks(t, *args):
    import json

    return json.loads(analyze("leaks", "--json", "--quiet", "--phase", "train", *args, t.trace).stdout)


def by_line(survivors):
    """Survivor groups keyed by the line of train() that allocated them."""
    out = {}
    for s in survivors:
        lines = [f["line"] for f in s["frames"] if f.get("function") == "train"]
        out.setdefault(lines[0], []).append(s)
    return out


def train_line(text):
    for n, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if text in line and "# kept" in line:
            return n
    raise AssertionError(text)


@pytest.fixture(scope="module")
def run(tmp_path_factory, python_exe):
    t = trace(tmp_path_factory.mktemp("retain"), [python_exe, SCRIPT, CALLS], run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    return t, leaks(t)


def test_growth_per_call_is_what_the_program_keeps(run):
    t, d = run
    assert t.stdout.startswith("kept per call: registry 4194304, hook 2097152, cycle 3145728, raw 1048576")
    assert d["growth_per_invocation_bytes"] == sum(KEPT.values())
    assert [p["survivor_bytes"] for p in d["phases"]] == [sum(KEPT.values())] * CALLS


def test_every_call_has_one_group_per_way_of_keeping(run):
    _, d = run
    groups = by_line(d["survivors"])
    for name, line in (("registry", train_line("REGISTRY")), ("hook", train_line("HOOKS")),
                       ("cycle", train_line("Cycle(")), ("raw", train_line("keep_raw("))):
        assert sorted(g["phase_index"] for g in groups[line]) == list(range(1, CALLS + 1)), name
        assert all(g["bytes"] == KEPT[name] for g in groups[line]), name


def test_a_module_level_list_is_named_with_its_index(run):
    _, d = run
    for g in by_line(d["survivors"])[train_line("REGISTRY")]:
        assert g["held_by_status"] == "found"
        assert g["held_by"] == [["__main__.REGISTRY[%d] (DeviceBuffer)" % (g["phase_index"] - 1)]]


def test_a_hook_closure_is_named_through_the_function_and_its_variable(run):
    _, d = run
    for g in by_line(d["survivors"])[train_line("HOOKS")]:
        assert g["held_by_status"] == "found"
        assert g["held_by"] == [["__main__.HOOKS[%d] (function make_hook.<locals>.hook)" % (g["phase_index"] - 1),
                                 "closure variable state (DeviceBuffer)"]]


def test_a_cycle_no_root_reaches_is_unreachable_and_says_so(run):
    _, d = run
    for g in by_line(d["survivors"])[train_line("Cycle(")]:
        assert g["held_by_status"] == "unreachable"
        assert g["held_by"] == [["a reference cycle (the cyclic GC is off): Cycle.me (Cycle)", ".buf (DeviceBuffer)"]]


def test_memory_no_python_object_owns_is_not_python(run):
    _, d = run
    for g in by_line(d["survivors"])[train_line("keep_raw(")]:
        assert (g["held_by_status"], g["held_by"]) == ("not_python", [])


def test_the_text_report_says_what_holds_each_site(run):
    t, _ = run
    text = analyze("leaks", "--quiet", "--phase", "train", t.trace).stdout
    assert "held by: 4.00 MiB  __main__.REGISTRY[0] (DeviceBuffer)" in text
    assert "__main__.HOOKS[0] (function make_hook.<locals>.hook) -> closure variable state (DeviceBuffer)" in text
    assert "held only by a cycle or native code: a reference cycle (the cyclic GC is off): Cycle.me (Cycle) -> .buf (DeviceBuffer)" in text
    assert "held by: no Python object" in text


def test_the_last_call_is_measured_where_teardown_began(run):
    t, d = run
    # Teardown frees everything the program kept; the last call's survivors are counted before it.
    assert d["phases"][-1]["live_bytes_at_next_entry"] == CALLS * sum(KEPT.values())
    assert "measured where teardown began" in analyze("leaks", "--quiet", "--phase", "train", t.trace).stdout
    assert len(t.events("exiting")) == 1


def test_retention_off_walks_nothing(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 2], run_args=("--phase", "train", "--retain", "off"))
    assert not t.events("walk") and not t.events("owner")
    d = leaks(t)
    assert {g["held_by_status"] for g in d["survivors"]} == {"off"}
    assert d["growth_per_invocation_bytes"] == sum(KEPT.values())


def test_nothing_is_walked_when_nothing_survives(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 4, "clean"], run_args=("--phase", "train"))
    assert t.returncode == 0
    assert not t.events("walk")
    assert leaks(t)["survivors"] == []


def test_a_walk_cut_short_by_its_budget_says_so_once(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 3, "deep"], run_args=("--phase", "train", "--retain", "0.000001"))
    assert t.returncode == 0
    assert t.stderr.count("retention walk stopped after") == 1, t.stderr
    groups = by_line(leaks(t)["survivors"])[train_line("REGISTRY")]
    assert {g["held_by_status"] for g in groups} == {"timed_out"}


def test_walks_the_budget_skips_say_timed_out_and_say_so_once(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 3, "spent"], run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    assert t.stderr.count("retention walks used their share of the run") == 1, t.stderr
    assert "--retain SECONDS" in t.stderr
    walks = t.events("walk")
    assert len(walks) == 3 and all(w["status"] == 1 and w["objects"] == 0 for w in walks), walks  # 2, 3, exit
    groups = by_line(leaks(t)["survivors"])[train_line("REGISTRY")]
    assert {g["held_by_status"] for g in groups} == {"timed_out"}


def test_a_later_walk_explains_what_a_skipped_walk_did_not(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 3, "spent-snapshot", tmp_path / "snap.vrt"], run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    d = leaks(t)
    groups = by_line(d["survivors"])[train_line("REGISTRY")]
    assert sorted(g["phase_index"] for g in groups) == [1, 2, 3]
    for g in groups:
        assert g["held_by_status"] == "found", g
        assert g["held_by"] == [["__main__.REGISTRY[%d] (DeviceBuffer)" % (g["phase_index"] - 1)]]
    # what keeps it alive counts each survivor once, by the walk that answered, not the skipped one
    status = d["kept_alive_by_status"]
    assert status["timed_out"] == 0
    assert sum(status.values()) == sum(p["survivor_bytes"] for p in d["phases"])


def test_seconds_per_walk_lift_the_share_of_the_run(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 3, "spent"], run_args=("--phase", "train", "--retain", "30"))
    assert t.returncode == 0, t.stderr
    assert "share of the run" not in t.stderr
    groups = by_line(leaks(t)["survivors"])[train_line("REGISTRY")]
    assert {g["held_by_status"] for g in groups} == {"found"}


def test_report_measures_the_end_where_teardown_began_and_says_what_is_live(run):
    import json

    t, _ = run
    report = json.loads(analyze("report", "--json", "--quiet", t.trace).stdout)
    # The program kept everything; the interpreter's teardown freed it, after the EXITING mark.
    device = next(d for d in report["devices"] if d["kind"] == "device")
    assert device["live_bytes_at_end"] == CALLS * sum(KEPT.values())
    assert report["teardown_s"] is not None
    text = analyze("report", "--quiet", t.trace).stdout
    assert '"at the end" below is where teardown began' in text
    assert "by what it is (the last retention walk" in text


def test_objects_that_misbehave_when_looked_at_neither_break_the_job_nor_the_walk(tmp_path, python_exe):
    t = trace(tmp_path, [python_exe, SCRIPT, 3, "hostile"], run_args=("--phase", "train"))
    assert t.returncode == 0 and "retention walks disabled" not in t.stderr, t.stderr
    assert t.stdout.startswith("kept per call:")
    groups = by_line(leaks(t)["survivors"])[train_line("REGISTRY")]
    assert {g["held_by_status"] for g in groups} == {"found"}
    for g in groups:
        # reached through the hostile object's __dict__, which the walk reads without asking it
        assert g["held_by"][0][0].startswith("__main__.REGISTRY[%d][2]" % (g["phase_index"] - 1)), g["held_by"]
        assert g["held_by"][0][-1].endswith("(DeviceBuffer)")


def test_a_snapshot_from_the_python_api_carries_a_walk_that_names_what_is_live(tmp_path, python_exe):
    from conftest import SOURCE

    snap = tmp_path / "snap.vrt"
    t = traced(tmp_path, [python_exe, PROGRAM_SOURCES / "retain_snapshot.py", snap],
               env={"CUDART": str(CUDART), "VRAMTRACE_TEST_PYTHON": str(SOURCE / "python")})
    assert t.stdout.strip() == "True", t.stderr
    dump = analyze("dump", "-q", snap).stdout
    assert "reason=3 status=0" in dump  # VRT_WALK_SNAPSHOT, complete
    owners = [line for line in dump.splitlines() if " owner " in line]
    assert len(owners) == 1 and "size=1048576" in owners[0] and owners[0].endswith("held_by __main__.KEEP[0] (Buf)")


def test_a_library_installed_outside_site_packages_is_not_the_users_code(tmp_path, python_exe):
    lib = PROGRAM_SOURCES / "pylib"
    t = traced(tmp_path, [python_exe, PROGRAM_SOURCES / "retain_library.py"], run_args=("--phase", "train"),
               env={"CUDART": str(CUDART), "PYTHONPATH": str(lib)})
    assert t.returncode == 0, t.stderr
    line = next(n for n, text in enumerate((PROGRAM_SOURCES / "retain_library.py").read_text().splitlines(), 1)
                if "the line the headline names" in text)
    assert str(lib) in t.dump_text  # the INFO fact python.library_paths
    inner = next(n for n, text in enumerate((lib / "fakeds" / "__init__.py").read_text().splitlines(), 1)
                 if "rt.cudaMalloc" in text)
    d = leaks(t)
    assert d["summary"] == "+1.00 MiB per train() call: 100%% from train -> fakeds.initialize (retain_library.py:%d, in " \
        "__init__.py:%d)" % (line, inner), d["summary"]


def test_a_library_in_a_site_packages_directory_is_not_the_users_code(tmp_path, python_exe):
    # no *.dist-info beside it, so python.library_paths does not name it: the directory's name does
    import shutil

    site = tmp_path / "venv" / "site-packages"
    shutil.copytree(PROGRAM_SOURCES / "pylib" / "fakeds", site / "fakeds")
    t = traced(tmp_path, [python_exe, PROGRAM_SOURCES / "retain_library.py"], run_args=("--phase", "train"),
               env={"CUDART": str(CUDART), "PYTHONPATH": str(site)})
    assert t.returncode == 0, t.stderr
    assert str(site) not in t.dump_text
    d = leaks(t)
    assert d["summary"].startswith("+1.00 MiB per train() call: 100% from train -> fakeds.initialize "
                                   "(retain_library.py:"), d["summary"]


def test_a_snapshot_of_a_running_job_carries_a_walk_run_at_its_next_safe_point(tmp_path, python_exe):
    import subprocess

    from conftest import VRAMTRACE, clean_env

    env = clean_env({"CUDART": str(CUDART)})
    job = subprocess.Popen([str(VRAMTRACE), "run", "-q", "-o", str(tmp_path / "run.vrt"), "--", python_exe,
                            str(PROGRAM_SOURCES / "retain_running.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, env=env, cwd=tmp_path)
    try:
        pid, word = job.stdout.readline().split()
        assert word == "ready"
        snap = tmp_path / "snap.vrt"
        analyze("snapshot", pid, "-o", snap)
    finally:
        job.stdin.close()
        job.wait(timeout=60)
    dump = analyze("dump", "-q", snap).stdout
    assert "reason=3 status=0" in dump
    owners = [line for line in dump.splitlines() if " owner " in line]
    assert len(owners) == 1 and owners[0].endswith("held_by __main__.CACHE['weights'] (Buf)"), owners


# ---- what keeps it alive, by root ----------------------------------------------------------

def roots_of(d):
    return {r["root"]: r for r in d["kept_alive_by"]}


def test_kept_alive_by_folds_a_roots_numbered_entries_into_one(run):
    # One line a person acts on: the registry's and the hook dict's entries of every call are one
    # root each (clearing REGISTRY frees all of it), the cycle and the raw allocation by status.
    t, d = run
    roots = roots_of(d)
    assert roots["__main__.REGISTRY[*] (DeviceBuffer)"]["bytes"] == CALLS * KEPT["registry"]
    assert roots["__main__.REGISTRY[*] (DeviceBuffer)"]["objects"] == CALLS
    assert roots["__main__.HOOKS[*] (function make_hook.<locals>.hook)"]["bytes"] == CALLS * KEPT["hook"]
    status = d["kept_alive_by_status"]
    assert status["not_python"] == CALLS * KEPT["raw"] and status["unreachable"] == CALLS * KEPT["cycle"]
    assert status["found"] == CALLS * (KEPT["registry"] + KEPT["hook"])
    text = analyze("leaks", "--quiet", "--phase", "train", t.trace).stdout
    assert "kept alive by" in text and "__main__.REGISTRY[*] (DeviceBuffer)  (3 objects)" in text


def test_the_demo_names_the_registry_that_keeps_its_raw_pointers(tmp_path, python_exe):
    # scripts/demo/train_leak.py keeps each call's engine in a module-level list; the engine holds
    # its buffers as ctypes pointers (what cudaMalloc through ctypes gives), nothing else.
    t = traced(tmp_path, [python_exe, SOURCE / "scripts/demo/train_leak.py"], env={"LD_LIBRARY_PATH": str(DOUBLES)},
               run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    d = leaks(t)
    per_call = d["growth_per_invocation_bytes"]
    assert per_call == 84 * MiB
    assert d["kept_alive_by"] == [{"root": "__main__._ENGINES[*] (Engine)", "bytes": 4 * per_call, "objects": 16}]
    for s in d["survivors"]:
        assert s["held_by_status"] == "found" and s["held_by"][0][0] == "__main__._ENGINES[%d] (Engine)" % (
            s["phase_index"] - 1), s["held_by"]
