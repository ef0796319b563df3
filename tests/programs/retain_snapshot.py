"""vramtrace.snapshot() from a program that keeps a buffer in a module-level list: the snapshot
carries a retention walk that names it. argv: the snapshot's path; VRAMTRACE_TEST_PYTHON: where
the vramtrace package is."""
import ctypes
import os
import sys

sys.path.insert(0, os.environ["VRAMTRACE_TEST_PYTHON"])
import vramtrace  # noqa: E402
rt = ctypes.CDLL(os.environ["CUDART"])
class Buf:
    def __init__(self, n):
        self.ptr = ctypes.c_void_p(); rt.cudaMalloc(ctypes.byref(self.ptr), ctypes.c_size_t(n)); self.n = n
    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr.value, False), "shape": (self.n,), "typestr": "|u1", "version": 3}
KEEP = [Buf(1 << 20)]
print(vramtrace.snapshot(sys.argv[1]))
