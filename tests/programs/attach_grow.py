"""The on-call case on the test double (issue 19): an untraced Python job that keeps one 1 MiB
buffer in a module-level list every 10 ms (and frees a temporary), prints its pid and "ready",
and runs until stdin closes; the interpreter's teardown then frees what the list holds. Prints
how many it kept. It allocates through libpyalloc_lib.so (argv[1]), as a job does through its
extensions."""
import ctypes
import os
import select
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.pyalloc.restype = ctypes.c_void_p
lib.pyalloc.argtypes = [ctypes.c_size_t]
lib.pyfree.argtypes = [ctypes.c_void_p]
MiB = 1 << 20


class Buf:
    def __init__(self, n):
        self.ptr = lib.pyalloc(n)

    def __del__(self):
        lib.pyfree(self.ptr)


KEEP = []


def step():
    tmp = Buf(3 * MiB)
    KEEP.append(Buf(MiB))  # the growing line
    del tmp


print(os.getpid(), "ready", flush=True)
while not select.select([sys.stdin], [], [], 0.01)[0]:
    step()
print("kept", len(KEEP), flush=True)
