"""A train() that keeps, each call, a small slice of a big tensor: the slice keeps its whole
storage (tests/e2e/test_retention_shapes.py). PyTorch is stood in for by the little of it the
retention walk reads of a tensor (its class, its storage's address and size, its elements and
their size): a `torch` module made here, whose storages are device memory from the CUDA double.

  retain_view.py CALLS

Each call makes a BIG MiB tensor and keeps VIEWS.append(big[:16]) (16 bytes of it), and keeps a
whole WHOLE MiB tensor in WHOLES (no view: nothing more to say of it). Prints "kept N".
"""
import ctypes
import sys
import types

from device_buffer import rt

MiB = 1 << 20
BIG, WHOLE = 8, 2


class Storage:
    """Device memory that no Python object of its own describes, as PyTorch's storages."""

    def __init__(self, nbytes):
        p = ctypes.c_void_p()
        if rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes)) != 0:
            raise MemoryError(nbytes)
        self.address, self.size = p.value, nbytes

    def data_ptr(self):
        return self.address

    def nbytes(self):
        return self.size

    def __del__(self):
        rt.cudaFree(ctypes.c_void_p(self.address))


class Tensor:
    is_leaf, grad, grad_fn = True, None, None

    def __init__(self, storage, offset, numel):
        self._storage, self._offset, self._numel = storage, offset, numel

    @classmethod
    def empty(cls, nbytes):
        return cls(Storage(nbytes), 0, nbytes)

    def __getitem__(self, key):
        start, stop, _ = key.indices(self._numel)
        return Tensor(self._storage, self._offset + start, stop - start)

    def data_ptr(self):
        return self._storage.data_ptr() + self._offset

    def untyped_storage(self):
        return self._storage

    def numel(self):
        return self._numel

    def element_size(self):
        return 1


class DisableTorchFunctionSubclass:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def stand_in_torch():
    torch = types.ModuleType("torch")
    torch.Tensor = Tensor
    torch.nn = types.SimpleNamespace(Module=type("Module", (), {}), Parameter=type("Parameter", (Tensor,), {}))
    torch.optim = types.SimpleNamespace(Optimizer=type("Optimizer", (), {}))
    torch._C = types.SimpleNamespace(DisableTorchFunctionSubclass=DisableTorchFunctionSubclass)
    sys.modules["torch"] = torch
    return torch


torch = stand_in_torch()
VIEWS, WHOLES = [], []


def train(i):
    big = torch.Tensor.empty(BIG * MiB)  # kept: view
    VIEWS.append(big[:16])
    WHOLES.append(torch.Tensor.empty(WHOLE * MiB))  # kept: whole


for i in range(int(sys.argv[1])):
    train(i)
print("kept", len(VIEWS))
