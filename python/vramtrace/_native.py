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
