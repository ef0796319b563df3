"""The preload's C API, found in the running process; every call is a no-op without it."""
import ctypes

_lib = None
_found = False


def _load():
    global _lib, _found
    if not _found:
        _found = True
        try:
            # PyDLL keeps the GIL held, so phase entries carry the caller's Python stack.
            lib = ctypes.PyDLL(None)
            lib.vramtrace_mark
            _lib = lib
        except (AttributeError, OSError):
            _lib = None
        if _lib is not None:
            for name in ("vramtrace_mark", "vramtrace_phase_enter", "vramtrace_phase_exit"):
                getattr(_lib, name).argtypes = [ctypes.c_char_p]
                getattr(_lib, name).restype = None
            _lib.vramtrace_enabled.restype = ctypes.c_int
            _lib.vramtrace_enabled.argtypes = []
    return _lib


def available():
    return _load() is not None


def _bytes(s):
    return s.encode("utf-8", "replace") if isinstance(s, str) else bytes(s)


def mark(label):
    lib = _load()
    if lib is not None:
        lib.vramtrace_mark(_bytes(label))


def phase_enter(name):
    lib = _load()
    if lib is not None:
        lib.vramtrace_phase_enter(_bytes(name))


def phase_exit(name):
    lib = _load()
    if lib is not None:
        lib.vramtrace_phase_exit(_bytes(name))


def enabled():
    lib = _load()
    return lib.vramtrace_enabled() if lib is not None else 0


def snapshot(path):
    if _load() is None:
        return -1
    fn = ctypes.CDLL(None).vramtrace_snapshot  # CDLL: releases the GIL while the collector writes
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn(_bytes(path))


# ---- retention walks (_retention.py) ------------------------------------------------------

class LiveItem(ctypes.Structure):
    """struct vramtrace_live_item (include/vramtrace/vramtrace.h)."""
    _fields_ = [("addr", ctypes.c_ulonglong), ("size", ctypes.c_ulonglong), ("born_ns", ctypes.c_ulonglong),
                ("device", ctypes.c_short), ("kind", ctypes.c_ubyte), ("tensor", ctypes.c_ubyte),
                ("pad", ctypes.c_uint)]


_retention_api = None


def _retention():
    """The preload's retention entry points, or None (not traced, or an older preload)."""
    global _retention_api
    if _retention_api is None:
        lib = _load()
        try:
            api = (lib.vramtrace_live_query, lib.vramtrace_record_owner, lib.vramtrace_record_walk,
                   lib.vramtrace_record_oom_limits, lib.vramtrace_record_exiting) if lib is not None else None
        except AttributeError:
            api = None
        if api:
            query, owner, walk, limits, exiting = api
            exiting.argtypes = [ctypes.c_int]
            exiting.restype = None
            query.argtypes = [ctypes.c_ulonglong, ctypes.POINTER(LiveItem), ctypes.c_ulong]
            query.restype = ctypes.c_long
            owner.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int,
                              ctypes.c_char_p]
            owner.restype = None
            walk.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong]
            walk.restype = None
            limits.argtypes = [ctypes.c_int] + [ctypes.c_ulonglong] * 5 + [ctypes.c_int]
            limits.restype = None
        _retention_api = api or False
    return _retention_api or None


_array_types = {}


def _live_item_array(cap):
    """LiveItem * cap, kept: a ctypes type is its own cycle, which a program with the cyclic GC
    off would keep as garbage once a walk dropped it."""
    t = _array_types.get(cap)
    if t is None:
        if len(_array_types) > 16:
            _array_types.clear()
        t = _array_types[cap] = LiveItem * cap
    return t


def live_items(born_ns):
    """The live buffers born at or after born_ns (CLOCK_MONOTONIC), as (addr, size, device, kind,
    tensor, born_ns) tuples; None when the preload cannot say."""
    api = _retention()
    if api is None or enabled() != 2:
        return None
    cap = 1024
    while True:
        buf = _live_item_array(cap)()
        n = api[0](born_ns, buf, cap)
        if n < 0:
            return None
        if n <= cap:
            return [(it.addr, it.size, it.device, it.kind, it.tensor, it.born_ns) for it in buf[:n]]
        cap = n + n // 4 + 16  # more were born meanwhile: ask again with room to spare


def record_owner(device, addr, size, category, status, chain):
    api = _retention()
    if api is not None:
        api[1](device, addr, size, category, status, _bytes(chain) if chain else None)


def record_walk(reason, status, born_ns, duration_ns, objects):
    api = _retention()
    if api is not None:
        api[2](reason, status, born_ns, duration_ns, objects)


def record_oom_limits(device, requested, allowed, device_free, reserved, allocated, capped):
    api = _retention()
    if api is not None:
        api[3](device, requested, allowed, device_free, reserved, allocated, 1 if capped else 0)


def record_exiting(stage):
    api = _retention()
    if api is not None:
        api[4](stage)


_reach = None


def reach_function():
    """The preload's C search for retention walks (pyreach.c), or None."""
    global _reach
    if _reach is None:
        lib = _load()
        fn = getattr(lib, "vramtrace_reach", None) if lib is not None else None
        if fn is not None:
            fn.argtypes = [ctypes.py_object] * 7 + [ctypes.c_ulonglong, ctypes.c_ulonglong]
            fn.restype = ctypes.py_object
        _reach = fn or False
    return _reach or None


def record_info(key, value):
    lib = _load()
    fn = getattr(lib, "vramtrace_record_info", None) if lib is not None else None
    if fn is not None:
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        fn.restype = None
        fn(_bytes(key), _bytes(value))
