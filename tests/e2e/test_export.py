"""`vramtrace export` against traces recorded on the H200 (tests/golden/h200): every format must
add up to what `report` says of the same trace.

- memory-viz: PyTorch's snapshot pickle. Per device, the allocations minus the frees of the
  trace entries are the bytes live at the end (tensors for "alloc"/"free_completed" when the
  trace has tensor events, CUDA segments for "segment_*"), and so are the snapshot's segments and
  blocks. A VMM handle is freed once, at its last release (NCCL retains and releases handles).
- chrome: the counter tracks reach exactly the peaks `report` gives.
- folded: the stacks' bytes add up to everything live at the end; folded-peak, without tensor
  events, to the busiest device's peak.
"""
import json
import pickle

import pytest

from conftest import GOLDEN, analyze

H200 = GOLDEN / "h200"
WITH_TENSORS = ["leak-cycle", "oom", "tensor-default"]
CUDA_ONLY = ["nccl", "torch-expandable", "static-binary", "cupy", "jax"]


def report(name):
    return json.loads(analyze("report", "--json", "-q", H200 / f"{name}.vrt").stdout)


def live_at_end(rep, device=0, kind="device"):
    return sum(d["live_bytes_at_end"] for d in rep["devices"] if d["device"] == device and d["kind"] == kind)


def export(tmp_path, name, fmt):
    out = tmp_path / f"{name}.{fmt}"
    analyze("export", "--format", fmt, "-q", H200 / f"{name}.vrt", "-o", out)
    return out


def entry_bytes(entries, action):
    return sum(e["size"] for e in entries if e["action"] == action)


@pytest.mark.parametrize("name", WITH_TENSORS + CUDA_ONLY)
def test_memory_viz_entries_and_segments_add_up_to_the_live_set(tmp_path, name):
    rep = report(name)
    snap = pickle.loads(export(tmp_path, name, "memory-viz").read_bytes())
    assert set(snap) >= {"segments", "device_traces"}
    traces = snap["device_traces"]
    assert len(traces) == 1  # device 0 only in these traces
    entries = traces[0]
    assert entries, name
    segments = [s for s in snap["segments"] if s["device"] == 0]
    blocks = [b for s in segments for b in s["blocks"]]
    if name in WITH_TENSORS:
        # the allocator's view: tensors in the segments of PyTorch's caching allocator (report's
        # tensors and its cache line together), other CUDA allocations left out
        tensors = rep["tensors"][0]["live_bytes_at_end"]
        cache = sum(s["bytes"] for s in rep["live_at_end"] if "allocator cache" in s.get("label", ""))
        assert entry_bytes(entries, "alloc") - entry_bytes(entries, "free_completed") == tensors
        assert sum(b["size"] for b in blocks if b["state"] == "active_allocated") == tensors
        assert sum(s["total_size"] for s in segments) == tensors + cache
        assert (entry_bytes(entries, "segment_alloc") - entry_bytes(entries, "segment_free")
                == tensors + cache)
    else:
        assert not any(e["action"].startswith("segment_") for e in entries)
        assert entry_bytes(entries, "alloc") - entry_bytes(entries, "free_completed") == live_at_end(rep)
        assert sum(s["total_size"] for s in segments) == live_at_end(rep)
        assert sum(b["size"] for b in blocks) == live_at_end(rep)
    # Time runs forward, and every entry carries the frames memory_viz shows (with Python lines
    # where the trace was recorded with Python stacks: the PyTorch runs).
    times = [e["time_us"] for e in entries]
    assert times == sorted(times)
    assert all(e["frames"] for e in entries if e["action"] != "oom")
    if name in WITH_TENSORS:
        assert any(f["line"] > 0 for e in entries for f in e["frames"]), "no Python frame in any entry"


def test_memory_viz_frees_a_vmm_handle_once_at_its_last_release(tmp_path):
    # NCCL creates 195 handles and retains 194 of them: 389 cuMemRelease calls, 194 real frees.
    entries = pickle.loads(export(tmp_path, "nccl", "memory-viz").read_bytes())["device_traces"][0]
    allocs = [e for e in entries if e["action"] == "alloc"]
    frees = [e for e in entries if e["action"] == "free_completed"]
    assert (len(allocs), len(frees)) == (195, 194)
    assert {e["addr"] for e in frees} <= {e["addr"] for e in allocs}


def test_memory_viz_oom_entry_carries_the_request(tmp_path):
    entries = pickle.loads(export(tmp_path, "oom", "memory-viz").read_bytes())["device_traces"][0]
    ooms = [e for e in entries if e["action"] == "oom"]
    assert len(ooms) == 1
    oom = json.loads(analyze("oom", "--json", "-q", H200 / "oom.vrt", check=False).stdout)["oom"]
    assert ooms[0]["size"] == oom["requested_bytes"]


@pytest.mark.parametrize("name", WITH_TENSORS + CUDA_ONLY)
def test_chrome_counters_reach_the_reported_peaks(tmp_path, name):
    rep = report(name)
    doc = json.loads(export(tmp_path, name, "chrome").read_text())
    counters = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "C":
            counters[e["name"]] = max(counters.get(e["name"], 0), e["args"]["bytes"])
    for d in rep["devices"]:
        series = ("host" if d["device"] < 0 else f"dev{d['device']}") + "." + d["kind"]
        assert counters.get(series) == d["peak_bytes"], (series, counters)
    for tensor in rep.get("tensors", []):
        assert counters.get(f"dev{tensor['device']}.tensors") == tensor["peak_bytes"], counters


def folded_total(path):
    return sum(int(line.rsplit(" ", 1)[1]) for line in path.read_text().splitlines() if line.strip())


@pytest.mark.parametrize("name", WITH_TENSORS + CUDA_ONLY)
def test_folded_stacks_add_up_to_everything_live_at_the_end(tmp_path, name):
    rep = report(name)
    assert folded_total(export(tmp_path, name, "folded")) == sum(d["live_bytes_at_end"] for d in rep["devices"])


@pytest.mark.parametrize("name", CUDA_ONLY)
def test_folded_peak_adds_up_to_the_busiest_device_peak(tmp_path, name):
    rep = report(name)
    peak = max(d["peak_bytes"] for d in rep["devices"] if d["kind"] == "device")
    assert folded_total(export(tmp_path, name, "folded-peak")) == peak


@pytest.mark.parametrize("cap", [1, 10, 101])
def test_memory_viz_max_events_caps_each_device_trace_and_says_so(tmp_path, cap):
    out = tmp_path / "v.pickle"
    p = analyze("export", "--format", "memory-viz", "--max-events", cap, H200 / "leak-cycle.vrt", "-o", out)
    entries = pickle.loads(out.read_bytes())["device_traces"][0]
    assert cap - 1 <= len(entries) <= cap  # a resize is written as two entries or not at all
    assert "only the first" in p.stderr
