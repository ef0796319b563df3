"""python_cold.py - allocations under 20 distinct Python functions with the caches emptied between
them (bench/cachesim_python.sh runs it under callgrind's cache simulation).

Usage: python3 python_cold.py LIBCUDART PAIRS

Each pair (cudaMalloc + cudaFree through ctypes.PyDLL) is made 21 frames deep, each frame its own
code object as in a real stack (a recursive function would share one), and 8 MiB are read and
written between pairs, so that what the stack walks read between two allocations - the memos,
the code objects, the shape table - is out of the caches again, as a framework's own work
between two allocations leaves it.
"""
import ctypes
import sys

rt = ctypes.PyDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
pairs = int(sys.argv[2])
a, b = bytearray(4 << 20), bytearray(4 << 20)
p = ctypes.c_void_p()
ref = ctypes.byref(p)


def f20():
    rt.cudaMalloc(ref, 4096)
    rt.cudaFree(p)


for i in range(19, -1, -1):
    exec(f"def f{i}():\n    return f{i + 1}()\n")
for _ in range(pairs):
    f0()  # noqa: F821 (made by exec above)
    a[:] = b
