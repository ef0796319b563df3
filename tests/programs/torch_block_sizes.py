"""Tensor blocks whose real size is not what their request rounds to, in the shapes a training
step makes them, through the stand-in torch (tests/programs/pylib_faketorch) and the fake
libc10_cuda that FAKETORCH_C10 names: a temporary allocated and freed over and over at one
address (an elementwise op's output), a burst freed in reverse (a forward pass's activations),
interleaved lifetimes, frees of blocks from before the tracker,
torch.cuda.reset_accumulated_memory_stats() between a block's allocation and its free, and a
phase boundary while a block waits for its size.
argv[1]: libpyalloc_lib.so. Prints one JSON object: every block's address, real size and
estimate (its request rounded up to 512) in allocation order, which one a reset came between,
the unseen blocks freed, and how many statistics reads the repeated temporary and the whole
program cost. Last, a reset and an allocation by "another thread" while a phase boundary reads
the statistics (the fake libc10's fake_c10_during_next_stats_read)."""
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib_faketorch"))
import torch  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
PAIRS = 50

torch.cuda._init(sys.argv[1])
segment = torch.cuda.Segment(64 * MiB)
reads_at_start = torch.cuda._stats_reads()
blocks = []


def alloc(offset, size, requested):
    address = segment.block(offset, size, requested)
    blocks.append({"addr": address, "size": size, "estimate": max(512, (requested + 511) // 512 * 512)})


# A block of the large pool is not split when less than 1 MiB would remain: bigger than asked.
reads = torch.cuda._stats_reads()
for i in range(PAIRS):
    size = (2 + i % 3) * MiB
    alloc(0, size, size - 700 * KiB - i)
    segment.free_block(0)
temporary_reads = torch.cuda._stats_reads() - reads

for k in range(8):
    alloc(k * 4 * MiB, 4 * MiB if k % 2 else 3 * MiB, 3 * MiB - 4096 * (k + 1))
for k in reversed(range(8)):
    segment.free_block(k * 4 * MiB)

alloc(0, 2 * MiB, 1536 * KiB)
alloc(2 * MiB, 3 * MiB, 2 * MiB + 1)
segment.free_block(0)
alloc(8 * MiB, 2 * MiB, 1024 * KiB + 1)
segment.free_block(2 * MiB)
segment.free_block(8 * MiB)

# Blocks from before the tracker (no ALLOC seen) freed around a reset of the statistics, and a
# block allocated before a reset and freed after it.
def free_unseen(offset, size):
    torch.cuda._trace(torch.cuda.FREE_REQUESTED, segment.address + offset, size, size, 0)
    return {"addr": segment.address + offset, "size": size}


alloc(0, 3 * MiB, 2560 * KiB)
unseen = [free_unseen(40 * MiB, MiB)]
torch.cuda.reset_accumulated_memory_stats()
unseen.append(free_unseen(44 * MiB, 2 * MiB))
segment.free_block(0)
alloc(0, 3 * MiB, 2560 * KiB)
reset_block = len(blocks) - 1
torch.cuda.reset_accumulated_memory_stats()
segment.free_block(0)
alloc(0, 2 * MiB, 1536 * KiB)
segment.free_block(0)

# A block still waiting for its size when a phase begins: the boundary settles it.
vramtrace = ctypes.CDLL(None)  # the preload's API
alloc(0, 3 * MiB, 2 * MiB + 4096)
boundary_block = len(blocks) - 1
vramtrace.vramtrace_phase_enter(b"boundary")
segment.free_block(0)
vramtrace.vramtrace_phase_exit(b"boundary")

# The statistics reset and a block allocated by another thread while the boundary reads them
# (after its read, before it settles): the read is of counters the reset ended, and must size
# neither the block waiting then (it keeps its estimate) nor the new one (its free settles it).
torch.cuda.reset_accumulated_memory_stats()
alloc(0, 3 * MiB, 2 * MiB + 4096)
raced = {"waiting": len(blocks) - 1, "new": len(blocks)}
new_block = segment.address + 16 * MiB
torch.cuda._during_next_stats_read(new_block, 1536 * KiB, 2 * MiB)
blocks.append({"addr": new_block, "size": 2 * MiB, "estimate": 1536 * KiB})
vramtrace.vramtrace_phase_enter(b"raced")
segment.free_block(0)
torch.cuda._trace(torch.cuda.FREE_REQUESTED, new_block, 2 * MiB, 2 * MiB, 0)
vramtrace.vramtrace_phase_exit(b"raced")

# Two devices' blocks interleaved (a model split over two GPUs in one process): each device's
# statistics size its own blocks; device 1's allocator traces them through the same tracker.
on_device_1 = segment.address + 48 * MiB  # an address device 1's allocator hands out, as far as the trace can tell
alloc(0, 3 * MiB, 2 * MiB + 4096)
second_device = {"block": len(blocks), "device": 1}
torch.cuda._trace_on(1, torch.cuda.ALLOC, on_device_1, 1536 * KiB, 2 * MiB, 0)
blocks.append({"addr": on_device_1, "size": 2 * MiB, "estimate": 1536 * KiB})
segment.free_block(0)
torch.cuda._trace_on(1, torch.cuda.FREE_REQUESTED, on_device_1, 1536 * KiB, 2 * MiB, 0)

print(json.dumps({"blocks": blocks, "reset_block": reset_block, "raced": raced, "second_device": second_device,
                  "boundary_block": boundary_block, "boundaries_with_a_block_waiting": 2, "unseen": unseen, "pairs": PAIRS,
                  "temporary_reads": temporary_reads, "reads": torch.cuda._stats_reads() - reads_at_start}),
      flush=True)
