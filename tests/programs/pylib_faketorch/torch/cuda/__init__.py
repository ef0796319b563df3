"""torch.cuda of the stand-in: a caching allocator that keeps segments and blocks."""
import ctypes

from . import memory  # noqa: F401

_lib = None
_segments = []


def is_initialized():
    return _lib is not None


def _init(lib_path):
    """CUDA comes up: segments are allocated through lib_path's pyalloc/pyfree from here on."""
    global _lib
    _lib = ctypes.CDLL(lib_path)
    _lib.pyalloc.restype = ctypes.c_void_p
    _lib.pyalloc.argtypes = [ctypes.c_size_t]
    _lib.pyfree.argtypes = [ctypes.c_void_p]


class Segment:
    """One cudaMalloc of the allocator; blocks(offset, size, requested, state) carve it up."""

    def __init__(self, size, stream=0):
        self.address = _lib.pyalloc(size)
        assert self.address, "the double refused a segment"
        self.size = size
        self.stream = stream
        self.blocks = []  # (offset, size, requested, state); the gaps are inactive blocks
        _segments.append(self)

    def block(self, offset, size, requested, state="active_allocated"):
        assert 0 <= offset and offset + size <= self.size
        self.blocks.append((offset, size, requested, state))
        return self.address + offset

    def release(self):
        """empty_cache() for this segment: cudaFree."""
        _segments.remove(self)
        _lib.pyfree(self.address)

    def as_dict(self):
        blocks, at = [], 0
        for offset, size, requested, state in sorted(self.blocks):
            if offset > at:
                blocks.append(_block(self.address + at, offset - at, 0, "inactive"))
            blocks.append(_block(self.address + offset, size, requested, state))
            at = offset + size
        if at < self.size:
            blocks.append(_block(self.address + at, self.size - at, 0, "inactive"))
        active = sum(b["size"] for b in blocks if b["state"] != "inactive")
        return {"device": 0, "address": self.address, "total_size": self.size, "allocated_size": active,
                "active_size": active, "requested_size": sum(b["requested_size"] for b in blocks),
                "stream": self.stream, "segment_type": "large" if self.size > (1 << 20) else "small",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}


def _block(address, size, requested, state):
    return {"address": address, "size": size, "requested_size": requested, "state": state}
