"""One option parser (analyzer/cli.c vrt_args_parse): the options commands share mean the same in
every command that takes them, --until-mark ends the analysis at a mark in every command that
reads a trace, and a wrong option is a usage error (exit 2) that names it (ux-defects item 35)."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import CUDART, GOLDEN, TIMEOUT, VRAMTRACE, analyze, on_a_terminal, trace
from test_html import page_data

H200 = GOLDEN / "h200"
LEAK_CYCLE = H200 / "leak-cycle.vrt"
WHATIF = H200 / "whatif-default.vrt"
OOM_OFFLOAD = H200 / "remedies-ds-oom-offload.vrt"  # marks "batch 1".."batch 16", an OOM, then "vramtrace-truth"


def mark_time(trace, label):
    """The time (s) of the first mark labelled label, as dump prints it."""
    for line in analyze("dump", trace).stdout.splitlines():
        fields = line.split(None, 3)
        if len(fields) == 4 and fields[2] == "mark" and fields[3] == f'"{label}"':
            return float(fields[0])
    raise AssertionError(f"no mark {label} in {trace}")


READERS = {  # a command line that reads LEAK_CYCLE, {out}: a file it may write
    "report": ["report"], "leaks": ["leaks"], "oom": ["oom"], "timeline": ["timeline"],
    "html": ["html", "-o", "{out}"], "export": ["export", "--format", "chrome", "-o", "{out}"],
    "diff": ["diff", str(LEAK_CYCLE)], "whatif": ["whatif"], "dump": ["dump"],
}


@pytest.mark.parametrize("command", sorted(READERS))
def test_every_trace_reader_takes_until_mark_and_an_unknown_one_is_an_error(tmp_path, command):
    args = [a.format(out=tmp_path / "out") for a in READERS[command]]
    p = analyze(*args, "--until-mark", "no-such-mark", LEAK_CYCLE, check=False)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stderr)
    assert p.stderr.splitlines() == [
        f'vramtrace {command}: {LEAK_CYCLE}: no mark labelled "no-such-mark" in this trace (--until-mark names a '
        "mark the program made: vramtrace mark, vramtrace.mark())"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", sorted(READERS))
def test_until_mark_takes_its_value_after_an_equals_sign_too(tmp_path, command):
    args = [a.format(out=tmp_path / "out") for a in READERS[command]]
    spaced = analyze(*args, "--until-mark", "no-such-mark", LEAK_CYCLE, check=False)
    joined = analyze(*args, "--until-mark=no-such-mark", LEAK_CYCLE, check=False)
    assert (joined.returncode, joined.stderr) == (spaced.returncode, spaced.stderr) == (2, joined.stderr)
    assert "no-such-mark" in joined.stderr


def test_oom_until_mark_explains_only_an_oom_before_the_mark():
    assert analyze("oom", "-q", "--until-mark", "vramtrace-truth", OOM_OFFLOAD).stdout == \
        analyze("oom", "-q", OOM_OFFLOAD).stdout
    p = analyze("oom", "--until-mark", "batch 16", OOM_OFFLOAD, check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().endswith('no out-of-memory event in this trace before the mark "batch 16"'), p.stderr


def test_oom_of_a_directory_picks_the_trace_with_an_oom_before_the_mark(tmp_path):
    for name in ("oom.vrt", "remedies-ds-oom-offload.vrt"):  # marks "batch N"; the second also "vramtrace-truth"
        (tmp_path / name).write_bytes((H200 / name).read_bytes())
    p = analyze("oom", "-q", "--until-mark", "vramtrace-truth", tmp_path)
    assert p.stdout == analyze("oom", "-q", OOM_OFFLOAD).stdout.replace(str(OOM_OFFLOAD), str(tmp_path / OOM_OFFLOAD.name))
    p = analyze("oom", "--until-mark", "batch 16", tmp_path, check=False)
    assert p.returncode == 1 and f"no trace in {tmp_path} has what `oom` looks for" in p.stderr


def test_timeline_until_mark_ends_the_chart_at_the_mark():
    at = mark_time(WHATIF, "step 1")
    whole = analyze("timeline", "--csv", "-q", WHATIF).stdout.splitlines()
    cut = analyze("timeline", "--csv", "-q", "--until-mark", "step 1", WHATIF).stdout.splitlines()
    assert float(whole[-1].split(",")[0]) > at + 0.5
    # the last bucket holds the last event before the mark: it ends within one bucket past it
    width = float(cut[2].split(",")[0]) - float(cut[1].split(",")[0])
    assert at - width <= float(cut[-1].split(",")[0]) <= at + width


def test_export_chrome_until_mark_has_no_event_past_the_mark(tmp_path):
    at_us = mark_time(WHATIF, "step 1") * 1e6
    analyze("export", "-q", "--format", "chrome", "--until-mark", "step 1", WHATIF, "-o", tmp_path / "cut.json")
    analyze("export", "-q", "--format", "chrome", WHATIF, "-o", tmp_path / "whole.json")
    cut = [e for e in json.loads((tmp_path / "cut.json").read_text())["traceEvents"] if e["ph"] != "M"]
    whole = [e for e in json.loads((tmp_path / "whole.json").read_text())["traceEvents"] if e["ph"] != "M"]
    assert cut and max(e["ts"] for e in cut) < at_us < max(e["ts"] for e in whole)


def test_diff_until_mark_is_the_state_at_the_mark():
    at = mark_time(WHATIF, "step 1")
    cut = json.loads(analyze("diff", "--json", "-q", "--until-mark", "step 1", WHATIF, LEAK_CYCLE,
                             check=False).stdout or "null")
    assert cut is None  # LEAK_CYCLE has no such mark: every trace read must have it
    cut = json.loads(analyze("diff", "--json", "-q", "--until-mark", "step 1", WHATIF, WHATIF).stdout)
    at_time = json.loads(analyze("diff", "--json", "-q", WHATIF, "--at", at, "--at", at).stdout)
    whole = json.loads(analyze("diff", "--json", "-q", WHATIF, WHATIF).stdout)
    assert cut["total_a"] == at_time["total_a"] != whole["total_a"]


def test_whatif_until_mark_replays_the_requests_before_the_mark():
    whole = json.loads(analyze("whatif", "--json", "-q", WHATIF).stdout)
    cut = json.loads(analyze("whatif", "--json", "-q", "--until-mark", "step 1", WHATIF).stdout)
    dumped = analyze("dump", "--until-mark", "step 1", WHATIF).stdout
    assert 0 < cut["requests"] < whole["requests"]
    assert cut["requests"] == len(re.findall(r"^\S+ t\d+ block_alloc ", dumped, re.M))


def test_html_until_mark_reaches_its_leaks_section(tmp_path):
    """html's leaks section rides html's own passes over the trace, which ends at the mark: so does it."""
    analyze("html", "-q", "--until-mark", "step 3", WHATIF, "-o", tmp_path / "cut.html")
    analyze("html", "-q", WHATIF, "-o", tmp_path / "whole.html")
    leaks_cut = json.loads(analyze("leaks", "--json", "-q", "--until-mark", "step 3", WHATIF).stdout)
    leaks_whole = json.loads(analyze("leaks", "--json", "-q", WHATIF).stdout)
    key = [k for k in leaks_cut if leaks_cut[k] != leaks_whole[k] and isinstance(leaks_cut[k], (int, float))]
    assert key, "the mark changes no figure of leaks"
    cut, whole = (tmp_path / "cut.html").read_text(), (tmp_path / "whole.html").read_text()
    for k in key:
        assert f'"{k}": {json.dumps(leaks_cut[k])}' in cut and f'"{k}": {json.dumps(leaks_whole[k])}' in whole


def test_html_until_mark_draws_no_time_past_the_mark(tmp_path):
    """The page's time axis ends at the last event before the mark, with no padding past it
    (the whole trace's page pads a little into the time the process lived on)."""
    at = mark_time(WHATIF, "step 1")
    analyze("html", "-q", "--until-mark", "step 1", WHATIF, "-o", tmp_path / "cut.html")
    d = page_data(tmp_path / "cut.html")
    assert d["from"] + d["width"] * d["buckets"] <= at + 1e-6 < mark_time(WHATIF, "step 2")


# ---- shared options ------------------------------------------------------------------------------

def test_shared_options_are_accepted_where_they_make_sense():
    assert analyze("info", "-q", LEAK_CYCLE).stdout == analyze("info", "--quiet", LEAK_CYCLE).stdout
    for n in (0, 1, 3):  # oom --frames, as report's and leaks': frames under each site, the request's too
        text = analyze("oom", "-q", "--frames", n, OOM_OFFLOAD).stdout
        sites = re.split(r"^ +[\d.]+ (?:B|KiB|MiB|GiB) +\d+x  .*$", text, flags=re.M)[1:]
        assert len(sites) > 2
        assert all(len(re.findall(r"^ {20,}(?:at|in) ", s, re.M)) == n for s in sites[:3]), (n, sites[:2])
    assert analyze("oom", "-q", "--top=3", "--frames=1", OOM_OFFLOAD).stdout == \
        analyze("oom", "-q", "--top", "3", "--frames", "1", OOM_OFFLOAD).stdout


@pytest.mark.parametrize("command", sorted(READERS) + ["info"])
def test_an_unknown_option_is_a_usage_error_naming_it(tmp_path, command):
    args = [a.format(out=tmp_path / "out") for a in READERS.get(command, [command])]
    p = analyze(*args, "--no-such-option", LEAK_CYCLE, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines()[0] == f"vramtrace {command}: unknown option '--no-such-option'"
    if command != "info":  # info takes no option with a value
        p = analyze(*args, LEAK_CYCLE, "--until-mark", check=False)
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.splitlines()[0] == f"vramtrace {command}: --until-mark takes a value"


def test_an_option_without_its_value_says_so():
    p = analyze("report", LEAK_CYCLE, "--top", check=False)
    assert p.returncode == 2 and p.stderr.splitlines()[0] == "vramtrace report: --top takes a value"


def test_a_repeated_option_is_counted():
    p = analyze("diff", WHATIF, "--at", "1", "--at", "2", "--at", "3", check=False)
    assert p.returncode == 2 and p.stderr.splitlines()[0] == "vramtrace diff: --at is given at most 2 times"


def test_a_double_dash_ends_the_options(tmp_path):
    (tmp_path / "-odd.vrt").write_bytes(LEAK_CYCLE.read_bytes())
    run = lambda *args: subprocess.run([str(VRAMTRACE), *args], cwd=tmp_path, capture_output=True, text=True,
                                       timeout=60)
    p = run("info", "--", "-odd.vrt")
    assert p.returncode == 0 and p.stdout.startswith("trace      -odd.vrt"), p.stdout[:100] + p.stderr
    p = run("info", "-odd.vrt")
    assert p.returncode == 2 and "unknown option '-odd.vrt'" in p.stderr


# ---- frame lines fit the terminal (ux-defects item 28) -------------------------------------------

WIDE = [H200 / f"{n}.vrt" for n in ("nccl", "jax", "oom", "torch-expandable", "cupy")]  # long C++ frames


def frame_lines(text):
    """(prefix, frame) of every site headline and frame line of report/leaks/oom text."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^( +[\d.]+ (?:B|KiB|MiB|GiB) +\d+x  | {22}(?:at|in) )(.*)$", line)
        if m:
            out.append((m[1], m[2]))
    return out


def place(frame):
    """What a frame line must keep whole: its "(file:line)" or "+0x.. (module)" end."""
    frame = re.sub(r"  \(x\d+, recursion\)$", "", frame)
    m = re.search(r"(\+0x[0-9a-f]+ \([^()]*\)|\([^()]*:\d+\))$", frame)
    return m[1] if m else ""


@pytest.mark.parametrize("command", ["report", "leaks", "oom"])
def test_width_cuts_frame_lines_keeping_their_place(command):
    wide = 0
    for trace in WIDE if command != "oom" else [H200 / "oom.vrt"]:
        whole = analyze(command, "-q", trace).stdout
        assert whole == analyze(command, "-q", "--width", "0", trace).stdout  # a pipe: unchanged
        cut = analyze(command, "-q", "--width", "100", trace).stdout
        a, b = frame_lines(whole), frame_lines(cut)
        assert len(a) == len(b), trace
        wide += any(len(p + f) > 100 for p, f in a)
        for (pa, fa), (pb, fb) in zip(a, b):
            assert pa == pb and len(pb + fb) <= 100, (pb + fb)
            if len(pa + fa) <= 100:
                assert fa == fb
            else:
                assert "\u2026" in fb and place(fb) == place(fa), (fa, fb)
        others = lambda text: [l for l in text.splitlines() if not frame_lines(l)]
        assert others(whole) == others(cut)  # only frame lines change
    assert wide  # there was something to cut


def test_a_narrow_terminal_keeps_the_method_and_the_line():
    """At 60 columns a frame's place does not fit beside its name: the name keeps its last
    component (the method), the place its end (the file and line), not a cut through both."""
    cut = analyze("leaks", "-q", "--phase", "train", "--width", "60", H200 / "retain-ds-zero2.vrt").stdout
    head = next(l for l in cut.splitlines() if re.match(r"^ +[\d.]+ [KMG]iB +\d+x ", l))
    assert len(head) <= 60 and re.search(r"\u2026\.setup_buckets \(\u2026[^ ]*_2\.py:3266\)$", head), head


def test_a_cut_signature_loses_its_arguments_first():
    cut = analyze("report", "-q", "--width", "100", H200 / "nccl.vrt").stdout
    assert re.search(r"in initTransportsRank\(\u2026\)\+0x[0-9a-f]+ \(libnccl\.so\.2\)$", cut, re.M), cut


def test_a_recursion_count_stays_inside_the_width():
    whole = analyze("report", "-q", LEAK_CYCLE).stdout
    cut = analyze("report", "-q", "--width", "70", LEAK_CYCLE).stdout
    notes = lambda text: re.findall(r"\(x\d+, recursion\)$", text, re.M)
    assert notes(whole) and notes(cut) == notes(whole)
    assert all(len(p + f) <= 70 for p, f in frame_lines(cut))


def sized_terminal(argv, columns):
    """argv's stdout when it is a terminal of that many columns (the size set before it starts)."""
    import fcntl
    import os
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    p = subprocess.Popen([str(a) for a in argv], stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    return out.decode().replace("\r\n", "\n")


def test_on_a_terminal_frame_lines_fit_its_width():
    trace = H200 / "nccl.vrt"
    for columns in (90, 132):
        shown = sized_terminal([VRAMTRACE, "report", "-q", trace], columns)
        assert shown == analyze("report", "-q", "--width", columns, trace).stdout
        assert all(len(p + f) <= columns for p, f in frame_lines(shown))
    # a terminal that does not say its size: $COLUMNS
    shown = on_a_terminal([VRAMTRACE, "report", "-q", trace], {**os.environ, "COLUMNS": "77"})
    assert shown.replace("\r\n", "\n") == analyze("report", "-q", "--width", "77", trace).stdout


def test_timeline_width_is_the_charts_width():
    piped = analyze("timeline", "-q", LEAK_CYCLE).stdout
    assert piped == analyze("timeline", "-q", "--width", "0", LEAK_CYCLE).stdout == \
        analyze("timeline", "-q", "--width", "100", LEAK_CYCLE).stdout
    narrow = analyze("timeline", "-q", "--width", "60", LEAK_CYCLE).stdout
    rows = lambda text: text.splitlines()[1:]  # below the header line (it names the trace)
    assert 55 <= max(map(len, rows(narrow))) <= 60 and 95 <= max(map(len, rows(piped))) <= 100
    assert sized_terminal([VRAMTRACE, "timeline", "-q", LEAK_CYCLE], 72) == \
        analyze("timeline", "-q", "--width", "72", LEAK_CYCLE).stdout


# ---- the locale's character set (analyzer/charset.h; docs/ux-audit.md #76) ------------------

UNICODE_SCRIPT = '''
import ctypes, sys
rt = ctypes.PyDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
def r\u00e9server_\u00dbn(n):  # U+00DB is C3 9B in UTF-8: 0x9b is CSI to a terminal in an 8-bit set
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), n)
r\u00e9server_\u00dbn(1 << 20)
'''


def in_locale(locale, *args):
    env = dict(os.environ, LC_ALL=locale)
    return subprocess.run([str(VRAMTRACE), *map(str, args)], capture_output=True, env=env, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def unicode_trace(tmp_path_factory, python_exe):
    d = tmp_path_factory.mktemp("unicode")
    script = d / "\u00e9t\u00e9.py"
    script.write_text(UNICODE_SCRIPT, encoding="utf-8")
    return trace(d, [python_exe, script, CUDART]).trace


def test_the_c_locale_gets_ascii_text_with_the_same_cuts():
    """LC_ALL=C: a cut frame says "..." where UTF-8 says the ellipsis, in the same width, the
    method and the line kept; nothing above 0x7f is written."""
    args = ("leaks", "-q", "--phase", "train", "--width", "60", H200 / "retain-ds-zero2.vrt")
    utf8, ascii_ = in_locale("C.UTF-8", *args), in_locale("C", *args)
    assert utf8.returncode == ascii_.returncode == 0, ascii_.stderr
    assert b"\xe2\x80\xa6" in utf8.stdout and max(ascii_.stdout) < 0x80
    head = next(l for l in ascii_.stdout.decode().splitlines() if re.match(r"^ +[\d.]+ [KMG]iB +\d+x ", l))
    assert len(head) <= 60 and re.search(r"\.\.\.\.setup_buckets \(\.\.\.[^ ]*_2\.py:3266\)$", head), head
    # the same lines, each as wide as it was
    widths = lambda out: [len(l) for l in out.splitlines()]
    assert widths(ascii_.stdout.decode()) == widths(utf8.stdout.decode("utf-8"))


def test_the_c_locale_draws_the_timeline_in_ascii():
    utf8, ascii_ = (in_locale(l, "timeline", "--width", "60", LEAK_CYCLE) for l in ("C.UTF-8", "C"))
    assert b"\xe2\x96\x88" in utf8.stdout and max(ascii_.stdout) < 0x80
    blocks = " \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
    as_levels = lambda text, chars: [[chars.index(c) for c in l[23:]] for l in text.splitlines()
                                     if l.startswith("dev")]
    assert as_levels(ascii_.stdout.decode(), " _.-~=+*#") == as_levels(utf8.stdout.decode(), blocks) != []


def test_the_c_locale_escapes_the_traces_own_text(unicode_trace):
    """A function and a file named in UTF-8: shown as they are in a UTF-8 locale, as \\xNN bytes
    in the C locale (0x9b alone is CSI to an 8-bit terminal), on standard output and in messages."""
    utf8, ascii_ = (in_locale(l, "report", unicode_trace) for l in ("C.UTF-8", "C"))
    assert "r\u00e9server_\u00dbn" in utf8.stdout.decode() and "\u00e9t\u00e9.py" in utf8.stdout.decode()
    assert max(ascii_.stdout) < 0x80
    assert b"r\\xc3\\xa9server_\\xc3\\x9bn" in ascii_.stdout and b"\\xc3\\xa9t\\xc3\\xa9.py" in ascii_.stdout
    # a frame cut to a width is cut as shown: four columns a byte above 0x7f
    narrow = in_locale("C", "report", "--width", "50", unicode_trace).stdout.decode()
    frames = [l for l in narrow.splitlines() if l.startswith(" ") and "\\x" in l]
    assert frames and all(len(l) <= 50 for l in frames), narrow
    assert not any(re.search(r"\\x?\.\.\.|\\x[0-9a-f]?\.\.\.", l) for l in frames), narrow  # no escape cut
    missing = in_locale("C", "report", unicode_trace.parent / "\u00e9\u00e9.vrt")
    assert missing.returncode != 0 and max(missing.stderr) < 0x80 and b"\\xc3\\xa9" in missing.stderr


def test_json_is_ascii_and_the_same_in_every_locale(unicode_trace):
    outs = [in_locale(l, "report", "--json", unicode_trace) for l in ("C.UTF-8", "C", "en_US.ISO-8859-1")]
    assert all(o.returncode == 0 for o in outs) and outs[0].stdout == outs[1].stdout == outs[2].stdout
    assert max(outs[0].stdout) < 0x80
    assert "r\u00e9server_\u00dbn" in json.dumps(json.loads(outs[0].stdout), ensure_ascii=False)


def test_json_of_a_path_that_is_not_utf8_stays_json(tmp_path, unicode_trace):
    odd = tmp_path / os.fsdecode(b"t\xff.vrt")
    shutil.copy(unicode_trace, odd)
    p = in_locale("C.UTF-8", "info", "--json", odd)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["file"].endswith("t\\xff.vrt")


def test_a_locale_this_machine_lacks_is_read_by_its_name():
    args = ("timeline", "--width", "60", LEAK_CYCLE)
    assert b"\xe2\x96" in in_locale("xx_YY.UTF-8", *args).stdout
    assert max(in_locale("xx_YY.ISO-8859-1", *args).stdout) < 0x80
