"""A stand-in for an installed training library (its directory holds a .dist-info, as pip's
--target and --user installs do): it allocates on the caller's behalf."""
import ctypes
import os

rt = ctypes.CDLL(os.environ["CUDART"])
KEPT = []


def initialize(nbytes):
    return _Engine(nbytes)


class _Engine:
    def __init__(self, nbytes):
        self.buf = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(self.buf), ctypes.c_size_t(nbytes))
        KEPT.append(self)
