"""ctypes_alloc.py - a Python program that allocates through the CUDA runtime with ctypes.

Usage: python3 ctypes_alloc.py PATH/TO/libcudart.so.13 [--release-gil]

The runtime is loaded with ctypes.PyDLL, which keeps the GIL held during foreign calls as a C
extension (PyTorch, CuPy) does; --release-gil loads it with ctypes.CDLL instead, which drops
the GIL around each call as Numba's and other pure-ctypes drivers do.

The allocations happen in named Python functions, so the recorded stacks must carry Python
frames with this file, the function's qualified name and the line of each call. The lines are
found by tests/e2e from the "# MARK: name" comments below; keep each comment on its line.

Expected: device 0, device: peak 10 MiB (two 4 MiB weights + 2 MiB activations), live 8 MiB,
all from one site (the cudaMalloc line of cuda_malloc, called from allocate_weights, from
Model.build); host, host_pinned: peak = live = 64 KiB from pin_host.
"""
import ctypes
import sys

MiB = 1 << 20


def load(path, release_gil):
    rt = ctypes.CDLL(path) if release_gil else ctypes.PyDLL(path)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMallocHost.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    for fn in (rt.cudaMalloc, rt.cudaMallocHost, rt.cudaFree, rt.cudaSetDevice):
        fn.restype = ctypes.c_int
    return rt


def check(rc, what):
    if rc != 0:
        print(f"{what} failed: {rc}", file=sys.stderr)
        sys.exit(3)


def cuda_malloc(rt, size):
    p = ctypes.c_void_p()
    check(rt.cudaMalloc(ctypes.byref(p), size), "cudaMalloc")  # MARK: cuda_malloc
    return p


def allocate_weights(rt):
    weights = []
    for _ in range(2):
        weights.append(cuda_malloc(rt, 4 * MiB))  # MARK: allocate_weights
    return weights


def allocate_activations(rt):
    p = cuda_malloc(rt, 2 * MiB)  # MARK: allocate_activations
    check(rt.cudaFree(p), "cudaFree")


def pin_host(rt):
    p = ctypes.c_void_p()
    check(rt.cudaMallocHost(ctypes.byref(p), 64 * 1024), "cudaMallocHost")  # MARK: pin_host
    return p


class Model:
    def __init__(self, rt):
        self.rt = rt
        self.weights = []

    def build(self):
        self.weights = allocate_weights(self.rt)  # MARK: Model.build

    def step(self):
        allocate_activations(self.rt)  # MARK: Model.step


def main():
    rt = load(sys.argv[1], "--release-gil" in sys.argv[2:])
    check(rt.cudaSetDevice(0), "cudaSetDevice")
    model = Model(rt)
    model.build()  # MARK: main.build
    model.step()  # MARK: main.step
    staging = pin_host(rt)  # MARK: main.pin_host
    print(f"ctypes_alloc: {len(model.weights)} weights, staging {'set' if staging.value else 'unset'}")


if __name__ == "__main__":
    main()  # MARK: module
