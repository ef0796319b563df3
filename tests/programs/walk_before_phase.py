"""Two phases, one after the other: warmup() is called (and walked) before train() is first
entered. Each call keeps 1 MiB through ctypes (train's twice as much, so that train grows more),
on any CUDA runtime (the test double included). Run with --phase warmup --phase train."""
import ctypes
import os

rt = ctypes.CDLL(os.environ.get("CUDART", "libcudart.so.13"))
KEEP = []


def keep(mib):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(mib << 20))
    KEEP.append(p)


def warmup():
    keep(1)


def train():
    keep(2)


for _ in range(3):
    warmup()
for _ in range(4):
    train()
