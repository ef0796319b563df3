"""A PyTorch job on the test double, as far as an injected attach can see (issue 19, item 3).

Before the attach it brings up the stand-in torch (tests/programs/pylib_faketorch) and has its
caching allocator hold, through libpyalloc_lib.so (argv[1]):
  A  4 MiB: tensor a1 (1 MiB), a2 (512 KiB, freed and pending on a stream), a3 (512 KiB, freed
     just after the attach's snapshot is built), the rest cached
  B  2 MiB: tensor b1, the whole segment (allocated with history recorded: it has frames)
  D  2 MiB: cached only (no tensor)
  E  1 MiB: cached; released just after the attach's snapshot is built, on this thread (an
     empty_cache while the snapshot was on its way to the trace)
  F  1 MiB: an expandable segment, with tensor f1 (256 KiB)
plus X, 3 MiB outside the allocator (a library's workspace); and, when the snapshot begins, so
after the attach, the allocator makes segment C (1 MiB) with tensor c1 (256 KiB), which the
snapshot lists. With FAKETORCH_C10 set, the stand-in traces its blocks to a fake libc10_cuda
that the attach's tensor layer attaches its tracker to (see pylib_faketorch/torch/cuda).
argv[2] says how: "torch" (the above, C on this thread), "torch-reorder" (no a3, E, F; C on another
thread, so that its allocation, stamped after the snapshot began, may reach the collector after
the snapshot's records), "uninitialized" (torch imported, CUDA never initialized in it: X only)
"none" (no torch at all: X only), "torch-only" (as "torch", without a3, F and X: the
allocator holds everything), "torch-raises" (A, B and D, and the snapshot raises) or
"torch-hostile" (A, B and D, and the snapshot answers B's segment amid malformed ones).

It prints "ready pid=N" and then answers one line per command on stdin:
  attached  waits (running bytecode, so that pending calls run) until the attach's teardown
            hook is registered, which the attach asks for right after its snapshot; says how
            many snapshots were taken
  free-a1   tensor a1 is freed (its block goes back to the cache)
  free-D    empty_cache() of D
  stop      says bye and ends
"""
import ctypes
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib_faketorch"))
LIB, MODE = sys.argv[1], sys.argv[2]
KiB, MiB = 1 << 10, 1 << 20

lib = ctypes.CDLL(LIB)
lib.pyalloc.restype = ctypes.c_void_p
lib.pyalloc.argtypes = [ctypes.c_size_t]
workspace = lib.pyalloc(3 * MiB) if MODE != "torch-only" else None  # X
segments = {}

if MODE != "none":
    import torch


def make_c():
    c = segments["C"] = torch.cuda.Segment(MiB)
    c.block(0, 256 * KiB, 256 * KiB - 8)


def make_c_elsewhere():
    t = threading.Thread(target=make_c)
    t.start()
    t.join()


if MODE.startswith("torch"):
    torch.cuda._init(LIB)
    a = segments["A"] = torch.cuda.Segment(4 * MiB, stream=7)
    a.block(0, MiB, MiB - 24)
    a.block(MiB, 512 * KiB, 512 * KiB, "active_pending_free")
    b = segments["B"] = torch.cuda.Segment(2 * MiB)
    b.block(0, 2 * MiB, 2 * MiB - 100, frames=[  # as recorded with history, innermost first
        {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"},
        {"filename": "/srv/train.py", "line": 42, "name": "make_batch"},
        {"filename": "/srv/train.py", "line": 99, "name": "<module>"}])
    segments["D"] = torch.cuda.Segment(2 * MiB)
if MODE in ("torch", "torch-only"):
    e = segments["E"] = torch.cuda.Segment(MiB)
    torch.cuda.memory.after_snapshot.append(e.release)
    torch.cuda.memory.before_snapshot.append(make_c)
if MODE == "torch":
    a.block(2 * MiB, 512 * KiB, 512 * KiB)
    torch.cuda.memory.after_snapshot.append(lambda: a.free_block(2 * MiB))
    f = segments["F"] = torch.cuda.Segment(MiB, expandable=True)
    f.block(0, 256 * KiB, 256 * KiB)


def raises(answer):
    raise RuntimeError("the allocator cannot be snapshotted now")


def hostile(answer):
    """B's segment, with a block outside it and malformed ones, among malformed segments."""
    (b,) = [d for d in answer["segments"] if d["address"] == segments["B"].address]
    b["blocks"] += [{"address": b["address"] + b["total_size"], "size": KiB, "requested_size": KiB,
                     "state": "active_allocated"},
                    {"address": b["address"], "size": "big", "state": "active_allocated"},
                    {"address": b["address"], "size": 2 * b["total_size"], "state": "active_allocated"},
                    "not a block", {"state": 7}]
    return {"segments": [{"device": "zero"}, 5, None, {"device": 0, "address": -1, "total_size": MiB},
                         {"device": 1 << 20, "address": 1 << 40, "total_size": MiB},
                         {"device": 0, "address": (1 << 64) - 4096, "total_size": 1 << 20}, b,
                         {"device": 0, "address": 1 << 40, "total_size": MiB, "blocks": "many"}]}


if MODE == "torch-raises":
    torch.cuda.memory.answer_instead = raises
if MODE == "torch-hostile":
    torch.cuda.memory.answer_instead = hostile
if MODE == "torch-reorder":
    torch.cuda.memory.before_snapshot.append(make_c_elsewhere)


def teardown_hooked():
    return any(getattr(getattr(f, "func", f), "__name__", "") == "vramtrace_teardown"  # a functools.partial
               for f in threading._threading_atexits)


def attached():
    deadline = time.monotonic() + 30
    while not teardown_hooked() and time.monotonic() < deadline:
        time.sleep(0.005)
    snapshots = torch.cuda.memory.calls if MODE != "none" else 0
    made = {k: f"{v.address:#x}" for k, v in segments.items()}
    return f"attached hooked={int(teardown_hooked())} snapshots={snapshots} segments={made}"


def free_a1():
    segments["A"].free_block(0)
    return "free-a1 done"


def free_d():
    segments.pop("D").release()
    return "free-D done"


COMMANDS = {"attached": attached, "free-a1": free_a1, "free-D": free_d}
print(f"ready pid={os.getpid()}", flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "stop":
        print("bye", flush=True)
        break
    print(COMMANDS[command](), flush=True)
