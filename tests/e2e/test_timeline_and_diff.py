"""`vramtrace timeline` and `vramtrace diff` against traces recorded on the H200
(tests/golden/h200): each must agree with what `report` says of the same trace.

- timeline --csv: one column per device and kind (and tensors); each column's highest value is
  that series' peak (a bucket shows its highest value); the terminal chart prints the same peaks.
- diff: totals are the bytes live at the end (every device and kind); the sites' deltas add up
  to the change of the totals (sites that did not change are left out); a trace against itself
  changes nothing; `--at` on one trace.
"""
import csv
import io
import json
import re

import pytest

from conftest import GOLDEN, analyze

H200 = GOLDEN / "h200"
NAMES = ["leak-cycle", "oom", "nccl", "jax", "static-binary"]


def report(name):
    return json.loads(analyze("report", "--json", "-q", H200 / f"{name}.vrt").stdout)


def reported_peaks(rep):
    peaks = {("host" if d["device"] < 0 else f"dev{d['device']}") + "." + d["kind"]: d["peak_bytes"]
             for d in rep["devices"]}
    peaks.update({f"dev{t['device']}.tensors": t["peak_bytes"] for t in rep.get("tensors", [])})
    return peaks


def live_total(rep):
    return sum(d["live_bytes_at_end"] for d in rep["devices"])


@pytest.mark.parametrize("name", NAMES)
def test_timeline_csv_columns_peak_where_report_says(name):
    rows = list(csv.reader(io.StringIO(analyze("timeline", "--csv", "-q", H200 / f"{name}.vrt").stdout)))
    header, data = rows[0], [[float(x) for x in r] for r in rows[1:]]
    assert header[0] == "time_s" and data
    times = [r[0] for r in data]
    assert times == sorted(times)
    peaks = {column: max(int(r[i]) for r in data) for i, column in enumerate(header) if i}
    assert peaks == reported_peaks(report(name))


def test_timeline_chart_prints_each_series_peak():
    text = analyze("timeline", "-q", H200 / "oom.vrt").stdout
    rep = report("oom")
    for series in reported_peaks(rep):
        assert series in text
    # 7457736704 bytes: the device peak the OOM report explains
    assert "peak 6.95 GiB" in text


def diff_json(*args):
    return json.loads(analyze("diff", "--json", "-q", "--top", "100000", *args).stdout)


@pytest.mark.parametrize("a, b", [("leak-fixed", "leak-cycle"), ("leak-cycle", "leak-registry"), ("jax", "cupy")])
def test_diff_totals_are_the_live_sets_and_deltas_add_up(a, b):
    d = diff_json(H200 / f"{a}.vrt", H200 / f"{b}.vrt")
    assert d["total_a"] == live_total(report(a))
    assert d["total_b"] == live_total(report(b))
    assert sum(s["delta"] for s in d["sites"]) == d["total_b"] - d["total_a"]
    assert all(s["delta"] == s["bytes_b"] - s["bytes_a"] for s in d["sites"])
    deltas = [abs(s["delta"]) for s in d["sites"]]
    assert deltas == sorted(deltas, reverse=True), "largest change first"


def test_diff_of_a_trace_with_itself_changes_nothing():
    d = diff_json(H200 / "leak-cycle.vrt", H200 / "leak-cycle.vrt")
    assert d["total_a"] == d["total_b"] == live_total(report("leak-cycle"))
    assert not d["sites"]


def test_diff_at_two_times_of_one_trace():
    path = H200 / "leak-cycle.vrt"
    end = json.loads(analyze("info", "--json", path).stdout)
    d = diff_json(path, "--at", "0", "--at", "1000")
    assert d["total_a"] == 0, "nothing is live before the first allocation"
    assert d["total_b"] == live_total(report("leak-cycle")), end
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
    at = diff_json(path, "--at", "4.5", "--at", "1000")["total_a"]
    first = dict(zip(header[1:], data[0][1:]))
    assert first["dev0.device"] + first["host.host_pinned"] >= at > 0


def test_timeline_window_after_the_last_event_holds_the_end_state():
    path = H200 / "leak-cycle.vrt"
    header, data = csv_rows("--from", "6", "--to", "7", path)
    assert data, "a window with no event still has buckets"
    end = {("host" if d["device"] < 0 else f"dev{d['device']}") + "." + d["kind"]: d["live_bytes_at_end"]
           for d in report("leak-cycle")["devices"]}
    for row in data:
        values = dict(zip(header[1:], row[1:]))
        for series, live in end.items():
            assert values[series] == live
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
    # what memory_allocated() said at each call's entry (docs/gpu-results.md): 379162624 per call
    if layer == "tensors":
        assert d["growth_per_invocation_bytes"] == 379162624


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
