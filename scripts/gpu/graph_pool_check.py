#!/usr/bin/env python3
"""Memory made for a CUDA graph, on PyTorch (docs/ux-audit.md #100): a job captures a
torch.cuda.graph each call and keeps the graph (its private pool keeps the segments the capture
allocated), and keeps one tensor a call made outside any capture. Under `vramtrace run --phase
train`, 4 calls; `leaks --layer cuda` must say the segments allocated at the captured line were
made for a CUDA graph (captured_bytes = their bytes), and `leaks` (tensors) nothing of the tensors
kept at the line outside it (at the CUDA layer there are none: PyTorch's cache serves them); the
trace must hold a CAPTURE_BEGIN and a CAPTURE_END a call (PyTorch begins the capture through the
shared runtime's cudaStreamBeginCapture); entries equal torch.cuda.memory_allocated(). Prints
leaks' text and PASS/FAIL.

    python3 scripts/gpu/graph_pool_check.py [VRAMTRACE [--keep DIR]]

--keep DIR copies the trace there (tests/golden/h200/graph-pool.vrt is such a copy, an H100's).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import keep_trace, kept_at, leaks_of, run_phase_job  # noqa: E402

CALLS = 4
JOB = r'''
import torch
torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)).cuda()
STATIC_IN = torch.randn(512, 1024, device="cuda")
GRAPHS, RESULTS = [], []

def train(i):
    print("entry %%d %%d" %% (i, torch.cuda.memory_allocated()), flush=True)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        out = MODEL(STATIC_IN)  # kept: graph
    GRAPHS.append(g)
    del out
    RESULTS.append(torch.empty(2 << 20, dtype=torch.uint8, device="cuda"))  # kept: result

with torch.no_grad():  # warm up outside any capture (cuBLAS handles and workspaces)
    MODEL(STATIC_IN)
torch.cuda.synchronize()
for i in range(%(calls)d):
    train(i)
torch.cuda.synchronize()
print("entry %%d %%d" %% (%(calls)d, torch.cuda.memory_allocated()), flush=True)
'''


def main():
    vramtrace = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace")
    job = JOB % {"calls": CALLS}
    r, trace, entries = run_phase_job(vramtrace, job, "vt-graph-pool-")
    dump = subprocess.run([vramtrace, "dump", "-q", trace], capture_output=True, text=True).stdout
    begins, ends = dump.count(" capture_begin "), dump.count(" capture_end ")
    print(f"capture records: {begins} begin, {ends} end")
    cuda = leaks_of(vramtrace, trace, "--phase", "train", "--layer", "cuda", as_json=True)
    print(leaks_of(vramtrace, trace, "--phase", "train", "--layer", "cuda", "--top", "12"))
    tensors = leaks_of(vramtrace, trace, "--phase", "train", as_json=True)
    traced_entries = [p["live_bytes_at_entry"] for p in tensors["phases"]]
    print(f"entries: traced {traced_entries} memory_allocated() {entries[:-1]}")
    graph = kept_at(cuda, job, "graph")
    result = kept_at(tensors, job, "result")  # tensors: PyTorch's cache serves them, no cudaMalloc
    made = sum(s["captured_bytes"] for s in graph)
    print(f"graph line (CUDA layer): {len(graph)} groups, {sum(s['bytes'] for s in graph)} bytes, {made} made for a "
          f"graph; result line (tensors): {len(result)} groups, {sum(s['captured_bytes'] for s in result)} of "
          f"{sum(s['bytes'] for s in result)} bytes made for a graph")
    ok = r.returncode == 0 and begins >= CALLS and ends >= CALLS and traced_entries == entries[:-1]
    ok &= bool(graph) and made == sum(s["bytes"] for s in graph) and made > 0
    ok &= len(result) == CALLS and all(s["captured_bytes"] == 0 for s in result)
    keep_trace(trace, "graph-pool.vrt")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
