#!/usr/bin/env python3
"""GPU scenarios for scripts/gpu_verify.py: each allocates, keeps what it allocated alive, and
prints the process's own view of its memory on one line:  VRAMTRACE_TRUTH {json}

Run one with:  python3 scripts/gpu/scenario.py MODE
"""
import os
import sys


from common import truth


def torch_workload(matmul=True):
    """A few tensors of awkward sizes, some freed, and a small matmul (cuBLAS workspace)."""
    import torch
    keep = []
    for i, n in enumerate([1, 511, 4096, 1 << 20, (1 << 20) + 3, 7 << 20, 33 << 20, 129 << 20]):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        if i % 3 != 1:
            keep.append(t)
    if matmul:
        a = torch.randn(512, 512, device="cuda")
        keep.append(a @ a)
    torch.cuda.synchronize()
    return keep


def torch_modes(mode):
    import torch
    # Without the cache every tensor is one cudaMalloc; a matmul would add cuBLAS's workspace,
    # which no tensor owns, so that mode compares tensors alone.
    keep = torch_workload(matmul=mode != "torch-nocache")
    stats = {}
    if mode == "torch-pinned":
        pinned = [torch.empty(n, dtype=torch.uint8).pin_memory() for n in (1000, 1 << 20, (3 << 20) + 5)]
        keep += pinned
        try:
            stats = {k: v for k, v in torch.cuda.host_memory_stats().items() if "bytes" in k and "current" in k}
        except Exception as e:  # older PyTorch
            stats = {"error": str(e)}
    live_tensor_bytes = sum(t.untyped_storage().nbytes() for t in keep if t.is_cuda)
    truth(mode=mode, torch=torch.__version__, reserved=torch.cuda.memory_reserved(),
          allocated=torch.cuda.memory_allocated(), tensor_storage_bytes=live_tensor_bytes,
          host_stats=stats, alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))


def cupy_mode():
    import cupy
    keep = [cupy.empty(n, dtype=cupy.uint8) for n in (1000, 1 << 20, (5 << 20) + 1, 64 << 20)]
    del keep[1]
    pool = cupy.get_default_memory_pool()
    truth(mode="cupy", cupy=cupy.__version__, pool_total=pool.total_bytes(), pool_used=pool.used_bytes())
    return keep


def jax_mode():
    import jax
    import jax.numpy as jnp
    keep = [jnp.zeros(n, dtype=jnp.uint8) for n in (1000, 1 << 20, (5 << 20) + 1, 64 << 20)]
    for k in keep:
        k.block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    truth(mode="jax", jax=jax.__version__, **{k: v for k, v in stats.items() if isinstance(v, int)})
    return keep


def nccl_mode():
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.init()
    free0, _ = torch.cuda.mem_get_info()
    reserved0 = torch.cuda.memory_reserved()
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    truth(mode="nccl", meminfo_delta=free0 - free1, torch_reserved_delta=torch.cuda.memory_reserved() - reserved0,
          nccl_cumem=os.environ.get("NCCL_CUMEM_ENABLE", "auto"))
    return x


def main():
    mode = sys.argv[1]
    if mode.startswith("torch"):
        torch_modes(mode)
    elif mode == "cupy":
        cupy_mode()
    elif mode == "jax":
        jax_mode()
    elif mode == "nccl":
        nccl_mode()
    else:
        sys.exit("unknown mode " + mode)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
