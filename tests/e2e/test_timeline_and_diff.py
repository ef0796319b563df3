"""`vramtrace timeline` and `vramtrace diff` against traces recorded on the H200
(tests/golden/h200). The expected figures come from the traces' own records replayed by the
format's rules (tests/e2e/replay.py), not from another command of the analyzer, and from what
the programs measured (TRUTH.json).

- timeline --csv: one column per device and kind (and tensors); each column's highest value is
  that series' peak (a bucket shows its highest value); the terminal chart prints the same peaks.
- diff: totals are the bytes live at the end (every device and kind) or at --at; the sites'
  deltas add up to the change of the totals (sites that did not change are left out); a trace
  against itself changes nothing.
"""
import csv
import functools
import io
import json
import re

import pytest

from conftest import GOLDEN, VRAMTRACE, analyze, human
from replay import Replay

H200 = GOLDEN / "h200"
NAMES = ["leak-cycle", "oom", "nccl", "jax", "static-binary"]
TRUTH = json.loads((H200 / "TRUTH.json").read_text())


@functools.lru_cache(maxsize=None)
def replay(name, until=None, at=None):
    return Replay(H200 / f"{name}.vrt", VRAMTRACE, until=until, at=at)


def series(device, kind):
    return ("host" if device < 0 else f"dev{device}") + "." + kind


def replayed_peaks(r):
    """{timeline column: peak} of a replay: every device and kind that held memory, and tensors."""
    peaks = {series(d, k): v for (d, k), v in r.peak.items() if v}
    peaks.update({f"dev{d}.tensors": v for d, v in r.tensor_peak.items() if v})
    return peaks


@pytest.mark.parametrize("name", NAMES)
def test_timeline_csv_columns_peak_where_the_records_do(name):
    rows = list(csv.reader(io.StringIO(analyze("timeline", "--csv", "-q", H200 / f"{name}.vrt").stdout)))
    header, data = rows[0], [[float(x) for x in r] for r in rows[1:]]
    assert header[0] == "time_s" and data
    times = [r[0] for r in data]
    assert times == sorted(times)
    peaks = {column: max(int(r[i]) for r in data) for i, column in enumerate(header) if i}
    assert {c: p for c, p in peaks.items() if p} == replayed_peaks(replay(name))


def test_timeline_chart_prints_each_series_peak():
    text = analyze("timeline", "-q", H200 / "oom.vrt").stdout
    lines = text.splitlines()
    peaks = replayed_peaks(replay("oom"))
    assert set(peaks) == {"dev0.device", "dev0.tensors", "host.host_pinned"}
    for column, peak in peaks.items():
        at = [i for i, line in enumerate(lines) if line.startswith(column + " ")]
        assert len(at) == 1 and lines[at[0] + 1].split() == ["peak", *human(peak).split()], (column, peak)
    # the pinned optimizer state of oom_repro.py: 3 tensors of 134250496 floats, each rounded up
    # to a power of two by PyTorch's pinned-memory allocator: 3 x 1 GiB
    assert peaks["host.host_pinned"] == 3 << 30


def diff_json(*args):
    return json.loads(analyze("diff", "--json", "-q", "--top", "100000", *args).stdout)


@pytest.mark.parametrize("a, b", [("leak-fixed", "leak-cycle"), ("leak-cycle", "leak-registry"), ("jax", "cupy")])
def test_diff_totals_are_the_live_sets_and_deltas_add_up(a, b):
    d = diff_json(H200 / f"{a}.vrt", H200 / f"{b}.vrt")
    assert d["total_a"] == replay(a).live_total()
    assert d["total_b"] == replay(b).live_total()
    assert sum(s["delta"] for s in d["sites"]) == d["total_b"] - d["total_a"]
    assert all(s["delta"] == s["bytes_b"] - s["bytes_a"] for s in d["sites"])
    deltas = [abs(s["delta"]) for s in d["sites"]]
    assert deltas == sorted(deltas, reverse=True), "largest change first"


def test_diff_of_a_trace_with_itself_changes_nothing():
    d = diff_json(H200 / "leak-cycle.vrt", H200 / "leak-cycle.vrt")
    assert d["total_a"] == d["total_b"] == replay("leak-cycle").live_total()
    assert not d["sites"]


@pytest.mark.parametrize("a, b", [(0, 1000), (4.5, 5.0), (5.0, 5.52)])
def test_diff_at_two_times_of_one_trace(a, b):
    path = H200 / "leak-cycle.vrt"
    d = diff_json(path, "--at", str(a), "--at", str(b))
    assert d["total_a"] == replay("leak-cycle", at=a).live_total()
    assert d["total_b"] == replay("leak-cycle", at=b).live_total()
    assert d["total_a"] != d["total_b"]
    assert sum(s["delta"] for s in d["sites"]) == d["total_b"] - d["total_a"]


def test_diff_from_before_the_first_allocation_blames_the_leaking_engine():
    path = H200 / "leak-cycle.vrt"
    assert diff_json(path, "--at", "0", "--at", "1000")["total_a"] == 0, "nothing is live at 0 s"
    text = analyze("diff", "-q", path, "--at", "0", "--at", "1000").stdout
    assert "Engine.__init__" in text


