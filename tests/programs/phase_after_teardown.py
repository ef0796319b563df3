"""Every call of train() comes after teardown began: an atexit handler makes them (vramtrace's
teardown mark comes from threading's exit hooks, which run before atexit's). Each call keeps
1 MiB through ctypes, on any CUDA runtime (the test double included)."""
import atexit
import ctypes
import os

rt = ctypes.CDLL(os.environ.get("CUDART", "libcudart.so.13"))
KEEP = []


def train():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20))
    KEEP.append(p)


atexit.register(lambda: [train() for _ in range(3)])
