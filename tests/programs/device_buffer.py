"""A CUDA buffer, described the way CuPy and Numba arrays describe theirs: what
retain_buffers.py and retain_shapes.py keep. The runtime is $CUDART (the test double in the
tests), else libcudart.so.13."""
import ctypes
import os

rt = ctypes.CDLL(os.environ.get("CUDART", "libcudart.so.13"))


class DeviceBuffer:
    """nbytes of device memory from malloc (cudaMalloc's signature; the runtime's by default)."""

    def __init__(self, nbytes, malloc=None):
        self.ptr = ctypes.c_void_p()
        if (malloc or rt.cudaMalloc)(ctypes.byref(self.ptr), ctypes.c_size_t(nbytes)) != 0:
            raise MemoryError(nbytes)
        self.nbytes = nbytes

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr.value, False), "version": 3}

    def __del__(self):
        rt.cudaFree(self.ptr)
