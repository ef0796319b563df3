#!/usr/bin/env python3
"""The shapes of tests/programs/retain_shapes.py on PyTorch (docs/ux-audit.md #86-#88): a job
whose train() keeps one CUDA tensor a call in each of nine ways (an lru_cache, an exception's
traceback, a suspended generator, a threading.local, a class attribute, a default argument, an
attribute on a parameter, another thread's local, a module list reached through two native
paths) and, with --nccl, a new NCCL communicator a call (a one-rank group made and used in each
call: NCCL's buffers grow every call, and must be blamed, not labelled set up once). Under
`vramtrace run --phase train`, `leaks --json` must give every way's first-call survivor its
chain, its bytes each call, and "grows every call"; the tensor layer's entries must equal
torch.cuda.memory_allocated() at each call's entry, as the job prints it. Prints a table and
PASS/FAIL.

    python3 scripts/gpu/retention_shapes_check.py [VRAMTRACE [--nccl] [--keep DIR]]

--keep DIR copies the trace there (tests/golden/h200/retain-shapes*.vrt are such copies).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import kept_at, leaks_of, run_phase_job  # noqa: E402

MiB = 1 << 20
KEPT = {"lru": 1, "bounded": 1, "traceback": 2, "generator": 3, "threadlocal": 4, "default": 5, "classattr": 6,
        "attribute": 7, "thread": 8, "twopaths": 9}

JOB = r'''
import functools, os, sys, threading, torch
MiB = 1 << 20
KEPT = %(kept)r
NCCL = %(nccl)r

def tensor(mib):
    return torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")

@functools.lru_cache(maxsize=None)
def cached_workspace(i):
    return tensor(KEPT["lru"])  # kept: lru

@functools.lru_cache(maxsize=64)
def bounded_buffer(i):
    return tensor(KEPT["bounded"])  # kept: bounded

ERRORS = []

def failing_step():
    tmp = tensor(KEPT["traceback"])  # kept: traceback
    raise ValueError(tmp.numel())

def suspended():
    held = tensor(KEPT["generator"])  # kept: generator
    yield 1
    yield held

GENERATORS = []
PER_THREAD = threading.local()

class Model:
    cache = {}

def with_default(_memo=[]):
    _memo.append(tensor(KEPT["default"]))  # kept: default

MODEL = torch.nn.Linear(16, 16, device="cuda")
STOP = threading.Event()
THREADS = []

def worker(box, taken):
    local_buf = box.pop()
    taken.set()
    STOP.wait()
    del local_buf

def allocate(i):
    paths = [torch.empty] if i == 0 else [torch.empty, functools.partial(torch.empty)]
    out = []
    for make in paths:
        out.append(make(KEPT["twopaths"] * MiB, dtype=torch.uint8, device="cuda"))  # kept: twopaths
    return out

TWO_PATHS = []
GROUPS = []

def train(i):
    cached_workspace(i)
    bounded_buffer(i)
    try:
        failing_step()
    except ValueError as e:
        ERRORS.append(e)
    g = suspended()
    next(g)
    GENERATORS.append(g)
    PER_THREAD.__dict__.setdefault("buffers", []).append(tensor(KEPT["threadlocal"]))  # kept: threadlocal
    Model.cache[i] = tensor(KEPT["classattr"])  # kept: classattr
    with_default()
    MODEL.weight.__dict__.setdefault("ds_extra", []).append(tensor(KEPT["attribute"]))  # kept: attribute
    box, taken = [tensor(KEPT["thread"])], threading.Event()  # kept: thread
    t = threading.Thread(target=worker, args=(box, taken), daemon=True)
    t.start()
    THREADS.append(t)
    taken.wait()
    TWO_PATHS.extend(allocate(i))
    if NCCL:
        import torch.distributed as dist
        group = dist.new_group([0])
        dist.all_reduce(torch.ones(1, device="cuda"), group=group)
        torch.cuda.synchronize()
        GROUPS.append(group)

def main():
    if NCCL:
        import torch.distributed as dist
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
    for i in range(3):
        torch.cuda.synchronize()
        print("entry", i + 1, torch.cuda.memory_allocated(), flush=True)
        train(i)
    STOP.set()
    for t in THREADS:
        t.join()
    print("python", sys.version.split()[0], "torch", torch.__version__, flush=True)
    if NCCL:
        os._exit(0)  # the groups are the point: no teardown that waits on them

main()
'''


def expected(job, minor):
    thread = "Thread-1 (worker)" if minor >= 10 else "Thread-1"
    raised = next(n for n, line in enumerate(job.splitlines(), 1) if "raise ValueError" in line)
    yielded = next(n for n, line in enumerate(job.splitlines(), 1) if line.strip() == "yield 1")
    waiting = next(n for n, line in enumerate(job.splitlines(), 1) if "STOP.wait()" in line)
    return {
        "lru": "__main__.cached_workspace (lru_cache of cached_workspace) -> cache[0] (Tensor)",
        "bounded": "__main__.bounded_buffer (lru_cache of bounded_buffer) -> cache[0] (Tensor)",
        "traceback": f"__main__.ERRORS[0] (ValueError) -> .__traceback__.tb_next, in failing_step at job.py:{raised}: "
                     "local tmp (Tensor)",
        "generator": f"__main__.GENERATORS[0] (generator suspended at job.py:{yielded}) -> local held (Tensor)",
        "threadlocal": "__main__.PER_THREAD (_local) -> .buffers[0] (Tensor)",
        "default": "__main__.with_default (function with_default) -> default argument _memo[0] (Tensor)",
        "classattr": "__main__.Model (type) -> .cache[0] (Tensor)",
        "attribute": "__main__.MODEL.weight (Parameter) -> .ds_extra[0] (Tensor)",
        "thread": f"thread {thread}: worker (job.py:{waiting}): local_buf (Tensor)",
        "twopaths": "__main__.TWO_PATHS[0] (Tensor)",
    }


def main():
    vramtrace = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace")
    nccl = "--nccl" in sys.argv
    job_text = JOB % {"kept": KEPT, "nccl": nccl}
    r, trace, entries = run_phase_job(vramtrace, job_text, "vt-shapes-")
    out = leaks_of(vramtrace, trace, "--phase", "train", as_json=True)
    text = leaks_of(vramtrace, trace, "--phase", "train", "--top", "30")
    print(text)
    want = expected(job_text, sys.version_info[1])
    ok = r.returncode == 0 and out["layer"] == "tensors"
    traced_entries = [p["live_bytes_at_entry"] for p in out["phases"]]
    print(f"entries: traced {traced_entries} memory_allocated() {entries}")
    ok &= traced_entries == entries
    for way, chain in want.items():
        groups = kept_at(out, job_text, way)
        first = [" -> ".join(c) for s in groups if s["phase_index"] == 1 for c in s["held_by"]]
        calls = sorted({s["phase_index"] for s in groups})
        sizes = {s["bytes"] for s in groups}
        verdicts = {s["verdict"] for s in groups}
        # a block may be larger than its request: the allocator hands out a whole free block
        # when what it would leave is small (memory_allocated() counts the block too)
        good = (first == [chain] and calls == ([1, 2] if way == "thread" else [1, 2, 3])
                and all(KEPT[way] * MiB <= b < (KEPT[way] + 2) * MiB for b in sizes)
                and verdicts == {"grows every call"})
        ok &= good
        print(f"  {way:12s} {'ok ' if good else 'BAD'} calls {calls} sizes {sorted(sizes)} {sorted(verdicts)}")
        print(f"               {first}")
        if not good:
            print(f"          want {chain}")
    if nccl:  # NCCL allocates outside PyTorch's allocator: the CUDA layer
        cuda = leaks_of(vramtrace, trace, "--phase", "train", "--layer", "cuda", as_json=True)
        print(leaks_of(vramtrace, trace, "--phase", "train", "--layer", "cuda"))
        growing = [s for s in cuda["survivors"] if s.get("category") == "nccl"]
        blamed = [s for s in growing if not s["persistent"] and s["verdict"] == "grows every call"]
        print(f"  nccl: {len(growing)} survivor groups of category nccl, {len(blamed)} blamed as growing every call, "
              f"{sum(s['bytes'] for s in growing)} bytes")
        ok &= bool(blamed)
    if "--keep" in sys.argv:
        import shutil

        shutil.copy(trace, os.path.join(sys.argv[sys.argv.index("--keep") + 1],
                                        "retain-shapes-nccl.vrt" if nccl else "retain-shapes.vrt"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
