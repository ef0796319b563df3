"""A stand-in for PyTorch, as far as an injected `vramtrace attach` looks at it
(preload/torch_seed.c): `torch.cuda.is_initialized()` and `torch.cuda.memory._snapshot()`, whose
answer has the shape of PyTorch's own (segments, each with its blocks covering it). Its segments
are real device memory, allocated through libpyalloc_lib.so on the CUDA double, as PyTorch's
caching allocator allocates its segments with cudaMalloc; its blocks are bookkeeping only, as
PyTorch's are. Used by tests/programs/torch_seed_job.py."""
from . import cuda  # noqa: F401 (torch imports torch.cuda)
