"""Why memory survives: retention walks, run inside the traced process.

At the moments that matter -- a phase's next call begins while memory born in its earlier calls
is live, PyTorch runs out of memory, the interpreter is about to finalize -- this module asks the
preload which buffers are live (device and pinned host memory), finds the Python objects that own
them (torch tensors and their storages, objects exposing ``__cuda_array_interface__``, JAX arrays)
and, for each owner, the shortest chain of references from a root (a module's globals, a frame of
any thread, ``gc.garbage``). It also says what each owner is (a parameter, a gradient, optimizer
state, an activation). The findings go into the trace as OWNER records closed by a WALK record
(docs/trace-format.md, "Retention"); `vramtrace leaks` and `vramtrace oom` read them.

Safe and bounded: it allocates no device memory, calls no method an object defines for itself
(no ``__eq__``, no ``__getattr__``: identity and ``gc.get_referents`` only, plus a few attributes
of torch's own types), holds the heap still while it walks (the cyclic GC off, other threads
held back), and spends at most its budget: ``VRAMTRACE_RETAIN=off`` turns it off, a number sets
the most seconds each walk may take (and lifts the share below: the user asked for it); by default
a walk takes at most 10 s and over a run walks take at most about 1% of the wall time.
Nothing is done when no buffer is asked about. When a budget cuts a walk short it says so once
on stderr. Any error inside disables it with one line; the program never sees one.
"""
import gc
import os
import sys
import threading
import time

from . import _native
from ._chains import SEP
from ._owners import COMPLETE, FAILED, TIMED_OUT, Walk

# enum vrt_walk_reason (format.h)
PHASE, OOM, SNAPSHOT, EXIT, REQUEST = 1, 2, 3, 4, 5

_SHARE = 0.01          # of the wall time, over the run
_START_CREDIT_S = 2.0  # what the first walks may spend before the share has accrued

_state = {"on": False, "max_walk_s": 10.0, "shared": True, "start_ns": 0, "spent_ns": 0, "warned": False, "failed": False,
          "oom_walks": 0}
_phases: dict = {}     # phase label -> [depth, calls entered, bound (ns) of the buffers not yet explained]
_lock = threading.Lock()


# ---- configuration and budget --------------------------------------------------------------------

def _parse(value):
    """(on, the most seconds one walk may take, whether walks share 1% of the wall time)."""
    value = (value or "").strip().lower()
    if value in ("", "1", "on", "yes", "true"):
        return True, 10.0, True
    if value in ("0", "off", "no", "false"):
        return False, 0.0, True
    try:
        seconds = float(value)
    except ValueError:
        sys.stderr.write("vramtrace: VRAMTRACE_RETAIN=%s is not valid (off, on, or seconds per walk); "
                         "using on\n" % _printable(value[:40]))
        return True, 10.0, True
    if not seconds > 0:  # nan too
        return False, 0.0, True
    return True, min(seconds, 3600.0), False


def _printable(text):
    return "".join(c if c.isprintable() else "\\x%02x" % (ord(c) & 0xff) for c in text)


def install(value):
    """Turns retention walks on as VRAMTRACE_RETAIN says; True when they are on."""
    on, max_walk_s, shared = _parse(value)
    _state.update(on=on and _native.available(), max_walk_s=max_walk_s, shared=shared, start_ns=time.monotonic_ns())
    if _native.available():
        _at_teardown(_teardown)
        _native.record_info("python.library_paths", SEP.join(library_paths()))
    if _state["on"]:
        _watch_torch()
    return _state["on"]


def library_paths():
    """Where this interpreter's libraries live, for the analyzer to tell the user's code from
    them: the standard library, and every sys.path entry holding installed distributions
    (*.dist-info, *.egg-info): site-packages, a --target or --user install, a venv."""
    import sysconfig

    out = []
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p and p not in out:
            out.append(p)
    for p in sys.path:
        try:
            if p and p not in out and any(n.endswith((".dist-info", ".egg-info")) for n in os.listdir(p)):
                out.append(p)
        except OSError:
            pass
    return [os.path.abspath(p) for p in out]


def _at_teardown(fn):
    """fn runs when the interpreter begins to finalize: threading's exit hooks run before any
    atexit handler (and before non-daemon threads are joined)."""
    try:
        threading._register_atexit(fn)
    except Exception:  # an interpreter without it, or one already shutting down
        import atexit

        atexit.register(fn)


def install_from_environment():
    return install(os.environ.get("VRAMTRACE_RETAIN"))


def _credit_ns():
    """What walks may still spend: unbounded over the run when the user set the seconds per walk."""
    if not _state["shared"]:
        return 1 << 62
    elapsed = time.monotonic_ns() - _state["start_ns"]
    return int(_START_CREDIT_S * 1e9 + _SHARE * elapsed) - _state["spent_ns"]


def _fail(e):
    if not _state["failed"]:
        _state["failed"] = True
        sys.stderr.write("vramtrace: retention walks disabled after an error: %s: %s\n"
                         % (type(e).__name__, str(e)[:200]))
    _state["on"] = False


# ---- the moments that matter -------------------------------------------------------------------

