#!/usr/bin/env python3
"""Three more shapes on PyTorch, under `vramtrace run --phase train`, 4 calls (docs/ux-audit.md #98);
prints leaks' text (tensors, then the CUDA layer) and report's, and saves the trace to OUT:
  optim   a new AdamW each call, kept in a list (its state: exp_avg, exp_avg_sq per parameter)
  view    a 16-byte slice of a 64 MiB tensor, kept: the whole storage stays
  stream  a forward pass on a torch.cuda.Stream() made each call: a cuBLAS workspace per stream
  graph   a CUDA graph captured each call and kept (its private pool), its output dropped
Not a check (it prints, the reader judges): tests/golden/h200/torch-more.vrt is its trace from an
H100 (2026-12-07, preload 03dbb9c), read by tests/e2e/test_retention_shapes.py;
scripts/gpu/view_stream_check.py checks the view and stream shapes.

    python3 scripts/gpu/torch_more_shapes.py VRAMTRACE OUT
"""
import os, shutil, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import leaks_of, run_phase_job  # noqa: E402

JOB = r'''
import torch
MiB = 1 << 20
torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024)).cuda()
OPTS, VIEWS, GRAPHS = [], [], []
STATIC_IN = torch.randn(256, 1024, device="cuda")

def train(i):
    print("entry %d %d" % (i, torch.cuda.memory_allocated()), flush=True)
    opt = torch.optim.AdamW(MODEL.parameters(), lr=1e-3)  # kept: optim
    MODEL(torch.randn(64, 1024, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    OPTS.append(opt)
    big = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")  # kept: view
    VIEWS.append(big[:16])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.no_grad():
            MODEL(STATIC_IN)  # kept: stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        out = MODEL(STATIC_IN)  # kept: graph
    GRAPHS.append(g)
    del out

for i in range(4):
    train(i)
torch.cuda.synchronize()
print("entry 4 %d" % torch.cuda.memory_allocated(), flush=True)
print("reserved %d" % torch.cuda.memory_reserved(), flush=True)
'''


def main():
    vt, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    proc, trace, entries = run_phase_job(vt, JOB, "torch-more")
    print("rc", proc.returncode, "entries", entries)
    print(proc.stderr[-3000:])
    shutil.copy(trace, os.path.join(out, "torch-more.vrt"))
    print(leaks_of(vt, trace, "--phase", "train"))
    print(subprocess.run([vt, "report", "-q", trace], capture_output=True, text=True).stdout[:6000])
    print(subprocess.run([vt, "leaks", "-q", "--layer", "cuda", "--phase", "train", trace], capture_output=True, text=True).stdout[:4000])


if __name__ == "__main__":
    main()
