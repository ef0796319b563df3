"""Calls and returns of chosen Python functions become vramtrace phases, with no edit to the
program: `vramtrace run --phase train` (or VRAMTRACE_PHASE=train,mod:Class.fit).

A target is a bare name (matches any function whose qualified or plain name is that) or
module:qualname. On 3.12+ this uses sys.monitoring: every other code object is disabled after its
first call, so the steady-state cost outside the targets is nil. Before 3.12 it is a profile
hook, which costs every Python call something (see docs/python.md).
"""
import sys
import threading
import types

from . import _native, _retention

_targets: list = []  # (module or None, name)
_labels: dict = {}  # code object -> phase label, or False for "not a target"


def parse(spec):
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if item.startswith("nvtx:"):
            continue  # NVTX ranges are phases already (preload)
        module, _, name = item.rpartition(":")
        out.append((module or None, name))
    return out


def _method_qualname(code, frame):
    """Class.method for a method's code called in frame, from its first argument: the class in
    its MRO whose own dict holds this code's function (CPython 3.9/3.10 code objects have no
    co_qualname). None when it is not found. Reads class dicts only: no attribute lookup, no
    user code runs."""
    if frame is None or not code.co_argcount:
        return None
    try:
        first = frame.f_locals.get(code.co_varnames[0])
        mro, own = type.__dict__["__mro__"].__get__, type.__dict__["__dict__"].__get__
        for cls in mro(first) if issubclass(type(first), type) else mro(type(first)):
            for value in own(cls).values():
                if type(value) in (classmethod, staticmethod):  # exact types: never a __class__ property
                    value = value.__func__
                if type(value) is types.FunctionType and value.__code__ is code:
                    return type.__dict__["__qualname__"].__get__(cls) + "." + code.co_name
    except Exception:  # a frame or class that does not read as expected: no qualified name
        pass
    return None


def _label_for(code, module_name, frame=None):
    qual = getattr(code, "co_qualname", None)
    if qual is None:  # 3.9, 3.10
        dotted = any("." in name and name.rsplit(".", 1)[1] == code.co_name for _, name in _targets)
        qual = (_method_qualname(code, frame) if dotted else None) or code.co_name
    for module, name in _targets:
        if name in (qual, code.co_name) and (module is None or module == module_name):
            return name if module is None else module + ":" + name
    return False


def _module_of_caller(depth):
    try:
        return sys._getframe(depth).f_globals.get("__name__")
    except ValueError:
        return None


def _enter(label):
    _retention.phase_entry(label)  # what earlier calls left live, before this one begins
    _native.phase_enter(label)


def _exit(label):
    _native.phase_exit(label)
    _retention.phase_exit(label)


def _install_monitoring():
    mon = sys.monitoring
    E = mon.events
    tool = next((t for t in (4, 3, 5) if mon.get_tool(t) is None), None)
    if tool is None:
        raise RuntimeError("no free sys.monitoring tool id")
    mon.use_tool_id(tool, "vramtrace")
    local = E.PY_RETURN | E.PY_YIELD | E.PY_RESUME

    labels = _labels  # a closure's own: at teardown the module's globals are None

    def on_start(code, offset):
        try:
            label = labels.get(code)
            if label is None:
                label = labels[code] = _label_for(code, _module_of_caller(1))
                if label:
                    mon.set_local_events(tool, code, local)
            if not label:
                return mon.DISABLE
            _enter(label)
        except Exception:  # never into the program
            pass

    def on_end(code, offset, value):
        try:
            label = labels.get(code)
            if label:
                _exit(label)
        except Exception:
            pass

    def on_resume(code, offset):
        try:
            label = labels.get(code)
            if label:
                _enter(label)
        except Exception:
            pass

    def on_unwind(code, offset, exc):
        try:
            label = labels.get(code)  # global event: stay O(1), never return DISABLE
            if label:
                _exit(label)
        except Exception:
            pass

    mon.register_callback(tool, E.PY_START, on_start)
    mon.register_callback(tool, E.PY_RETURN, on_end)
    mon.register_callback(tool, E.PY_YIELD, on_end)
    mon.register_callback(tool, E.PY_RESUME, on_resume)
    mon.register_callback(tool, E.PY_UNWIND, on_unwind)
    mon.set_events(tool, E.PY_START | E.PY_UNWIND)


def _profile(frame, event, arg):
    if event != "call" and event != "return":
        return
    try:
        code = frame.f_code
        label = _labels.get(code)
        if label is None:
            label = _labels[code] = _label_for(code, frame.f_globals.get("__name__"), frame)
        if label:
            (_enter if event == "call" else _exit)(label)
    except Exception:  # never into the program; at teardown this module's globals are None
        pass


def install(spec):
    _targets[:] = parse(spec)
    if not _targets or not _native.available():
        return False
    if sys.version_info >= (3, 12):
        _install_monitoring()
    else:
        threading.setprofile(_profile)
        sys.setprofile(_profile)
        import atexit

        atexit.register(_say_if_replaced)
    return True


def _say_if_replaced():
    """Before 3.12 a profile function is one per thread: a program that sets its own (sys.setprofile,
    cProfile, torch.profiler with stacks) ends the phases without a word. Said once, at exit."""
    try:
        if sys.getprofile() is not _profile:
            sys.stderr.write("vramtrace: --phase stopped following calls on the main thread: the program set a "
                             "profile function of its own (sys.setprofile, cProfile, a profiler's Python stacks) "
                             "in place of vramtrace's; on Python 3.12+ they coexist\n")
    except Exception:
        pass


def install_from_environment():
    import os

    return install(os.environ.get("VRAMTRACE_PHASE", ""))
