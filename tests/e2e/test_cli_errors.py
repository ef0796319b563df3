"""Names the user types that the trace does not have are errors, not silent fallbacks: a CI job
that runs `vramtrace leaks --phase trian --fail-on-growth` must fail, not pass on nothing
(docs/ux-defects items 13, 14)."""
import json
import os
import re
import subprocess

import pytest

from conftest import GOLDEN, SOURCE, TIMEOUT, VRAMTRACE, analyze

LEAK_CYCLE = GOLDEN / "h200" / "leak-cycle.vrt"


@pytest.mark.parametrize("command", ["report", "leaks"])
def test_an_unknown_until_mark_is_an_error(command):
    p = analyze(command, "--until-mark", "no-such-mark", LEAK_CYCLE, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f'vramtrace {command}: {LEAK_CYCLE}: no mark labelled "no-such-mark" in this trace (--until-mark names a '
        "mark the program made: vramtrace mark, vramtrace.mark())"]
    # The trace's own mark works, and stops the replay there.
    whole = analyze(command, "--json", "-q", LEAK_CYCLE).stdout
    cut = analyze(command, "--json", "-q", "--until-mark", "vramtrace-truth", LEAK_CYCLE).stdout
    assert cut != whole


@pytest.mark.parametrize("extra", [[], ["--json"], ["--fail-on-growth"]], ids=["text", "json", "fail-on-growth"])
def test_an_unknown_phase_is_an_error(extra):
    p = analyze("leaks", *extra, "--phase", "trian", LEAK_CYCLE, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f'vramtrace leaks: {LEAK_CYCLE}: no phase or mark named "trian" in this trace (without --phase, leaks picks '
        "the phase that explains the growth)"]
    good = analyze("leaks", *extra, "--phase", "train", LEAK_CYCLE, check=False)
    assert good.returncode == (1 if extra == ["--fail-on-growth"] else 0) and good.stdout


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_a_name_the_trace_has_that_never_became_a_phase_is_an_error(extra):
    """Engine.__init__ is a function of leak-cycle's stacks, never a phase of it (the job ran with
    --phase train; on CPython 3.9/3.10 a Class.method target can match nothing): leaks says so and
    fails instead of printing a table of 0 invocations with exit 0 (ux defect 47)."""
    p = analyze("leaks", *extra, "--phase", "Engine.__init__", LEAK_CYCLE, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f'vramtrace leaks: {LEAK_CYCLE}: "Engine.__init__" was never entered as a phase in this trace (the trace has '
        "the name, but no call of it became a phase: vramtrace run --phase Engine.__init__ records it)"]


def test_info_says_what_the_text_says_in_its_json():
    """info: no "rank -1" for a job that is not distributed; its JSON carries the command, host,
    start, duration and an exit status equal to the text's "(status N)"; -q is accepted."""
    text = analyze("info", "-q", GOLDEN / "h200" / "oom.vrt").stdout
    assert "rank" not in text.splitlines()[1] and text.splitlines()[1].startswith("process    pid 761, parent 760")
    status = int(re.search(r"^ended +exited normally \(status (\d+)\) after ([\d.]+) s$", text, re.M)[1])
    duration = float(re.search(r"^ended .* after ([\d.]+) s$", text, re.M)[1])
    info = json.loads(analyze("info", "--json", GOLDEN / "h200" / "oom.vrt").stdout)
    assert info["exit_status"] == status and info["signal"] is None
    assert round(info["duration_s"], 3) == duration
    assert info["cmdline"] == re.search(r"^command +(.*)$", text, re.M)[1]
    assert info["host"] == "vm" and info["rank"] == -1 and info["start_unix_s"] > 1.7e9


def test_every_long_option_takes_its_value_after_an_equals_sign(tmp_path):
    """--top=2 is --top 2 in every command; a traced command's own --a=b is left alone."""
    src = GOLDEN / "h200" / "leak-cycle.vrt"
    for command in ("report", "leaks", "diff"):
        extra = [src] if command == "diff" else []
        assert analyze(command, "--top=2", "-q", src, *extra).stdout == \
            analyze(command, "--top", "2", "-q", src, *extra).stdout
    assert analyze("leaks", "--phase=train", "--frames=1", "-q", src).stdout == \
        analyze("leaks", "--phase", "train", "--frames", "1", "-q", src).stdout
    p = analyze("run", f"--output={tmp_path / 'x.vrt'}", "--", "/bin/echo", "--a=b", "--c", check=False)
    assert p.stdout == "--a=b --c\n"
    p = analyze("run", "-f", f"--output={tmp_path / 'x.vrt'}", "/bin/echo", "--a=b", check=False)  # no "--"
    assert p.stdout == "--a=b\n"


def test_leaks_frames_sets_the_frames_shown_per_site():
    src = GOLDEN / "h200" / "leak-cycle.vrt"
    for n in (0, 1, 3):
        text = analyze("leaks", "-q", "--frames", n, src).stdout.split("survivors by site")[1]
        blocks = re.split(r"^ +[\d.]+ (?:B|KiB|MiB|GiB) +\d+x  .*$", text, flags=re.M)[1:]
        assert blocks and all(len(re.findall(r"^ {20,}at ", b, re.M)) == n for b in blocks[:3]), (n, blocks[:1])


