#!/usr/bin/env python3
"""Tensor-level truth inside PyTorch's caching allocator.

Each step allocates a temporary (make_temporary) that makes the allocator reserve a new 2 MiB
segment, frees it, then allocates a tensor that is kept (leak_this) and lands in the cached
segment, so no cudaMalloc names it. At the CUDA level the surviving segment belongs to the
temporary's line; at the tensor level the survivor is leak_this's line.

Prints PyTorch's memory_allocated()/memory_reserved() right before each phase entry and right
after each exit (VRAMTRACE_BOUNDARIES) for comparison with `vramtrace leaks --json`.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import vramtrace  # noqa: E402  (the in-program API: a no-op without the preload)

from common import truth  # noqa: E402

KiB = 1024


def make_temporary():
    return torch.empty(512 * KiB, dtype=torch.uint8, device="cuda")  # TEMPORARY-LINE


def leak_this():
    return torch.empty(256 * KiB + 3, dtype=torch.uint8, device="cuda")  # LEAK-LINE


def step(kept):
    tmp = make_temporary()
    del tmp
    kept.append(leak_this())


def main():
    torch.cuda.init()
    kept, boundaries = [], []
    torch.empty(1, device="cuda")  # let the allocator and the tracer settle before the first phase
    for i in range(4):
        boundaries.append({"at": "entry", "index": i + 1, "allocated": torch.cuda.memory_allocated(),
                           "reserved": torch.cuda.memory_reserved()})
        with vramtrace.phase("step"):
            step(kept)
        boundaries.append({"at": "exit", "index": i + 1, "allocated": torch.cuda.memory_allocated(),
                           "reserved": torch.cuda.memory_reserved()})
    print("VRAMTRACE_BOUNDARIES " + json.dumps(boundaries), flush=True)
    truth(allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
          conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))


if __name__ == "__main__":
    main()
