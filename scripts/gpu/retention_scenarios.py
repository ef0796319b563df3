#!/usr/bin/env python3
"""Programs whose GPU memory survives or runs out, each with its own account of why.

    retention_scenarios.py ds-zero2|ds-zero1|ds-zero2-offload   repeated train() on real DeepSpeed
    retention_scenarios.py ds-oom-offload    a forward pass that runs out of memory under ZeRO-2 +
                                             offload_optimizer and a per-process cap
    retention_scenarios.py hf-history        a transformers model whose outputs are kept in a list
    retention_scenarios.py accelerate        Accelerator.prepare called on every train() call

Run under `vramtrace run --phase train` (scripts/gpu/retention_check.py does, and checks what
vramtrace says against what each program prints about itself on its VRAMTRACE_TRUTH line: PyTorch's
memory_allocated() at every call's entry, what gc says is alive, the optimizers' own state).
The model is a transformers Llama built from a config (random weights, nothing downloaded).
"""
import gc
import os
import sys

os.environ.setdefault("RANK", "0")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import mark, truth  # noqa: E402

VOCAB = 8192
MODEL = None      # the one model object every train() call is handed, as in the user's script
HISTORY = []      # hf-history: outputs kept "for logging"
ACCELERATOR = None


def llama(hidden=512, layers=4, inter=1536, heads=8):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, vocab_size=VOCAB,
                      max_position_embeddings=4096)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def ds_config(stage, offload, batch=4):
    cfg = {"train_batch_size": batch, "train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True,
           "steps_per_print": 1 << 30, "wall_clock_breakdown": False}
    if offload:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


def unique_bytes(tensors, where):
    """Bytes of the distinct storages of tensors that live on `where` ("cuda" or "pinned")."""
    seen, total = set(), 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        on = "cuda" if t.is_cuda else "pinned" if t.is_pinned() else "cpu"
        st = t.untyped_storage()
        if on == where and st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def tensors_in(obj, depth=3):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v, depth - 1)
    elif depth and isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v, depth - 1)


# ---- repeated train() on DeepSpeed -------------------------------------------------------------

def train(stage, offload, steps=2):
    import deepspeed

    opt = torch.optim.AdamW(MODEL.parameters(), lr=1e-4)
    engine, optimizer, _, _ = deepspeed.initialize(model=MODEL, optimizer=opt, config=ds_config(stage, offload))
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (4, 256), device=engine.device)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
    del engine, optimizer, opt, loss, ids  # what the user tried: del, gc.collect(), empty_cache()
    gc.collect()
    torch.cuda.empty_cache()


def zero_optimizers():
    def module(t):
        m = vars(t).get("__module__")
        return m if isinstance(m, str) else ""
    return [o for o in gc.get_objects() if module(type(o)).startswith("deepspeed.runtime.zero")
            and "Optimizer" in type(o).__name__]


def repeated_deepspeed(stage, offload, calls=3):
    global MODEL
    MODEL = llama().cuda()
    entries = []
    for _ in range(calls):
        torch.cuda.synchronize()
        entries.append(torch.cuda.memory_allocated())
        train(stage, offload)
    torch.cuda.synchronize()
    end = torch.cuda.memory_allocated()
    alive = zero_optimizers()
    device_state = sum(unique_bytes(list(tensors_in(vars(o))), "cuda") for o in alive)
    pinned_state = sum(unique_bytes(list(tensors_in(vars(o))), "pinned") for o in alive)
    truth(allocated_at_entry=entries, allocated_at_end=end, growth_per_call=(end - entries[1]) / (calls - 1),
          zero_optimizers_alive=len(alive), optimizer_types=sorted({type(o).__name__ for o in alive}),
          params_with_hp_mapping=sum(1 for p in MODEL.parameters() if getattr(p, "_hp_mapping", None) is not None),
          optimizers_device_bytes=device_state, optimizers_pinned_bytes=pinned_state)


# ---- an OOM in the forward pass under ZeRO-2 + offload_optimizer ------------------------------

ACCOUNT = {}


