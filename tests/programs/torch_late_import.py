"""PyTorch brought up after the process's first device allocation (preload/torch.c's search):
a library allocates first, while no libc10_cuda is loaded, so the tensor layer finds none and
looks again only 20 ms later; then, past that, the stand-in torch (tests/programs/pylib_faketorch)
comes up with the fake libc10_cuda that FAKETORCH_C10 names and allocates a segment, whose
cudaMalloc is where the tensor layer looks again and attaches; then it hands out one tensor.
argv[1]: libpyalloc_lib.so. Prints the segment's address."""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib_faketorch"))
LIB = sys.argv[1]
KiB, MiB = 1 << 10, 1 << 20

lib = ctypes.CDLL(LIB)
lib.pyalloc.restype = ctypes.c_void_p
lib.pyalloc.argtypes = [ctypes.c_size_t]
workspace = lib.pyalloc(MiB)  # before any torch: the search finds nothing
time.sleep(0.2)  # past the 20 ms before the next search

import torch  # noqa: E402

torch.cuda._init(LIB)
segment = torch.cuda.Segment(2 * MiB)
segment.block(0, 512 * KiB, 512 * KiB - 8)
print(hex(segment.address), flush=True)
