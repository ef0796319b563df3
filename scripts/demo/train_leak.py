#!/usr/bin/env python3
"""The built-in demo: a train() that leaks the way DeepSpeed engines do, on any CUDA runtime.

It talks to libcudart through ctypes, so it runs on the GPU-free test double as well as on a
real GPU. Each train() call builds an "engine" (fp32 master weights, Adam moments, a flat
gradient buffer) and registers it in a module-level registry that is never cleared, so every
call leaves its engine behind. Activations are allocated and freed inside each step.

    vramtrace run --phase train -- python3 scripts/demo/train_leak.py
    vramtrace leaks --phase train vramtrace.<pid>.vrt
"""
import ctypes
import ctypes.util
import sys

MiB = 1 << 20
_ENGINES = []  # the module-level registry that keeps every engine alive


def _cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    sys.exit("no libcudart found (build the test doubles or install CUDA)")


rt = _cudart()


def cuda_malloc(nbytes):
    ptr = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(nbytes)) != 0:
        raise MemoryError("cudaMalloc(%d) failed" % nbytes)
    return ptr


def cuda_free(ptr):
    rt.cudaFree(ptr)


class Engine:
    def __init__(self, params_mib):
        self.master = cuda_malloc(params_mib * MiB)          # fp32 master copy
        self.exp_avg = cuda_malloc(params_mib * MiB)         # Adam first moment
        self.exp_avg_sq = cuda_malloc(params_mib * MiB)      # Adam second moment
        self.grad_buffer = cuda_malloc(params_mib * MiB // 2)  # flat fp16 gradients
        _ENGINES.append(self)  # the leak: nobody ever removes it


def step(batch_mib):
    activations = cuda_malloc(batch_mib * MiB)  # freed at the end of the step
    cuda_free(activations)


def train(sample):
    engine = Engine(params_mib=24)
    for _ in range(3):
        step(batch_mib=16)
    return engine


def main():
    for sample in range(4):
        train(sample)
    print("trained on 4 samples; %d engines still registered" % len(_ENGINES))


if __name__ == "__main__":
    main()
