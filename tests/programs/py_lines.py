"""py_lines.py - one Python frame allocating from two lines, and one function at two recursion depths.

Usage: python3 py_lines.py PATH/TO/libcudart.so.13

The preload caches a (code object, instruction offset) -> frame id per thread: a cache keyed on
the code object alone would give the second line of two_lines the first line's frame, and the
stack cache must tell the two recursion depths apart. Each allocation is kept live; its size
names it: two_lines makes 1 MiB (line "first") and 2 MiB (line "second") three times over,
recurse makes 3 MiB two frames deep and 5 MiB four frames deep.
"""
import ctypes
import sys

MiB = 1 << 20


def cuda_malloc(rt, size):
    p = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(p), size):  # MARK: cuda_malloc
        sys.exit(3)
    return p


def two_lines(rt, out):
    out.append(cuda_malloc(rt, 1 * MiB))  # MARK: first
    out.append(cuda_malloc(rt, 2 * MiB))  # MARK: second


def recurse(rt, depth, size, out):
    if depth:
        return recurse(rt, depth - 1, size, out)  # MARK: recurse
    out.append(cuda_malloc(rt, size))  # MARK: bottom


def main():
    rt = ctypes.PyDLL(sys.argv[1])
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    if rt.cudaSetDevice(0):
        sys.exit(3)
    out = []
    for _ in range(3):
        two_lines(rt, out)  # MARK: main.two_lines
    recurse(rt, 2, 3 * MiB, out)  # MARK: main.recurse2
    recurse(rt, 4, 5 * MiB, out)  # MARK: main.recurse4
    print(f"py_lines: {len(out)} live")


if __name__ == "__main__":
    main()
