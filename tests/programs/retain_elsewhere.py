"""A train() that keeps one buffer a call where a program's own objects do not name it, with the
cyclic GC off (tests/e2e/test_retention_elsewhere.py):

  signal   2  a closure variable of the function set as the SIGUSR1 handler (the next call's replaces it)
  rtsignal 8  the same for a real-time signal, which has no name of its own (SIGRTMIN + 5)
  context  3  the value of a context variable (the next call's replaces it)
  slot     6  a __slots__ attribute of a module-level object (the next call's replaces it)
  cycle    7  an attribute of one of two objects that refer to each other, never collected
  atexit   1  a closure variable of a function registered with atexit (held in C, out of Python's sight)
  local    4  what train() returns, a local of the loop that calls it (the next call's replaces it)
  task     5  a local of a coroutine whose asyncio task waits on a timer, never run again
  iterator 9  the list an iterator inside an itertools.cycle walks (a hop no attribute names)
  weakkey 10  a WeakKeyDictionary's value, under a key the program keeps
  genexpr 11  what a generator expression, kept unstarted, will loop over (its hidden argument ".0")
  dictkey 12  a dict's key (the buffer itself keys the dict: a cache by tensor)

A replaced buffer must be freed when the next call replaces it, traced or not: the retention
walks run with the GC off too and must leave nothing behind, nor keep what a running frame's
local held when they read it (before 3.13 reading a frame's locals leaves a copy of them on the
frame). At the end the program prints "alive: " and, for each way, whether each call's buffer is
still alive, and "rebound: " whether each returned buffer was still alive once the loop's local
named the next one. Buffers freed during teardown run Python code (their __del__) while
vramtrace's phase hook is still set.

    retain_elsewhere.py [CALLS [cprofile]]    cprofile: the second call runs under cProfile
"""
import asyncio
import atexit
import contextvars
import gc
import itertools
import json
import signal
import sys
import weakref

from device_buffer import DeviceBuffer

MiB = 1 << 20

KEPT = {"atexit": 1, "signal": 2, "context": 3, "local": 4, "task": 5, "slot": 6, "cycle": 7, "rtsignal": 8,
        "iterator": 9, "weakkey": 10, "genexpr": 11, "dictkey": 12}
REPLACED = ("signal", "rtsignal", "context", "local", "slot")

STEP_BUFFER = contextvars.ContextVar("step_buffer", default=None)
ALIVE = {way: [] for way in KEPT}


class Holder:
    __slots__ = ("buf",)


HOLDER = Holder()
ITERATORS = []
PENDING = []
BY_BUFFER = {}
KEYS = []
BY_KEY = weakref.WeakKeyDictionary()


class Holder2:
    pass


class Node:
    def __init__(self):
        self.other = self.buf = None


LOOP = asyncio.new_event_loop()


async def sleeper(buffer):
    await asyncio.sleep(3600)


def watch(way, buffer):
    ALIVE[way].append(weakref.ref(buffer))
    return buffer


def train(i):
    """i is read last: a walk that emptied the frame's locals under its profile event would
    have deleted it."""
    at_exit = watch("atexit", DeviceBuffer(KEPT["atexit"] * MiB))  # kept: atexit
    atexit.register(lambda: at_exit)
    held = watch("signal", DeviceBuffer(KEPT["signal"] * MiB))  # kept: signal
    signal.signal(signal.SIGUSR1, lambda signum, frame: held)
    realtime = watch("rtsignal", DeviceBuffer(KEPT["rtsignal"] * MiB))  # kept: rtsignal
    signal.signal(signal.SIGRTMIN + 5, lambda signum, frame: realtime)
    STEP_BUFFER.set(watch("context", DeviceBuffer(KEPT["context"] * MiB)))  # kept: context
    HOLDER.buf = watch("slot", DeviceBuffer(KEPT["slot"] * MiB))  # kept: slot
    coroutine = sleeper(watch("task", DeviceBuffer(KEPT["task"] * MiB)))  # kept: task
    contextvars.Context().run(LOOP.create_task, coroutine)  # a task keeps a copy of the context it starts in
    LOOP.run_until_complete(asyncio.sleep(0))  # the task starts, and waits
    a, b = Node(), Node()
    a.other, b.other = b, a
    a.buf = watch("cycle", DeviceBuffer(KEPT["cycle"] * MiB))  # kept: cycle
    ITERATORS.append(itertools.cycle([watch("iterator", DeviceBuffer(KEPT["iterator"] * MiB))]))  # kept: iterator
    KEYS.append(Holder2())
    BY_KEY[KEYS[-1]] = watch("weakkey", DeviceBuffer(KEPT["weakkey"] * MiB))  # kept: weakkey
    PENDING.append(b.nbytes for b in [watch("genexpr", DeviceBuffer(KEPT["genexpr"] * MiB))])  # kept: genexpr
    BY_BUFFER[watch("dictkey", DeviceBuffer(KEPT["dictkey"] * MiB))] = i  # kept: dictkey
    if i < 0:
        raise ValueError(i)
    return watch("local", DeviceBuffer(KEPT["local"] * MiB))  # kept: local


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    profiled = len(sys.argv) > 2 and sys.argv[2] == "cprofile"
    gc.disable()
    last, rebound = None, []
    for i in range(calls):
        if profiled and i == 1:
            import cProfile

            profiler = cProfile.Profile()
            last = profiler.runcall(train, i)
        else:
            last = train(i)
        rebound += [ALIVE["local"][i - 1]() is not None] if i else []
    print("alive: " + json.dumps({way: [r() is not None for r in refs] for way, refs in ALIVE.items()}), flush=True)
    print("rebound: " + json.dumps(rebound), flush=True)
    for task in asyncio.all_tasks(LOOP):  # they end pending: asyncio would warn
        task._log_destroy_pending = False
    LOOP.close()  # an open loop's teardown fails on 3.10 (the tasks stay: each is a cycle with its future)


if __name__ == "__main__":
    main()