@pytest.mark.parametrize("command", ["report", "leaks"])
def test_json_of_a_directory_is_a_list_however_many_traces_it_holds(tmp_path, command):
    """--json's shape follows what was named, not what a directory happens to hold: a file gives
    one process object, a directory (or several files) {"processes": [...]} even with one trace,
    so `jq '.processes[]'` on a run's directory works for one rank as for eight (ux defect 34)."""
    one = tmp_path / "one"
    one.mkdir()
    (one / "leak-cycle.vrt").write_bytes(LEAK_CYCLE.read_bytes())
    alone = json.loads(analyze(command, "--json", "-q", LEAK_CYCLE).stdout)
    assert "processes" not in alone and alone["file"] == str(LEAK_CYCLE)
    listed = json.loads(analyze(command, "--json", "-q", str(one) + "/").stdout)
    assert [p["pid"] for p in listed["processes"]] == [alone["pid"]]
    both = json.loads(analyze(command, "--json", "-q", LEAK_CYCLE, one / "leak-cycle.vrt").stdout)
    assert len(both["processes"]) == 2


@pytest.mark.parametrize("command", [["report"], ["leaks"], ["oom"], ["timeline"], ["info"], ["dump"], ["whatif"],
                                     ["html", "-o", "{tmp}/x.html"], ["export", "--format", "folded", "-o", "{tmp}/x.f"],
                                     ["diff", "{dir}"]], ids=lambda c: c[0])
def test_every_trace_reading_command_takes_a_runs_directory(tmp_path, command):
    """What `run -o DIR/` wrote is what every command reads (ux defect 45: whatif refused it)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "vramtrace.761.vrt").write_bytes((GOLDEN / "h200" / "oom.vrt").read_bytes())
    args = [a.format(tmp=tmp_path, dir=run_dir) for a in command]
    p = analyze(args[0], "-q", *args[1:], str(run_dir) + "/", check=False)
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)


def test_exit_codes_mean_what_cli_md_says():
    """docs/cli.md's table covers what the commands do (ux defect 48: oom without an out-of-memory
    event exits 1, documented only as 'found what was asked about'; a running process's refusal
    is 4, documented only as a file that could not be read)."""
    table = dict(re.findall(r"^\| (\d) \| (.*) \|$", (SOURCE / "docs" / "cli.md").read_text(), re.M))
    no_oom = analyze("oom", "-q", LEAK_CYCLE, check=False).returncode
    assert "`oom` found no out-of-memory event" in table[str(no_oom)], (no_oom, table)
    grows = analyze("leaks", "-q", "--fail-on-growth", LEAK_CYCLE, check=False).returncode
    assert "`leaks --fail-on-growth` found memory that grows" in table[str(grows)], (grows, table)
    untraced = analyze("mark", os.getpid(), "hello", check=False)  # this process: not traced
    assert "is not traced" in untraced.stderr
    assert "a running process could not be reached or refused" in table[str(untraced.returncode)], table


def test_info_shows_the_pytorch_release_the_trace_records():
    """trace-format.md says `info` shows the torch key; it did not (ux defect 50)."""
    src = GOLDEN / "h200" / "whatif-default.vrt"
    recorded, = re.findall(r"^# torch = (.+)$", analyze("dump", "-q", src).stdout, re.M)[:1]
    assert f"pytorch    {recorded}" in analyze("info", src).stdout.splitlines()
    assert json.loads(analyze("info", "--json", src).stdout)["torch"] == recorded
    assert json.loads(analyze("info", "--json", GOLDEN / "h200" / "oom.vrt").stdout)["torch"] is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("command", [["report"], ["leaks", "--json"], ["dump"], ["timeline", "--csv"],
                                     ["html", "-o", "-"], ["export", "--format", "chrome", "-o", "-"]])
def test_output_that_did_not_reach_standard_output_is_an_error(command):
    """Standard output on a full disk: the command says so and exits 4, not 0 with the output
    lost (html's page is larger than stdio's buffer: its write failed before the last flush)."""
    with open("/dev/full", "w") as full:
        p = subprocess.run([str(VRAMTRACE), *command, "-q", str(LEAK_CYCLE)], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=TIMEOUT)
    assert p.returncode == 4, (command, p.returncode, p.stderr)
    assert "cannot write to standard output" in p.stderr


def test_a_chart_that_starts_after_the_traces_end_says_so():
    """leak-cycle.vrt ends at 5.876 s: a chart of 100-200 s holds the end's figures (what the
    process held when it ended), and a line says the window is past the end."""
    trace = GOLDEN / "h200" / "leak-cycle.vrt"
    p = subprocess.run([str(VRAMTRACE), "timeline", "--from", "100", "--to", "200", str(trace)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "from 100.000 s" in p.stdout.splitlines()[0]
    assert p.stderr == (f"vramtrace timeline: {trace}: --from 100.000 s is after the trace's end (5.876 s): the chart "
                        f"holds what it held at its end\n")
    within = subprocess.run([str(VRAMTRACE), "timeline", "--from", "5", str(trace)], capture_output=True, text=True,
                            timeout=60)
    assert within.returncode == 0 and within.stderr == "", within.stderr


@pytest.mark.parametrize("by", ["site", "category"])
def test_diff_at_a_time_after_the_traces_end_says_it_takes_the_end(by):
    """`--at 1e9` is a way to say "at the end": taken so, and said, with the end's time shown."""
    trace = GOLDEN / "h200" / "leak-cycle.vrt"
    late = subprocess.run([str(VRAMTRACE), "diff", "--by", by, "--at", "999", "--at", "1000", str(trace)],
                          capture_output=True, text=True, timeout=60)
    end = subprocess.run([str(VRAMTRACE), "diff", "--by", by, "--at", "5.876", "--at", "5.876", str(trace)],
                         capture_output=True, text=True, timeout=60)
    assert late.returncode == 0 == end.returncode, late.stderr
    assert late.stderr.splitlines() == [f"vramtrace diff: {trace}: --at {t}.000 s is after the trace's end: taken at "
                                        f"its end (5.876 s)" for t in (999, 1000)]
    assert late.stdout == end.stdout and "5.876 s" in late.stdout.splitlines()[0]
