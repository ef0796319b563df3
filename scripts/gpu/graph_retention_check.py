#!/usr/bin/env python3
"""The classic PyTorch leaks, on a GPU: a loss kept with its autograd history (its graph keeps
the activations saved for backward, in C++), a new optimizer each call kept in a list (its
state), a forward hook whose closure keeps outputs. Under `vramtrace run --phase train`,
`leaks` must name the holder of each: __main__.LOSSES through the graph, __main__.OPTIMIZERS
through .state, the hook through its closure; label the cuBLAS workspaces (made in the first
call, on two handles) set up once and apart from the Linear outputs the same line makes; and its
entries must equal torch.cuda.memory_allocated() as the job prints them. Prints the report and
PASS/FAIL.

    python3 scripts/gpu/graph_retention_check.py [VRAMTRACE [--keep DIR]]

--keep DIR copies the trace there (tests/golden/h200/graph-retained.vrt is such a copy).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import keep_trace, leaks_of, run_phase_job  # noqa: E402

JOB = r'''import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
probe = torch.nn.Linear(1024, 1024).cuda()

def make_hook():
    seen = []
    def keep_output(module, inputs, output):
        seen.append(output)
    return keep_output

probe.register_forward_hook(make_hook())
LOSSES = []
OPTIMIZERS = []

def evaluate(x):
    loss = model(x).square().mean()
    return loss

def train(i):
    x = torch.randn(512, 1024, device="cuda")
    LOSSES.append(evaluate(x))                      # keeps the autograd graph: its saved activations
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(x).sum().backward()
    opt.step()                                      # optimizer state, a new optimizer each call
    OPTIMIZERS.append(opt)
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        probe(x)                                    # the hook keeps its output

for i in range(3):
    torch.cuda.synchronize()
    print("entry", i + 1, torch.cuda.memory_allocated(), flush=True)
    train(i)
print("python", sys.version.split()[0], "torch", torch.__version__, flush=True)
'''


def main():
    vramtrace = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace")
    r, trace, entries = run_phase_job(vramtrace, JOB, "vt-graph-")
    text = leaks_of(vramtrace, trace, "--phase", "train", "--top", "20")
    print(text)
    out = leaks_of(vramtrace, trace, "--phase", "train", as_json=True)
    ok, checks = r.returncode == 0, []
    checks.append(("entries equal memory_allocated()", [p["live_bytes_at_entry"] for p in out["phases"]] == entries))
    roots = {k["root"]: k["bytes"] for k in out["kept_alive_by"]}
    checks.append(("a root is __main__.LOSSES[*]", any(k.startswith("__main__.LOSSES[*]") for k in roots)))
    checks.append(("a root is __main__.OPTIMIZERS[*]", any(k.startswith("__main__.OPTIMIZERS[*]") for k in roots)))
    chains = [" -> ".join(c) for s in out["survivors"] for c in s["held_by"]]
    checks.append(("a chain through the graph", any(c.startswith("__main__.LOSSES[") and " graph: " in c for c in chains)))
    checks.append(("a chain through the hook's closure", any("closure variable seen[" in c for c in chains)))
    workspaces = [s for s in out["survivors"] if s["category"] == "workspace"]
    checks.append(("cuBLAS workspaces labelled, in the first call only",
                   bool(workspaces) and all(s["persistent"] and s["phase_index"] == 1 for s in workspaces)))
    for what, good in checks:
        print(f"  {'ok ' if good else 'BAD'} {what}")
        ok &= good
    print("kept alive by:", json.dumps(out["kept_alive_by"], indent=None)[:2000])
    keep_trace(trace, "graph-retained.vrt")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