def csv_rows(*args):
    rows = list(csv.reader(io.StringIO(analyze("timeline", "--csv", "-q", *args).stdout)))
    return rows[0], [[float(x) for x in r] for r in rows[1:]]


def test_timeline_window_starts_with_what_is_live_then():
    # 4.5 s is inside the first train() call: memory is live, and the first bucket shows it,
    # equal to what diff says is live at that time.
    path = H200 / "leak-cycle.vrt"
    header, data = csv_rows("--from", "4.5", "--to", "5", path)
    assert 4.5 < data[0][0] and data[-1][0] == pytest.approx(5.0)
    at = replay("leak-cycle", at=4.5).live
    first = dict(zip(header[1:], data[0][1:]))
    for (device, kind), live in at.items():
        assert first[series(device, kind)] >= live  # a bucket shows its highest value
    assert sum(at.values()) > 0


def test_timeline_window_after_the_last_event_holds_the_end_state():
    path = H200 / "leak-cycle.vrt"
    header, data = csv_rows("--from", "6", "--to", "7", path)
    assert data, "a window with no event still has buckets"
    r = replay("leak-cycle")
    end = {series(d, k): v for (d, k), v in r.live.items()}
    end.update({f"dev{d}.tensors": v for d, v in r.tensors.items()})
    for row in data:
        values = dict(zip(header[1:], row[1:]))
        for column, live in end.items():
            assert values[column] == live
    assert data[-1][0] == pytest.approx(7.0)


def test_timeline_runs_to_the_end_of_the_process():
    # not just to the last allocation event (5.52 s): the process ran until 5.876 s
    _, data = csv_rows(H200 / "leak-cycle.vrt")
    ended = re.search(r"^ended .* after ([0-9.]+) s$", analyze("info", H200 / "leak-cycle.vrt").stdout, re.M)
    assert data[-1][0] == pytest.approx(float(ended.group(1)), abs=1e-3)


@pytest.mark.parametrize("name, grows", [("leak-cycle", True), ("leak-registry", True), ("leak-fixed", False)])
def test_leaks_fail_on_growth_exit_status(name, grows):
    p = analyze("leaks", "-q", "--fail-on-growth", H200 / f"{name}.vrt", check=False)
    assert p.returncode == (1 if grows else 0), p.stderr


@pytest.mark.parametrize("layer", ["tensors", "cuda"])
def test_leaks_invocations_add_up_in_either_layer(layer):
    d = json.loads(analyze("leaks", "--json", "-q", "--layer", layer, H200 / "leak-cycle.vrt").stdout)
    assert d["layer"] == layer
    calls = d["phases"]
    assert len(calls) == 4
    for i, c in enumerate(calls):
        assert c["live_bytes_at_entry"] + c["allocated_bytes"] - c["freed_bytes"] == c["live_bytes_at_exit"]
        if i + 1 < len(calls):
            assert c["live_bytes_at_next_entry"] == calls[i + 1]["live_bytes_at_entry"]
    # what memory_allocated() said at each call's entry (TRUTH.json)
    if layer == "tensors":
        entries = TRUTH["leak-cycle"]["allocated_at_entry"]
        assert [c["live_bytes_at_entry"] for c in calls] == entries
        assert d["growth_per_invocation_bytes"] == TRUTH["leak-cycle"]["growth_per_call"]


def test_report_frames_limits_the_frames_printed_per_site():
    text = analyze("report", "-q", "--frames", "2", "--top", "3", H200 / "leak-cycle.vrt").stdout
    sections = text.split("top sites")[1:]
    assert sections
    for section in sections:
        lines = section.splitlines()[1:]
        frames = 0
        for line in lines:
            if not line.strip():
                break
            if line.lstrip().startswith(("at ", "in ")):
                frames += 1
                assert frames <= 2, section
            else:
                frames = 0


def test_diff_at_two_times_names_the_times():
    src = GOLDEN / "h200" / "leak-cycle.vrt"
    first = analyze("diff", src, "--at", "4.8", "--at", "5.4").stdout.splitlines()[0]
    assert first == f"vramtrace diff: {src} (at 4.800 s) -> {src} (at 5.400 s)"


def test_the_terminal_timeline_starts_where_memory_does():
    """leak-cycle's first CUDA allocation comes after 4 s of imports: the chart starts at its
    first busy moment, not at 0, so the columns show the run (ux defect 10)."""
    src = GOLDEN / "h200" / "leak-cycle.vrt"
    text = analyze("timeline", src).stdout
    m = re.match(r"vramtrace timeline: \S+, ([\d.]+) s from ([\d.]+) s, (\d+) columns", text)
    first_alloc = float(re.search(r"^(\S+) t\d+ alloc ", analyze("dump", "-q", src).stdout, re.M)[1])
    assert m and 0 < float(m[2]) <= first_alloc and float(m[2]) > 3.5, m and m.groups()
    row = [line for line in text.splitlines() if line.startswith("dev0.device")][0][23:]
    assert row[0] != " " and row.count(" ") == 0, row  # no blank columns of imports
