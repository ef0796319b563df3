"""torch.cuda of the stand-in: a caching allocator that keeps segments and blocks. With
FAKETORCH_C10 naming a built tests/programs/fake_c10_tracker.c (as torch/lib/libc10_cuda.so), it
loads it as PyTorch loads its libc10_cuda and traces every block handed out or taken back to it,
as PyTorch's allocator records TraceEntries for an attached tracker."""
import ctypes
import os

from . import memory  # noqa: F401
from .memory import memory_snapshot  # noqa: F401 (re-exported, as PyTorch does)

_lib = None
_c10 = None
_segments = []
ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC = 0, 1, 2, 3


def is_initialized():
    return _lib is not None


def _init(lib_path):
    """CUDA comes up: segments are allocated through lib_path's pyalloc/pyfree from here on."""
    global _lib
    _lib = ctypes.CDLL(lib_path)
    _lib.pyalloc.restype = ctypes.c_void_p
    _lib.pyalloc.argtypes = [ctypes.c_size_t]
    _lib.pyfree.argtypes = [ctypes.c_void_p]
    global _c10
    if os.environ.get("FAKETORCH_C10"):
        _c10 = ctypes.CDLL(os.environ["FAKETORCH_C10"])
        _c10.fake_c10_trace.argtypes = [ctypes.c_int] + [ctypes.c_uint64] * 4
        _c10.fake_c10_stats_reads.restype = ctypes.c_uint64
        _c10.fake_c10_during_next_stats_read.argtypes = [ctypes.c_uint64] * 3
        _c10.fake_c10_trace_on.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_uint64] * 4


def reset_accumulated_memory_stats():
    if _c10:
        _c10.fake_c10_reset_accumulated()


def _stats_reads():
    """How often the allocator's statistics were read (getDeviceStats): the stand-in's own count."""
    return _c10.fake_c10_stats_reads() if _c10 else 0


def _during_next_stats_read(address, requested, size):
    """The stand-in's race: as the next statistics read returns, another thread resets the
    statistics and allocates a block at address (the fake libc10's fake_c10_during_next_stats_read)."""
    _c10.fake_c10_during_next_stats_read(address, requested, size)


def _trace_on(device, action, address, requested, size, stream):
    """A TraceEntry of another device's allocator (the segments here are device 0's)."""
    _c10.fake_c10_trace_on(device, action, address, requested, size, stream)


def _trace(action, address, requested, size, stream):
    if _c10:
        _c10.fake_c10_trace(action, address, requested, size, stream)


class Segment:
    """One cudaMalloc of the allocator; blocks(offset, size, requested, state) carve it up."""

    def __init__(self, size, stream=0, expandable=False):
        self.address = _lib.pyalloc(size)
        assert self.address, "the double refused a segment"
        _trace(SEGMENT_ALLOC, self.address, size, size, stream)
        self.size = size
        self.stream = stream
        self.expandable = expandable  # PyTorch's are VMM mappings; only the flag is stood in for
        self.blocks = []  # (offset, size, requested, state, frames); the gaps are inactive blocks
        _segments.append(self)

    def block(self, offset, size, requested, state="active_allocated", frames=()):
        """A tensor's block; one pending free was handed out and freed, its stream still using it.
        frames: where it was allocated, innermost first, as history recording keeps them."""
        assert 0 <= offset and offset + size <= self.size
        self.blocks.append((offset, size, requested, state, list(frames)))
        _trace(ALLOC, self.address + offset, requested, size, self.stream)
        if state == "active_pending_free":
            _trace(FREE_REQUESTED, self.address + offset, requested, size, self.stream)
        return self.address + offset

    def free_block(self, offset):
        """The tensor at offset is freed: its block goes back to the cache."""
        (found,) = [b for b in self.blocks if b[0] == offset]
        self.blocks.remove(found)
        _trace(FREE_REQUESTED, self.address + offset, found[2], found[1], self.stream)
        _trace(FREE_COMPLETED, self.address + offset, found[2], found[1], self.stream)  # no other stream used it

    def release(self):
        """empty_cache() for this segment: cudaFree."""
        _segments.remove(self)
        _lib.pyfree(self.address)

    def as_dict(self):
        blocks, at = [], 0
        for offset, size, requested, state, frames in sorted(self.blocks):
            if offset > at:
                blocks.append(_block(self.address + at, offset - at, 0, "inactive"))
            blocks.append(_block(self.address + offset, size, requested, state))
            if frames:
                blocks[-1]["frames"] = frames
            at = offset + size
        if at < self.size:
            blocks.append(_block(self.address + at, self.size - at, 0, "inactive"))
        active = sum(b["size"] for b in blocks if b["state"] != "inactive")
        return {"device": 0, "address": self.address, "total_size": self.size, "allocated_size": active,
                "active_size": active, "requested_size": sum(b["requested_size"] for b in blocks),
                "stream": self.stream, "segment_type": "large" if self.size > (1 << 20) else "small",
                "segment_pool_id": (0, 0), "is_expandable": self.expandable, "frames": [], "blocks": blocks}


def _block(address, size, requested, state):
    return {"address": address, "size": size, "requested_size": requested, "state": state}
