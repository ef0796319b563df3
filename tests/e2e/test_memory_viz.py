"""`export --format memory-viz` as PyTorch's own viewer reads it (torch.cuda._memory_viz and
pytorch.org/memory_viz), checked on the H200 traces: every segment's blocks tile it, the
timeline the viewer draws from device_traces peaks where report says the tensors did, the blocks
live at the end are what report says is live, frames are shared (the pickle stays small), and
every entry has the fields the viewer reads. With torch importable, its own functions run on it."""
import json
import pickle

import pytest

from conftest import GOLDEN, analyze

H200 = GOLDEN / "h200"
TRACES = ["leak-cycle", "leak-registry", "oom", "tensor-default", "torch-expandable", "retain-ds-zero2"]
ENTRY_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}


def export(name, tmp_path):
    out = tmp_path / (name + ".pickle")
    analyze("export", "--format", "memory-viz", "-q", H200 / (name + ".vrt"), "-o", out)
    return out, pickle.loads(out.read_bytes())


def tensors(name):
    """Per device, what report says the viewer must draw: tensors, or without tensor events every
    device allocation."""
    report = json.loads(analyze("report", "--json", "-q", H200 / (name + ".vrt")).stdout)
    if "tensors" in report:
        return {t["device"]: t for t in report["tensors"]}
    return {d["device"]: d for d in report["devices"] if d["kind"] == "device"}


@pytest.mark.parametrize("name", TRACES)
def test_blocks_tile_their_segments(name, tmp_path):
    _, snap = export(name, tmp_path)
    assert snap["segments"]
    for s in snap["segments"]:
        assert SEGMENT_KEYS <= set(s)
        at = s["address"]
        for b in s["blocks"]:
            assert b["address"] == at and b["size"] > 0
            at += b["size"]
        assert at == s["address"] + s["total_size"]
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")


@pytest.mark.parametrize("name", TRACES)
def test_the_viewers_timeline_peaks_where_the_tensors_did(name, tmp_path):
    _, snap = export(name, tmp_path)
    want = tensors(name)
    for dev, entries in enumerate(snap["device_traces"]):
        if dev not in want:
            continue
        live = peak = 0
        for e in entries:
            assert ENTRY_KEYS <= set(e), e
            live += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_completed" else 0
            peak = max(peak, live)
        assert peak == want[dev]["peak_bytes"]
        assert live == want[dev]["live_bytes_at_end"]
        in_segments = sum(s["allocated_size"] for s in snap["segments"] if s["device"] == dev)
        assert in_segments <= live  # tensors in segments made before tracing began are left out


@pytest.mark.parametrize("name", TRACES)
def test_frames_are_shared_so_the_pickle_stays_small(name, tmp_path):
    out, _ = export(name, tmp_path)
    assert out.stat().st_size < 40 * (H200 / (name + ".vrt")).stat().st_size


def test_torchs_own_memory_viz_functions_read_it(tmp_path):
    mv = pytest.importorskip("torch.cuda._memory_viz", reason="torch is not installed here")
    _, snap = export("leak-cycle", tmp_path)
    assert mv.segsum(snap) and mv.trace(snap) and mv.trace_plot(snap) and mv.segment_plot(snap)
    assert mv.segments(snap, format_flamegraph=lambda s: s) and mv.memory(snap, format_flamegraph=lambda s: s)
