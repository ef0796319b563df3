#!/usr/bin/env python3
"""Two more shapes of memory that survives each call, on PyTorch (docs/ux-audit.md #98):

  view    a 16-byte slice of a 64 MiB tensor made in the call, kept: the slice keeps the whole
          storage; its chain must say it is a view that keeps all 64 MiB
  whole   a whole 2 MiB tensor kept: its chain says nothing more
  stream  a matmul on a torch.cuda.Stream() made in the call: PyTorch keeps a cuBLAS workspace
          for every stream a matmul ran on, so the workspace grows every call, each call's on a
          new stream; `leaks` must say so (streams_one_a_call = the calls)

Under `vramtrace run --phase train`, 4 calls; the tensor layer's entries must equal
torch.cuda.memory_allocated() at each call's entry. Prints leaks' text, a table and PASS/FAIL.

    python3 scripts/gpu/view_stream_check.py [VRAMTRACE [--keep DIR]]

--keep DIR copies the trace there. Written 2026-12-07 and not run yet: the device was not lent
again that session (tests/golden/h200/torch-more.vrt, scripts/gpu/torch_more_shapes.py's trace,
holds the stream shape from an H100; the view note is newer than it).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import keep_trace, kept_at, leaks_of, run_phase_job  # noqa: E402

CALLS = 4
JOB = r'''
import torch
MiB = 1 << 20
VIEWS, WHOLES = [], []
A = torch.randn(256, 256, device="cuda")

def train(i):
    print("entry %%d %%d" %% (i, torch.cuda.memory_allocated()), flush=True)
    big = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")  # kept: view
    VIEWS.append(big[:16])
    WHOLES.append(torch.empty(2 * MiB, dtype=torch.uint8, device="cuda"))  # kept: whole
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        (A @ A).sum().item()  # kept: stream
    torch.cuda.current_stream().wait_stream(s)

for i in range(%(calls)d):
    train(i)
torch.cuda.synchronize()
print("entry %%d %%d" %% (%(calls)d, torch.cuda.memory_allocated()), flush=True)
'''

WANT = {"view": "__main__.VIEWS[0] (Tensor, a view of 16 B that keeps all 64.0 MiB)",
        "whole": "__main__.WHOLES[0] (Tensor)"}


def main():
    vramtrace = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace")
    job = JOB % {"calls": CALLS}
    r, trace, entries = run_phase_job(vramtrace, job, "vt-view-stream-")
    out = leaks_of(vramtrace, trace, "--phase", "train", as_json=True)
    print(leaks_of(vramtrace, trace, "--phase", "train", "--top", "30"))
    traced_entries = [p["live_bytes_at_entry"] for p in out["phases"]]
    print(f"entries: traced {traced_entries} memory_allocated() {entries[:-1]}")
    ok = r.returncode == 0 and out["layer"] == "tensors" and traced_entries == entries[:-1]
    for way, chain in WANT.items():
        first = [" -> ".join(c) for s in kept_at(out, job, way) if s["phase_index"] == 1 for c in s["held_by"]]
        good = first == [chain]
        ok &= good
        print(f"  {way:8s} {'ok ' if good else 'BAD'} {first}" + ("" if good else f"\n           want {chain}"))
    stream = kept_at(out, job, "stream")
    workspace = [s for s in stream if s.get("category") == "workspace"]
    calls = sorted({s["phase_index"] for s in workspace})
    streams = {s["streams_one_a_call"] for s in workspace}
    good = calls == list(range(1, CALLS + 1)) and streams == {CALLS} and \
        {s["verdict"] for s in workspace} == {"grows every call"}
    ok &= good
    print(f"  stream   {'ok ' if good else 'BAD'} workspace groups in calls {calls}, streams_one_a_call {sorted(streams)}, "
          f"{sum(s['bytes'] for s in workspace)} bytes")
    keep_trace(trace, "view-stream.vrt")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
