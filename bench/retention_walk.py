#!/usr/bin/env python3
"""What one retention walk costs, by heap size: a synthetic heap (modules of dicts, lists and
class instances, like a training job's) with owners of fake device buffers at its far end.

    LD_PRELOAD=build/preload/libvramtrace.so VRAMTRACE_OUTPUT=/tmp/w.vrt python3 bench/retention_walk.py [N ...]

Prints, per heap size, the seconds spent finding owners, searching (C when the preload is
loaded, else Python) and recording, and the objects the search visited. Nothing here needs a GPU:
the walk is the same Python and C as in a traced job (python/vramtrace/_retention.py).
"""
import gc
import os
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from vramtrace import _native, _owners  # noqa: E402


class Buffer:
    def __init__(self, ptr, n):
        self.ptr, self.n = ptr, n

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.n,), "typestr": "|u1", "version": 3}


class Node:
    def __init__(self, i):
        self.i, self.name, self.next = i, "n%d" % i, None


def heap(n):
    """n objects in 1000 fake modules, and 1000 owners in a registry behind them."""
    mods = []
    per = n // 1000
    for m in range(1000):
        mod = types.ModuleType("bench_mod_%d" % m)
        mod.table = {("k%d" % i): Node(i) for i in range(per // 3)}
        mod.items = [[i, str(i)] for i in range(per // 3)]
        sys.modules[mod.__name__] = mod
        mods.append(mod)
    owners = [Buffer(0x7f0000000000 + i * 4096, 4096) for i in range(1000)]
    mods[-1].registry = owners[:-1]
    deep = owners[-1]  # one owner 200 containers down: the search must go through the whole heap
    for _ in range(200):
        deep = [deep]
    mods[0].deep = deep
    return mods, [(b.ptr, b.n, 0, 0, 0, 0) for b in owners]


def one(n):
    mods, items = heap(n)  # the owners themselves are reachable only through the modules
    gc.collect()
    gc.disable()
    sent = []
    _native.record_owner = lambda *a: sent.append(a)
    w = _owners.Walk(items, time.monotonic_ns() + int(60e9))
    times = {}
    import cProfile, pstats
    if os.environ.get("PROFILE"):
        pr = cProfile.Profile()
        pr.enable()
        w.find_owners()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(6)
        w = _owners.Walk(items, time.monotonic_ns() + int(60e9))
    for part in ("find_owners", "reach", "emit"):
        t0 = time.perf_counter()
        getattr(w, part)()
        times[part] = time.perf_counter() - t0
    search = "C" if w.paths is not None else "Python"
    print("heap %9d objects: find %.3f s, search (%s) %.3f s, %d visited, record %.3f s; %d owners named" % (
        len(gc.get_objects()), times["find_owners"], search, times["reach"], w.visited, times["emit"],
        sum(1 for a in sent if a[5])), flush=True)
    w.release()
    for m in mods:
        del sys.modules[m.__name__]
    gc.enable()


if __name__ == "__main__":
    for n in map(int, sys.argv[1:] or ["100000", "600000", "2000000"]):
        one(n)
