"""rank_leak.py - one rank of a job whose train() keeps memory, on any CUDA runtime (the test
double included): each of three train() calls frees a 4 MiB scratch buffer and keeps
((3 * RANK) % 8 + 1) MiB from keep_for_later, so rank 5 grows most (8 MiB per call), rank 0
least (1 MiB). tests/e2e/test_parquet.py runs it as 8 ranks and checks the Parquet export.

    RANK=N CUDART=libcudart.so.13 rank_leak.py      (vramtrace on PYTHONPATH)
"""
import ctypes
import os

import vramtrace

MiB = 1 << 20
rt = ctypes.CDLL(os.environ.get("CUDART", "libcudart.so.13"))
KEPT = []


def cuda_malloc(nbytes):
    p = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes)) != 0:
        raise MemoryError(nbytes)
    return p


def keep_for_later(nbytes):
    KEPT.append(cuda_malloc(nbytes))


def train(rank):
    with vramtrace.phase("train"):
        rt.cudaFree(cuda_malloc(4 * MiB))
        keep_for_later(((3 * rank) % 8 + 1) * MiB)


if __name__ == "__main__":
    for _ in range(3):
        train(int(os.environ["RANK"]))
    print("kept", len(KEPT))
