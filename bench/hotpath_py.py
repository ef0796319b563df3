"""hotpath_py.py - cudaMalloc/cudaFree pairs from a Python call chain, through ctypes.

Usage: python3 hotpath_py.py LIBCUDART PAIRS [DEPTH] [--cdll] [--global]

The runtime is loaded with ctypes.PyDLL (the GIL stays held during the call, as in a C
extension such as PyTorch or CuPy); --cdll loads it with ctypes.CDLL instead (GIL released
around the call). ctypes loads it RTLD_LOCAL, as Python loads extension modules and their
libraries (CuPy's libcudart, for one); --global loads it RTLD_GLOBAL, as PyTorch's
libtorch_global_deps does. The pairs are made DEPTH Python frames deep (default 20): a recursive
method, so every pair has the same Python stack and the same native stack, as a training loop
calling into a model would. Prints one line: pairs=N cpu_ns=T wall_ns=W (this thread's CPU
time and the wall time of the loop). ctypes itself costs ~1 us a pair: compare with the same
program untraced, never with the C benchmark.
"""
import ctypes
import sys
import time


def load(path, cdll, glob):
    mode = ctypes.RTLD_GLOBAL if glob else ctypes.DEFAULT_MODE
    rt = ctypes.CDLL(path, mode=mode) if cdll else ctypes.PyDLL(path, mode=mode)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMalloc.restype = ctypes.c_int
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    rt.cudaFree.restype = ctypes.c_int
    rt.cudaSetDevice.argtypes = [ctypes.c_int]
    rt.cudaSetDevice.restype = ctypes.c_int
    return rt


class Layer:
    def __init__(self, rt, size):
        self.malloc = rt.cudaMalloc
        self.free = rt.cudaFree
        self.size = size
        self.ptr = ctypes.c_void_p()
        self.ref = ctypes.byref(self.ptr)

    def loop(self, depth, pairs):
        if depth > 0:
            return self.loop(depth - 1, pairs)
        malloc, free, ref, ptr, size = self.malloc, self.free, self.ref, self.ptr, self.size
        for _ in range(pairs):
            if malloc(ref, size):
                raise SystemExit("cudaMalloc failed")
            free(ptr)
        return pairs


def main():
    path, pairs = sys.argv[1], int(sys.argv[2])
    depth = int(sys.argv[3]) if len(sys.argv) > 3 and not sys.argv[3].startswith("-") else 20
    rt = load(path, "--cdll" in sys.argv, "--global" in sys.argv)
    if rt.cudaSetDevice(0):
        raise SystemExit("cudaSetDevice failed")
    layer = Layer(rt, 4096)
    # Warm-up and timed loop from one line, so both have the same stack and the warm-up fills
    # the preload's stack cache; the sleep lets the collector drain once (VRAMTRACE_FLUSH_MS).
    for n in (100, pairs):
        if n == pairs:
            time.sleep(0.15)
            c0, w0, p0 = time.thread_time_ns(), time.perf_counter_ns(), time.process_time_ns()
        layer.loop(depth, n)
    c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
    time.sleep(0.15)  # as bench/hotpath.c: the collector writes the loop's events meanwhile
    p1 = time.process_time_ns()
    print(f"mode=python pairs={pairs} cpu_ns={c1 - c0} wall_ns={w1 - w0} proc_cpu_ns={p1 - p0}")


if __name__ == "__main__":
    main()
