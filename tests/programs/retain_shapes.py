"""A train() that keeps one buffer a call in each of thirteen more ways than retain_buffers.py,
on any CUDA runtime (the test double included): the shapes the same bug takes in real programs.

Kept per call (MiB, the line that allocates it ends in "# kept: <way>"):
  lru       1  a functools.lru_cache'd function's result (unbounded cache, keyed by the call)
  bounded   1  the same through a bounded cache (its entries are out of Python's sight)
  traceback 2  a local of a frame that raised, kept through the exception in a module-level list
               (an exception whose own __traceback__ attribute raises)
  generator 3  a local of a suspended generator kept in a module-level list
  threadlocal 4  an attribute of a threading.local
  classattr 6  an entry of a dict that is a class attribute
  default   5  a mutable default argument
  attribute 7  an attribute set on an object (the way DeepSpeed tags parameters)
  thread    8  a local of another thread, blocked
  partial  12  an argument bound by functools.partial, kept in a list of callbacks
  set      13  a member of a module-level set
  namedtuple 14  a field of a named tuple kept in a list
  twopaths  9  one line reached through two native paths (directly; through functools.partial,
               whose call is C, too in the later calls: 9 MiB more each): one site, not two
Set up once, in the first call only: 10 MiB in a cached workspace() with no argument.
With LIB (tests' libpyalloc_lib.so), one more line: its first call sets a library's workspace up
(11 MiB through a function whose frame names cuBLAS's workspace), its later calls keep a plain
buffer each (11 MiB a call): the same Python frames, two sites (what each is differs).

    retain_shapes.py [CALLS [LIB]]
"""
import collections
import ctypes
import functools
import sys
import threading

from device_buffer import DeviceBuffer, rt

MiB = 1 << 20

KEPT = {"lru": 1, "bounded": 1, "traceback": 2, "generator": 3, "threadlocal": 4, "default": 5, "classattr": 6,
        "attribute": 7, "thread": 8, "twopaths": 9, "partial": 12, "set": 13, "namedtuple": 14}
ONCE = 10
LIBRARY = 11


@functools.lru_cache(maxsize=None)
def cached_workspace(i):
    return DeviceBuffer(KEPT["lru"] * MiB)  # kept: lru


@functools.lru_cache(maxsize=64)
def bounded_buffer(i):
    return DeviceBuffer(KEPT["bounded"] * MiB)  # kept: bounded


@functools.lru_cache(maxsize=None)
def workspace():
    return DeviceBuffer(ONCE * MiB)  # once: workspace


ERRORS = []


class LyingError(ValueError):
    """Its __traceback__ attribute raises: the raise machinery sets and reads the real one."""

    @property
    def __traceback__(self):
        raise RuntimeError("no traceback for you")


def failing_step():
    tmp = DeviceBuffer(KEPT["traceback"] * MiB)  # kept: traceback
    raise LyingError(tmp.nbytes)


def suspended():
    held = DeviceBuffer(KEPT["generator"] * MiB)  # kept: generator
    yield 1
    yield held


GENERATORS = []
PER_THREAD = threading.local()


class Model:
    cache = {}


def with_default(_memo=[]):
    _memo.append(DeviceBuffer(KEPT["default"] * MiB))  # kept: default


class Tagged:
    pass


PARAMS = [Tagged()]
STOP = threading.Event()
THREADS = []


def worker(box, taken):
    local_buf = box.pop()
    taken.set()
    STOP.wait()
    del local_buf


def allocate(i):
    """The first call allocates directly; each later one directly and through functools.partial."""
    paths = [rt.cudaMalloc] if i == 0 else [rt.cudaMalloc, functools.partial(rt.cudaMalloc)]
    out = []
    for malloc in paths:
        out.append(DeviceBuffer(KEPT["twopaths"] * MiB, malloc))  # kept: twopaths
    return out


TWO_PATHS = []
CALLBACKS = []
SEEN = set()
Pair = collections.namedtuple("Pair", "first second")
PAIRS = []


def use(buffer, x):
    return x
LIB = ctypes.CDLL(sys.argv[2]) if len(sys.argv) > 2 else None
LIBRARY_BUFFERS = []


class LibraryBuffer:
    """A pointer a library returned, kept as the address CuPy's and Numba's arrays describe."""

    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes = ptr, nbytes

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}


def library_buffer(i):
    make = LIB.pyalloc_cublas_workspace if i == 0 else LIB.pyalloc
    make.restype = ctypes.c_void_p
    return LibraryBuffer(make(ctypes.c_size_t(LIBRARY * MiB)), LIBRARY * MiB)  # kept: library


def train(i):
    workspace()
    cached_workspace(i)
    bounded_buffer(i)
    try:
        failing_step()
    except LyingError as e:
        ERRORS.append(e)
    g = suspended()
    next(g)
    GENERATORS.append(g)
    PER_THREAD.__dict__.setdefault("buffers", []).append(DeviceBuffer(KEPT["threadlocal"] * MiB))  # kept: threadlocal
    Model.cache[i] = DeviceBuffer(KEPT["classattr"] * MiB)  # kept: classattr
    with_default()
    PARAMS[0].__dict__.setdefault("ds_extra", []).append(DeviceBuffer(KEPT["attribute"] * MiB))  # kept: attribute
    box, taken = [DeviceBuffer(KEPT["thread"] * MiB)], threading.Event()  # kept: thread
    t = threading.Thread(target=worker, args=(box, taken), daemon=True)
    t.start()
    THREADS.append(t)
    taken.wait()
    TWO_PATHS.extend(allocate(i))
    CALLBACKS.append(functools.partial(use, DeviceBuffer(KEPT["partial"] * MiB)))  # kept: partial
    SEEN.add(DeviceBuffer(KEPT["set"] * MiB))  # kept: set
    PAIRS.append(Pair(DeviceBuffer(KEPT["namedtuple"] * MiB), None))  # kept: namedtuple
    if LIB is not None:
        LIBRARY_BUFFERS.append(library_buffer(i))


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for i in range(calls):
        train(i)
    STOP.set()
    for t in THREADS:
        t.join()


if __name__ == "__main__":
    main()
