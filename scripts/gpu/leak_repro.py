#!/usr/bin/env python3
"""The user's situation, reproduced: a small transformer fine-tuned by a train() that builds a
DeepSpeed-like engine on every call, called several times with empty_cache() in between.

The engine keeps fp32 master weights, Adam moments and a flat gradient buffer, and registers
gradient hooks on each parameter's AccumulateGrad node whose closures capture the engine.

  --variant registry  the engine is also put in a module-level registry (a plain leak)
  --variant cycle     no registry, and a fresh model per call: model and engine leak only
                      through the cycle param._hp_mapping -> engine -> AccumulateGrad nodes -> param
                      (DeepSpeed's pattern); the nodes hold the parameters from C++, so the
                      garbage collector does not look into the parameters' attributes
  --variant fixed     train() tears the engine down (hooks removed, buffers dropped):
                      nothing may survive

Prints, for each call, PyTorch's own memory_allocated() at the entry of train() (the truth
`vramtrace leaks --phase train` is compared against) and a final JSON line VRAMTRACE_TRUTH.

    vramtrace run --phase train -o leak.vrt -- python3 scripts/gpu/leak_repro.py --variant registry
    vramtrace leaks --phase train --until-mark vramtrace-truth leak.vrt
"""
import argparse
import gc

import torch
import torch.nn as nn

from common import truth

_REGISTRY = []  # a module-level registry that nobody clears


class TinyTransformer(nn.Module):
    def __init__(self, vocab=8192, dim=512, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 8, 4 * dim, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


class Engine:
    """What DeepSpeed's ZeRO stage 1/2 engine keeps per model, reduced to its memory."""

    def __init__(self, model, lr=1e-4, hp_mapping=False):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        numel = sum(p.numel() for p in self.params)
        self.fp32_master = torch.zeros(numel, dtype=torch.float32, device="cuda")  # fp32 partition
        self.exp_avg = torch.zeros(numel, dtype=torch.float32, device="cuda")      # Adam m
        self.exp_avg_sq = torch.zeros(numel, dtype=torch.float32, device="cuda")   # Adam v
        self.flat_grads = torch.zeros(numel, dtype=torch.bfloat16, device="cuda")  # reduce bucket
        self.lr = lr
        self.grad_accs, self.handles = [], []
        offset = 0
        for p in self.params:
            self.fp32_master[offset:offset + p.numel()].copy_(p.detach().flatten())
            self._hook(p, offset)
            if hp_mapping:
                p._hp_mapping = (self, offset)  # a user-owned parameter points into the engine
            offset += p.numel()

    def _hook(self, param, offset):
        # DeepSpeed's pattern: hook the AccumulateGrad node and keep the node, so the hook
        # closure (which references self) lives in C++ for as long as the engine lives.
        grad_acc = param.expand_as(param).grad_fn.next_functions[0][0]

        def reduce_ready(*_):
            self.flat_grads[offset:offset + param.numel()].copy_(param.grad.flatten())

        self.handles.append(grad_acc.register_hook(reduce_ready))
        self.grad_accs.append(grad_acc)

    @torch.no_grad()
    def step(self):
        g = self.flat_grads.float()
        self.exp_avg.mul_(0.9).add_(g, alpha=0.1)
        self.exp_avg_sq.mul_(0.999).addcmul_(g, g, value=0.001)
        self.fp32_master.addcdiv_(self.exp_avg, self.exp_avg_sq.sqrt().add_(1e-8), value=-self.lr)
        offset = 0
        for p in self.params:
            p.copy_(self.fp32_master[offset:offset + p.numel()].view_as(p))
            p.grad = None
            offset += p.numel()

    def destroy(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.grad_accs.clear()
        self.fp32_master = self.exp_avg = self.exp_avg_sq = self.flat_grads = None


def train(model, variant, steps=3, batch=8, seq=256):
    if variant == "cycle":
        model = TinyTransformer().cuda()  # nothing outside this call keeps it
    engine = Engine(model, hp_mapping=variant == "cycle")
    if variant == "registry":
        _REGISTRY.append(engine)
    for _ in range(steps):
        tokens = torch.randint(0, 8192, (batch, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), tokens.view(-1))
        loss.backward()
        engine.step()
    if variant == "fixed":
        engine.destroy()
    return float(loss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["registry", "cycle", "fixed"], default="registry")
    ap.add_argument("--calls", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = TinyTransformer().cuda()
    entries = []
    for call in range(a.calls):
        torch.cuda.synchronize()
        entries.append(torch.cuda.memory_allocated())
        print("call %d: memory_allocated at entry %d reserved %d" % (call + 1, entries[-1], torch.cuda.memory_reserved()),
              flush=True)
        train(model, a.variant)
        gc.collect()
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    end = torch.cuda.memory_allocated()
    # Steady growth, from the second call on: the first call also sets up what every later one
    # reuses (cuBLAS workspaces, allocator segments), which is no leak.
    growth = (end - entries[1]) / (a.calls - 1) if a.calls > 1 else end - entries[0]
    truth(variant=a.variant, allocated_at_entry=entries, allocated_at_end=end, growth_per_call=growth,
          reserved_at_end=torch.cuda.memory_reserved())


if __name__ == "__main__":
    main()
