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
