"""How many times each report reads a trace (issue 15). Every replay loop of the reports goes
through one pass iterator (analyzer/pass.c); with VRAMTRACE_DEBUG_PASSES=1 the analyzer says at
exit how many passes it opened. The budgets are what the design needs: one pass (the sites at the
peaks are followed in it, analyzer/peak_sites.c), plus the phase-less leaks analysis's survey and
low points, independent of how many windows it looks at; html composes leaks and oom on its own
three passes. A pass that creeps in (a second replay per peak or per window) fails here, not only
in a benchmark.

A trace with an out-of-memory error costs more: the remedies (analyzer/remedies.c) replay the
model once more for the tensor peaks of each call, and replay the caching allocator under each
candidate setting (whatif's engine). Those simulations are counted apart ("allocator replays"),
and html may make no more of them than `oom` alone does."""
import json
import os
import re
import subprocess

import pytest

from conftest import CUDART, GOLDEN, PROGRAM_SOURCES, VRAMTRACE, trace

H200 = GOLDEN / "h200"


def passes(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMTRACE_")}
    env["VRAMTRACE_DEBUG_PASSES"] = "1"
    p = subprocess.run([str(VRAMTRACE), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    found = re.findall(r"^vramtrace: debug: (\d+) passes(?:, (\d+) allocator replays)?$", p.stderr, re.M)
    assert len(found) == 1, p.stderr
    return int(found[0][0]), int(found[0][1] or 0)


@pytest.mark.parametrize("trace,args,budget", [
    ("oom.vrt", ["report"], 1),            # totals, and the sites at each peak followed as they rise
    ("attach-ds.vrt", ["report"], 1),
    ("oom.vrt", ["timeline"], 1),
    # which OOM and what the program said after it; the model up to it; the remedies' call peaks
    ("oom.vrt", ["oom"], 3),
    # phase-less: survey (which keeps the state where teardown began), low points, then the live
    # sets at the lows (which also time the top site's steps)
    ("oom.vrt", ["leaks"], 3),
    ("attach-ds.vrt", ["leaks"], 3),
    ("leak-cycle.vrt", ["leaks"], 1),      # the survey, following the phases it sees: the phase's replay
    ("oom.vrt", ["export", "--format", "folded-peak"], 1),
    ("oom.vrt", ["export", "--format", "memory-viz"], 2),
    # totals (which also finds the OOM and surveys leaks' phases), peaks (whose model goes on to
    # the OOM and explains it, and, without a phase, to leaks' low points), timeline (with the
    # phase's replay, or the live sets at the low points): leaks rides them, in this process
    ("leak-cycle.vrt", ["html"], 3),
    ("oom.vrt", ["html"], 4),                      # and the remedies' call peaks
    ("attach-ds.vrt", ["html"], 3),
    ("remedies-ds-oom-offload.vrt", ["html"], 4),  # a phase, and an OOM after the last peak: pass 2 goes on to it
])
def test_each_report_reads_the_trace_a_bounded_number_of_times(tmp_path, trace, args, budget):
    out = ["-o", tmp_path / "out"] if args[0] in ("html", "export") else []
    n, _ = passes(*args, "-q", *out, H200 / trace)
    assert 1 <= n <= budget, f"vramtrace {' '.join(args)} {trace}: {n} passes, budget {budget}"


@pytest.mark.parametrize("trace", ["oom.vrt", "remedies-ds-oom-offload.vrt"])
def test_html_replays_the_allocator_no_more_than_oom_does(tmp_path, trace):
    _, by_oom = passes("oom", "-q", H200 / trace)
    _, by_html = passes("html", "-q", "-o", tmp_path / "out.html", H200 / trace)
    assert by_oom >= 1 and by_html == by_oom, (by_oom, by_html)
    _, without_oom = passes("html", "-q", "-o", tmp_path / "leaks.html", H200 / "leak-cycle.vrt")
    assert without_oom == 0


def test_no_pass_is_counted_without_the_variable():
    p = subprocess.run([str(VRAMTRACE), "timeline", "-q", H200 / "oom.vrt"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("VRAMTRACE_")}, timeout=120)
    assert p.returncode == 0 and "debug" not in p.stderr, p.stderr


@pytest.mark.parametrize("trace", sorted(p.stem for p in H200.glob("*.vrt")))
def test_the_phase_followed_in_the_survey_is_the_phases_own_replay(trace):
    """Without --phase, leaks replays the phases it sees entered in the survey's pass and keeps the
    picked one's replay (analyzer/cmd_leaks.c, struct follow): what it says is what a replay of
    that phase alone says (--phase, two passes), the reason for the pick aside."""
    picked = subprocess.run([VRAMTRACE, "leaks", "--json", "-q", H200 / f"{trace}.vrt"], capture_output=True,
                            text=True)
    assert picked.returncode == 0, picked.stderr
    auto = json.loads(picked.stdout)
    if auto["phase"] is None:  # no phase to follow (an attach, a job without phases): nothing followed
        assert auto["phases"] == [] and auto.get("phase_picked_because") is None
        return
    named = subprocess.run([VRAMTRACE, "leaks", "--json", "-q", "--phase", auto["phase"], H200 / f"{trace}.vrt"],
                           capture_output=True, text=True)
    assert named.returncode == 0, named.stderr
    alone = json.loads(named.stdout)
    assert auto.pop("phase_picked_because") and alone.pop("phase_picked_because") is None
    assert auto == alone


def test_a_phase_called_only_in_teardown_is_followed_as_its_own_replay_sees_it(tmp_path, python_exe):
    """The follower of a phase starts from the replay's state at the phase's first entry, not from
    nothing: a phase whose every call comes after teardown began is, to its own replay, never
    entered (the replay ends at teardown), and leaks without --phase says the same."""
    t = trace(tmp_path, [python_exe, PROGRAM_SOURCES / "phase_after_teardown.py"], env={"CUDART": str(CUDART)},
              run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    auto = subprocess.run([VRAMTRACE, "leaks", "--json", "-q", t.trace], capture_output=True, text=True)
    named = subprocess.run([VRAMTRACE, "leaks", "--json", "-q", "--phase", "train", t.trace], capture_output=True,
                           text=True)
    assert named.returncode == 2 and "never entered" in named.stderr, named.stderr
    assert (auto.returncode, auto.stdout, auto.stderr) == (named.returncode, named.stdout, named.stderr)


def test_a_phase_first_entered_after_walks_of_another_is_followed_as_its_own_replay_sees_it(tmp_path, python_exe):
    """The follower of train starts from the state the replay has at train's first entry: the
    retention walks of warmup's calls before it included (their count and time are in the
    output), so leaks without --phase says what leaks --phase train says."""
    t = trace(tmp_path, [python_exe, PROGRAM_SOURCES / "walk_before_phase.py"], env={"CUDART": str(CUDART)},
              run_args=("--phase", "warmup", "--phase", "train"))
    assert t.returncode == 0, t.stderr
    auto = subprocess.run([VRAMTRACE, "leaks", "--json", "-q", t.trace], capture_output=True, text=True)
    named = subprocess.run([VRAMTRACE, "leaks", "--json", "-q", "--phase", "train", t.trace], capture_output=True,
                           text=True)
    assert named.returncode == 0, named.stderr
    out = json.loads(named.stdout)
    assert out["phase"] == "train" and len(out["phases"]) == 4, out
    # warmup's calls were walked before train's first: more walks than train's own calls
    assert out["retention_walks"]["count"] > 4, out["retention_walks"]
    assert auto.returncode == 0 and not auto.stderr, auto.stderr
    picked = json.loads(auto.stdout)
    assert picked.pop("phase_picked_because").startswith("4 calls; memory at entry rises")
    out.pop("phase_picked_because")
    assert picked == out
