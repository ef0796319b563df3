#!/usr/bin/env python3
"""The on-call engineer's case (issue 19): an untraced PyTorch loop (a Linear layer, SGD, about
20 steps a second) that appends one 8 MiB tensor to a module-level list every step, runs for
argv[1] seconds, prints its own account on a VRAMTRACE_TRUTH line at the end. `vramtrace attach`
is pointed at it while it runs (scripts/gpu/attach_check.py)."""
import json
import sys
import time

import torch

KEEP = []


def main():
    seconds = float(sys.argv[1])
    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    start = time.time()
    step = 0
    stamps = []
    while time.time() - start < seconds:
        x = torch.randn(64, 1024, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        KEEP.append(torch.empty(8 << 20, dtype=torch.uint8, device="cuda"))  # ATTACH-GROW
        torch.cuda.synchronize()
        step += 1
        stamps.append(time.monotonic())
        time.sleep(0.05)
    print("VRAMTRACE_TRUTH " + json.dumps({
        "steps": step, "kept": len(KEEP), "kept_bytes": sum(t.numel() for t in KEEP),
        "allocated": torch.cuda.memory_allocated(), "grow_bytes_per_step": 8 << 20,
        "steps_per_second": (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0}), flush=True)


if __name__ == "__main__":
    main()
