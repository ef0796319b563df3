#!/usr/bin/env python3
"""A data-parallel training loop for the multi-rank checks (one process per rank, torchrun).

    vramtrace run -o traces/ -- torchrun --nproc_per_node=2 scripts/gpu/ddp_train.py [--backend nccl]
    vramtrace leaks --phase train traces/

Each rank trains a small model with DistributedDataParallel; `--shard-optimizer` adds a
ZeRO-1-like variant where each rank keeps Adam state only for its half of the parameters.
Rank 1 (only) plants a leak: every train() call appends a tensor to a module-level list.
On one GPU (two ranks sharing cuda:0) use --backend gloo; with a GPU per rank, nccl.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

_PLANTED = []  # rank 1's leak


def leak_on_rank_one(rank):
    if rank == 1:
        _PLANTED.append(torch.empty(8 << 20, dtype=torch.uint8, device="cuda"))  # PLANTED-LEAK


def train(model, opt, rank, steps=4):
    for _ in range(steps):
        x = torch.randn(64, 1024, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    leak_on_rank_one(rank)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--shard-optimizer", action="store_true")
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = local % torch.cuda.device_count()
    torch.cuda.set_device(device)
    dist.init_process_group(a.backend)
    model = DDP(nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda(),
                device_ids=[device] if a.backend == "nccl" else None)
    params = list(model.parameters())
    if a.shard_optimizer:
        params = params[rank::world]  # each rank keeps optimizer state for its share only
    opt = torch.optim.Adam(params, lr=1e-4)
    for _ in range(a.calls):
        train(model, opt, rank)
        dist.barrier()
    torch.cuda.synchronize()
    print("rank %d done: allocated %d planted %d" % (rank, torch.cuda.memory_allocated(), len(_PLANTED)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
