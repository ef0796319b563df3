"""A train() whose buffers survive in four ways, on any CUDA runtime (the test double included).

Each call allocates, through ctypes, buffers that say what they are the way CuPy and Numba
arrays do (__cuda_array_interface__), and keeps:
  - one in a module-level list (REGISTRY),
  - one in the closure of a hook function kept in a module-level hooks dict (HOOKS),
  - one in a reference cycle that the (disabled) cyclic GC never collects,
  - one raw allocation that no Python object owns (its address kept as a plain int),
and frees a temporary before it returns. Prints what it kept, for the test to compare.

    retain_buffers.py [CALLS [MODE [SNAPSHOT]]]
MODE "clean": each call frees everything it allocated. "deep": the registry's buffers sit 60
containers down, so that a walk has to visit the whole heap to reach them. "hostile": the
registry's buffers sit among objects that misbehave when looked at (attribute access, equality,
hashing, iteration, length and repr raise; a weakref proxy to a dead object; a class whose
__class__ lies). "spent": the walks' share of the run is used up before the first call (the
walks at the calls' entries are skipped); "spent-snapshot": the same, then the program asks for
a snapshot after its last call, whose walk explains everything live.
"""
import ctypes
import gc
import sys

from device_buffer import DeviceBuffer, rt

MiB = 1 << 20


class Cycle:
    def __init__(self, nbytes):
        self.me = self
        self.buf = DeviceBuffer(nbytes)


REGISTRY = []
HOOKS = {}
RAW = []


def make_hook(state):
    def hook():
        return state
    return hook


def keep_raw(nbytes):
    ptr = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    RAW.append(ptr.value)


class Hostile:
    """Everything a walk might call on it raises."""

    def __getattr__(self, name):
        raise RuntimeError("no attribute for you: %s" % name)

    def __getattribute__(self, name):
        if name in ("__class__", "__dict__"):
            return object.__getattribute__(self, name)
        raise RuntimeError("hostile getattribute")

    def __eq__(self, other):
        raise RuntimeError("hostile eq")

    def __hash__(self):
        raise RuntimeError("hostile hash")

    def __repr__(self):
        raise RuntimeError("hostile repr")

    def __len__(self):
        raise RuntimeError("hostile len")

    def __iter__(self):
        raise RuntimeError("hostile iter")


class Liar:
    @property
    def __class__(self):
        raise RuntimeError("hostile class")


class Dead:
    pass


def hostile_neighbours(buf):
    import weakref

    d = Dead()
    proxy = weakref.proxy(d)
    del d
    h = Hostile()
    object.__setattr__(h, "buf", buf)  # the buffer is reachable only through the hostile object
    return [Liar(), proxy, h, {Liar(): 1} if False else {"k": Liar()}]


def nest(value, depth):
    for _ in range(depth):
        value = [value]
    return value


def train(i, mode):
    if mode == "clean":
        tmp = DeviceBuffer(5 * MiB)
        del tmp
        return
    buf = DeviceBuffer(4 * MiB)                       # kept: REGISTRY
    if mode == "deep":
        REGISTRY.append(nest(buf, 60))
    elif mode == "hostile":
        REGISTRY.append(hostile_neighbours(buf))
    else:
        REGISTRY.append(buf)
    HOOKS[i] = make_hook(DeviceBuffer(2 * MiB))       # kept: hook closure
    Cycle(3 * MiB)                                    # kept: a cycle nobody collects
    keep_raw(1 * MiB)                                 # kept: no Python owner
    tmp = DeviceBuffer(5 * MiB)                       # freed before the next call
    del tmp


def main():
    gc.disable()
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mode = sys.argv[2] if len(sys.argv) > 2 else "all"
    if mode.startswith("spent"):
        from vramtrace import _retention

        _retention._state["spent_ns"] = 1 << 62  # as if earlier walks had used the run's share
    for i in range(calls):
        train(i, mode)
    if mode == "spent-snapshot":
        import vramtrace

        vramtrace.snapshot(sys.argv[3])  # the snapshot file; its walk goes into the trace too
    print("kept per call: registry %d, hook %d, cycle %d, raw %d" % (4 * MiB, 2 * MiB, 3 * MiB, 1 * MiB))


if __name__ == "__main__":
    main()