def account_at_oom(engine, ids):
    """Our own observer: what is on the device at the failure, by what it is."""

    def observer(device, requested, allowed, device_free):
        if ACCOUNT:
            return
        params = list(MODEL.parameters())
        opt = engine.optimizer
        owned = list(tensors_in(vars(opt)))
        inner = [v for st in getattr(opt.optimizer, "state", {}).values() for v in tensors_in(st)]
        ACCOUNT.update(
            requested=requested, allowed=allowed, device_free=device_free,
            allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
            parameters=unique_bytes(params, "cuda"),
            gradients=unique_bytes([p.grad for p in params if p.grad is not None], "cuda"),
            optimizer_device=unique_bytes(owned + inner, "cuda") - unique_bytes(params, "cuda")
            if unique_bytes(owned + inner, "cuda") else 0,
            optimizer_pinned=unique_bytes(owned + inner, "pinned"),
            inputs=unique_bytes([ids], "cuda"))

    torch._C._cuda_attach_out_of_memory_observer(observer)


def deepspeed_oom():
    global MODEL
    import deepspeed

    MODEL = llama(hidden=1024, layers=8, inter=2816, heads=16).cuda()
    torch.cuda.set_per_process_memory_fraction(0.04)  # about 5.6 GB of an H200
    opt = torch.optim.AdamW(MODEL.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=MODEL, optimizer=opt, config=ds_config(2, True, batch=1))
    seq, batch = 1024, 1
    ids = None
    hooked = False
    while batch <= 4096:
        mark("batch %d" % batch)
        ids = torch.randint(0, VOCAB, (batch, seq), device=engine.device)
        if not hooked:
            account_at_oom(engine, ids)
            hooked = True
        try:
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
        except torch.OutOfMemoryError as e:
            print("OOM at batch %d: %s" % (batch, str(e).splitlines()[0]), flush=True)
            break
        print("batch %d fits" % batch, flush=True)
        batch *= 2
    truth(batch=batch, **ACCOUNT)


# ---- transformers outputs kept in a list -------------------------------------------------------

def hf_train(model, opt, steps=3):
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (4, 256), device="cuda")
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        HISTORY.append(out)  # "for logging": keeps the logits (and nothing frees them)


def hf_history(calls=3):
    model = llama().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    entries = []
    for _ in range(calls):
        torch.cuda.synchronize()
        entries.append(torch.cuda.memory_allocated())
        hf_train(model, opt)
    torch.cuda.synchronize()
    end = torch.cuda.memory_allocated()
    logits = unique_bytes([o.logits for o in HISTORY], "cuda")
    truth(allocated_at_entry=entries, allocated_at_end=end, growth_per_call=(end - entries[1]) / (calls - 1),
          history_logits_bytes=logits, history_len=len(HISTORY))


# ---- accelerate: prepare() on every call ----------------------------------------------------------

def train_accelerate():
    model = llama(layers=2).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, opt = ACCELERATOR.prepare(model, opt)
    for _ in range(2):
        ids = torch.randint(0, VOCAB, (4, 256), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        ACCELERATOR.backward(loss)
        opt.step()
        opt.zero_grad()


def accelerate_repeated(calls=3):
    global ACCELERATOR
    from accelerate import Accelerator

    ACCELERATOR = Accelerator()
    entries = []
    for _ in range(calls):
        torch.cuda.synchronize()
        entries.append(torch.cuda.memory_allocated())
        train_accelerate()
        gc.collect()
    torch.cuda.synchronize()
    end = torch.cuda.memory_allocated()
    truth(allocated_at_entry=entries, allocated_at_end=end, growth_per_call=(end - entries[1]) / (calls - 1),
          accelerator_models=len(getattr(ACCELERATOR, "_models", [])),
          accelerator_optimizers=len(getattr(ACCELERATOR, "_optimizers", [])))


SCENARIOS = {
    "ds-zero2": lambda: repeated_deepspeed(2, False),
    "ds-zero1": lambda: repeated_deepspeed(1, False),
    "ds-zero2-offload": lambda: repeated_deepspeed(2, True),
    "ds-oom-offload": deepspeed_oom,
    "hf-history": hf_history,
    "accelerate": accelerate_repeated,
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
