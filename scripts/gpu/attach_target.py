#!/usr/bin/env python3
"""A PyTorch training loop started WITHOUT vramtrace, for `vramtrace attach`: it runs until
the file given as argv[1] exists, leaking one tensor per step (steal_a_little), and prints
"ready" once warmed up."""
import os
import sys
import time

import torch
import torch.nn as nn

_KEPT = []


def steal_a_little():
    _KEPT.append(torch.empty(4 << 20, dtype=torch.uint8, device="cuda"))  # ATTACH-LEAK


def main():
    stop = sys.argv[1]
    model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 2048)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = 0
    while not os.path.exists(stop):
        x = torch.randn(256, 2048, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steal_a_little()
        torch.cuda.synchronize()
        step += 1
        if step == 5:
            print("ready", flush=True)
        time.sleep(0.05)
    print("steps %d allocated %d" % (step, torch.cuda.memory_allocated()), flush=True)


if __name__ == "__main__":
    main()
