#!/usr/bin/env python3
"""ZeRO-2 with offload_optimizer, reduced to its memory: why did offloading not help?

fp16 parameters and fp16 gradient buckets stay on the GPU; the fp32 master weights and both
Adam moments live in pinned host memory (what DeepSpeed's CPU offload moves). The batch size is
raised until the GPU runs out: activations grow with the batch, and nothing offloaded changes
that. The GPU is capped with set_per_process_memory_fraction so the OOM comes quickly.

    vramtrace run -o oom.vrt -- python3 scripts/gpu/oom_repro.py
    vramtrace oom oom.vrt
"""
import torch
import torch.nn as nn

from common import mark

DIM, LAYERS = 4096, 8


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(DIM, DIM), nn.GELU()) for _ in range(LAYERS)])

    def forward(self, x):
        return self.layers(x)


class CPUOffloadAdam:
    """fp32 master + Adam moments in pinned host memory; fp16 gradient buckets on the GPU."""

    def __init__(self, params):
        self.params = list(params)
        numel = sum(p.numel() for p in self.params)
        self.master = torch.empty(numel, dtype=torch.float32, pin_memory=True)
        self.exp_avg = torch.zeros(numel, dtype=torch.float32, pin_memory=True)
        self.exp_avg_sq = torch.zeros(numel, dtype=torch.float32, pin_memory=True)
        self.grad_bucket = allocate_gradient_buckets(numel)

    @torch.no_grad()
    def step(self, lr=1e-4):
        offset = 0
        for p in self.params:
            n = p.numel()
            self.grad_bucket[offset:offset + n].copy_(p.grad.flatten())
            offset += n
        g = self.grad_bucket.float().cpu()
        self.exp_avg.mul_(0.9).add_(g, alpha=0.1)
        self.exp_avg_sq.mul_(0.999).addcmul_(g, g, value=0.001)
        self.master.addcdiv_(self.exp_avg, self.exp_avg_sq.sqrt().add_(1e-8), value=-lr)
        for p in self.params:
            p.grad = None


def allocate_gradient_buckets(numel):
    return torch.zeros(numel, dtype=torch.float16, device="cuda")


def train_step(model, opt, batch):
    x = torch.randn(batch, DIM, dtype=torch.float16, device="cuda")
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()


def main():
    torch.cuda.set_per_process_memory_fraction(0.05)  # about 7 GB of an H200
    model = MLP().half().cuda()
    opt = CPUOffloadAdam(model.parameters())
    batch = 1024
    while True:
        mark("batch %d" % batch)
        try:
            train_step(model, opt, batch)
        except torch.OutOfMemoryError as e:
            print("OOM at batch %d: %s" % (batch, str(e).splitlines()[0]), flush=True)
            break
        print("batch %d fits; allocated %.2f GiB" % (batch, torch.cuda.memory_allocated() / 2**30), flush=True)
        batch *= 2


if __name__ == "__main__":
    main()