def phase_entry(label):
    """Before a phase call begins: at the start of an outermost call after the first, explains
    what earlier calls left live (if the budget allows; else a later call does)."""
    if not _state["on"]:
        return
    now = time.monotonic_ns()
    with _lock:
        st = _phases.setdefault(label, [0, 0, 0])
        st[0] += 1
        if st[0] != 1:
            return
        st[1] += 1
        if st[1] == 1:
            st[2] = now
            return
        bound = st[2]
    if _credit_ns() <= 0:
        _skipped(PHASE, bound)
        return
    status = walk(PHASE, bound)
    if status == COMPLETE:
        with _lock:
            st[2] = now


def phase_exit(label):
    if not _state["on"]:
        return
    with _lock:
        st = _phases.get(label)
        if st and st[0] > 0:
            st[0] -= 1


def walk_for_request(reason):
    """A walk asked for from outside the program (`vramtrace snapshot PID`), run at a safe
    point of the main thread (preload/pyreach.c)."""
    try:
        walk(reason, 0, floor_s=5.0)
    except Exception as e:
        _fail(e)


def _teardown():
    """Everything live, the last call's survivors among it, then the mark where teardown
    begins: what the interpreter frees after it, the program did not."""
    try:
        with _lock:
            phased = any(st[1] for st in _phases.values())
        if _state["on"] and phased:
            if _credit_ns() > 0:
                walk(EXIT, 0)
            else:
                _skipped(EXIT, 0)
    finally:
        _native.record_exiting(1)


def _on_oom(device, requested, allowed, device_free):
    """PyTorch's out-of-memory observer: called with the GIL, before the error is raised, while
    every frame of the failing step is still alive."""
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]

        total = torch.cuda.get_device_properties(device).total_memory
        reserved = torch.cuda.memory_reserved(device)
        allocated = torch.cuda.memory_allocated(device)
        _native.record_oom_limits(device, requested, allowed, device_free, reserved, allocated, allowed < total)
        if _state["on"]:
            first = _state["oom_walks"] == 0
            _state["oom_walks"] += 1
            if first or _credit_ns() > 0:
                walk(OOM, 0, floor_s=5.0 if first else 0.0)
    except Exception as e:  # an observer that raises would throw through PyTorch's allocator
        _fail(e)


def _watch_torch():
    """Attaches the OOM observer once torch.cuda is imported and CUDA is initialized (PyTorch
    refuses observers before that), without importing torch ourselves."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        _torch_cuda_ready(torch.cuda)
        return
    sys.meta_path.insert(0, _TorchCudaFinder())


class _TorchCudaFinder:
    """Finds nothing itself; wraps the loader of torch.cuda so that we hear when it is ready."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _NotifyingLoader(spec.loader)
        return spec


class _NotifyingLoader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _torch_cuda_ready(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _torch_cuda_ready(cuda):
    def attach():
        try:
            import torch

            torch._C._cuda_attach_out_of_memory_observer(_on_oom)
        except Exception:
            pass  # another backend (cudaMallocAsync refuses observers), or an older PyTorch

    try:
        cuda._lazy_call(attach)  # runs now if CUDA is initialized, else at its initialization
    except Exception:
        pass


# ---- one walk ------------------------------------------------------------------------------------

def _cut_short(what):
    """The one stderr line of a run whose budget left survivors unexplained."""
    if _state["warned"]:
        return
    _state["warned"] = True
    sys.stderr.write("vramtrace: %s; some survivors are not explained (%s)\n" % (
        what, "walks may take 1% of the run; `vramtrace run --retain SECONDS` lets each walk take that long"
        if _state["shared"] else "--retain SECONDS allows more"))


def _skipped(reason, born_ns):
    """A walk the budget did not allow: recorded as cut short before it began, so that the
    reports say "timed_out" for what it would have explained, not "off"."""
    try:
        _native.record_walk(reason, TIMED_OUT, born_ns, 0, 0)
        _cut_short("retention walks used their share of the run")
    except Exception as e:
        _fail(e)


def walk(reason, born_ns, floor_s=0.0):
    """Explains the buffers live now and born at or after born_ns; returns the walk's status,
    or None when nothing was asked about."""
    if not _state["on"]:
        return None
    start = time.monotonic_ns()
    gc_was_on = gc.isenabled()
    switch = sys.getswitchinterval()
    try:
        gc.disable()
        sys.setswitchinterval(1000.0)  # other threads wait: the heap holds still
        items = _native.live_items(born_ns)
        if not items:
            return None
        budget_ns = int(max(min(_state["max_walk_s"] * 1e9, _credit_ns()), floor_s * 1e9))
        w = Walk(items, start + budget_ns)
        w.gc_off = not gc_was_on
        try:
            status = w.run()
        finally:
            w.release()
        _native.record_walk(reason, status, born_ns, time.monotonic_ns() - start, w.visited)
        if status == TIMED_OUT:
            _cut_short("a retention walk stopped after %.1f s (%d objects)" % ((time.monotonic_ns() - start) / 1e9,
                                                                            w.visited))
        return status
    except Exception as e:
        _fail(e)
        return FAILED
    finally:
        sys.setswitchinterval(switch)
        if gc_was_on:
            gc.enable()
        _state["spent_ns"] += time.monotonic_ns() - start
