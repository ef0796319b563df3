"""The sites at each peak (analyzer/peak_sites.c). report follows them in the one pass that
finds the peaks: each list is what was live just after the record that set its peak, grouped by
stack. Checked against tests/e2e/replay.py, an independent replay of the records, stopped at
that record: every device and kind of every fixture trace it replays (those recorded from the
start), and each tensor peak's tensors. A peak set inside a checkpoint (a wrapped ring's start)
is test_flight_recorder.py's."""
import json

import pytest

from conftest import GOLDEN, VRAMTRACE, analyze
from replay import Replay

TRACES = sorted(p for p in GOLDEN.rglob("*.vrt") if not p.name.startswith("attach"))


def sites_of(items):
    """{stack: (bytes, count)} of the items."""
    out = {}
    for it in items:
        b, n = out.get(it.stack, (0, 0))
        out[it.stack] = (b + it.size, n + 1)
    return out


def listed(entry):
    return {s["stack"]: (s["bytes"], s["count"]) for s in entry["top_at_peak"]}


@pytest.fixture(scope="module")
def reports():
    return {}


def report_of(path, cache):
    if path not in cache:
        cache[path] = json.loads(analyze("report", "--json", "-q", "--top", "1000000", path).stdout)
    return cache[path]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_each_peak_lists_what_was_live_just_after_the_record_that_set_it(path, reports):
    whole = Replay(path, VRAMTRACE)
    rep = report_of(path, reports)
    assert whole.peak and len(rep["devices"]) == len([v for v in whole.peak.values() if v > 0])
    for entry in rep["devices"]:
        key = (entry["device"], entry["kind"])
        at = Replay(path, VRAMTRACE, records=whole.peak_record[key])
        held = [it for it in at.held_items() if (it.device, it.kind) == key]
        assert entry["peak_bytes"] == sum(it.size for it in held) == whole.peak[key]
        assert listed(entry) == sites_of(held), key


TENSOR_TRACES = [p for p in TRACES if Replay(p, VRAMTRACE).tensor_peak]


@pytest.mark.parametrize("path", TENSOR_TRACES, ids=lambda p: p.name)
def test_each_tensor_peak_lists_the_tensors_live_just_after_the_record_that_set_it(path, reports):
    """Beside the tensors a tensor peak's list holds the allocator's cache and other CUDA memory
    of the device (test_h200_traces.py); here its tensors' sites, exactly."""
    whole = Replay(path, VRAMTRACE)
    rep = report_of(path, reports)
    assert len(rep["tensors"]) == len(whole.tensor_peak)
    for entry in rep["tensors"]:
        device = entry["device"]
        at = Replay(path, VRAMTRACE, records=whole.tensor_peak_record[device])
        blocks = sites_of(b for b in at.blocks.values() if b.device == device)
        assert sum(b for b, _ in blocks.values()) == whole.tensor_peak[device]
        shown = listed(entry)
        assert {stack: shown.get(stack) for stack in blocks} == blocks
        assert all(n > 0 for _, n in shown.values())
