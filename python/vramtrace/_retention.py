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
the most seconds one walk may take, and over a run walks take at most about 1% of the wall time.
Nothing is done when no buffer is asked about. When a budget cuts a walk short it says so once
on stderr. Any error inside disables it with one line; the program never sees one.
"""
import bisect
import gc
import itertools
import os
import sys
import threading
import time
import types

from . import _native

# enum vrt_walk_reason, vrt_walk_status, vrt_owner_category, vrt_owner_status (format.h)
PHASE, OOM, SNAPSHOT, EXIT, REQUEST = 1, 2, 3, 4, 5
COMPLETE, TIMED_OUT, FAILED = 0, 1, 2
OTHER, PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION = 0, 1, 2, 3, 4
FOUND, UNREACHABLE = 1, 2

_SHARE = 0.01          # of the wall time, over the run
_START_CREDIT_S = 2.0  # what the first walks may spend before the share has accrued
_MAX_OBJECTS = 20_000_000
_SEP = "\x1f"
_MAX_STEPS = 40        # references followed back from an owner to its root, at most
_MAX_STEP_TEXT = 160

_state = {"on": False, "max_walk_s": 10.0, "start_ns": 0, "spent_ns": 0, "warned": False, "failed": False,
          "oom_walks": 0}
_phases = {}           # phase label -> [depth, calls entered, bound (ns) of the buffers not yet explained]
_lock = threading.Lock()


# ---- configuration and budget --------------------------------------------------------------------

def _parse(value):
    value = (value or "").strip().lower()
    if value in ("", "1", "on", "yes", "true"):
        return True, 10.0
    if value in ("0", "off", "no", "false"):
        return False, 0.0
    try:
        seconds = float(value)
    except ValueError:
        sys.stderr.write("vramtrace: VRAMTRACE_RETAIN=%s is not valid (off, on, or seconds per walk); "
                         "using on\n" % value[:40])
        return True, 10.0
    return seconds > 0, min(seconds, 3600.0)


def install(value):
    """Turns retention walks on as VRAMTRACE_RETAIN says; True when they are on."""
    on, max_walk_s = _parse(value)
    _state.update(on=on and _native.available(), max_walk_s=max_walk_s, start_ns=time.monotonic_ns())
    if _native.available():
        _at_teardown(_teardown)
        _native.record_info("python.library_paths", _SEP.join(library_paths()))
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


def _teardown():
    """Everything live, the last call's survivors among it, then the mark where teardown
    begins: what the interpreter frees after it, the program did not."""
    try:
        with _lock:
            phased = any(st[1] for st in _phases.values())
        if _state["on"] and phased and _credit_ns() > 0:
            walk(EXIT, 0)
    finally:
        _native.record_exiting(1)


def _on_oom(device, requested, allowed, device_free):
    """PyTorch's out-of-memory observer: called with the GIL, before the error is raised, while
    every frame of the failing step is still alive."""
    try:
        import torch

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
        w = _Walk(items, start + budget_ns)
        try:
            status = w.run()
        finally:
            w.release()
        _native.record_walk(reason, status, born_ns, time.monotonic_ns() - start, w.visited)
        if status == TIMED_OUT and not _state["warned"]:
            _state["warned"] = True
            sys.stderr.write("vramtrace: a retention walk stopped after %.1f s (%d objects); some survivors are "
                             "not explained (VRAMTRACE_RETAIN=SECONDS allows more)\n"
                             % ((time.monotonic_ns() - start) / 1e9, w.visited))
        return status
    except Exception as e:
        _fail(e)
        return FAILED
    finally:
        sys.setswitchinterval(switch)
        if gc_was_on:
            gc.enable()
        _state["spent_ns"] += time.monotonic_ns() - start


_IGNORED = object()

# What _Walk._extra adds for a type (kept per type: the test runs once for each).
_PLAIN_TYPE, _TENSOR, _NODE, _OPTIMIZER, _OPTIMIZER_LIKE, _FRAME, _MODULE = 0, 1, 2, 3, 4, 5, 6


class _Walk:
    def __init__(self, items, deadline_ns):
        self.items = sorted(items)  # (addr, size, device, kind, tensor, born_ns)
        self.starts = [it[0] for it in self.items]
        self.deadline = deadline_ns
        self.visited = 0
        self.kinds = {}           # type -> how to find its buffer, or _IGNORED
        self.roles = {}           # type -> _PLAIN_TYPE, _TENSOR, ...
        self.buffers = {}         # buffer address -> [size, device, owner objects]
        self.owner_of = {}        # id(owner object) -> buffer address
        self.parent = {}          # id(object) -> the object that holds it (None: a root)
        self.root_text = {}       # id(root) -> how to name it
        self.seen = set()
        self.untracked_owner_types = set()
        self.home = {}            # id(parameter) -> (module, name); id(grad) -> (its tensor, None)
        self.paths = None         # the C search's answer: id(target) -> [root, ..., target]
        self.everything = []      # gc.get_objects() at the start
        self.unreached = None
        self.targets = {}
        self.grads, self.activations, self.optimizer_state, self.optimizer_grads = set(), set(), set(), set()
        self.torch = sys.modules.get("torch")
        self.status = COMPLETE

    def release(self):
        """Drops every reference the walk took (the program may run with the cyclic GC off)."""
        for v in list(vars(self).values()):
            if isinstance(v, (dict, set, list)):
                v.clear()

    # -- which objects own the buffers, and what they are

    def _item_at(self, ptr):
        i = bisect.bisect_right(self.starts, ptr) - 1
        if i >= 0 and ptr - self.items[i][0] < self.items[i][1]:
            return self.items[i]
        return None

    def _kind(self, t):
        k = self.kinds.get(t)
        if k is None:
            k = _IGNORED
            try:
                torch = self.torch
                if torch is not None and issubclass(t, torch.Tensor):
                    k = _Walk._tensor_buffer
                elif any("__cuda_array_interface__" in vars(c) for c in t.__mro__):
                    k = _Walk._cai_buffer
                elif t.__name__ == "ArrayImpl" and "unsafe_buffer_pointer" in dir(t):
                    k = _Walk._jax_buffer
            except Exception:
                pass
            self.kinds[t] = k
        return k

    def _role(self, t):
        r = self.roles.get(t)
        if r is None:
            try:
                r = self._role_of(t)
            except Exception:  # a type whose own attributes misbehave
                r = _PLAIN_TYPE
            self.roles[t] = r
        return r

    def _role_of(self, t):
        if t is types.FrameType:
            return _FRAME
        torch = self.torch
        if torch is None:
            return _PLAIN_TYPE
        if issubclass(t, torch.nn.Module):
            return _MODULE
        if issubclass(t, torch.Tensor):
            return _TENSOR
        if issubclass(t, torch.optim.Optimizer):
            return _OPTIMIZER
        module = t.__dict__.get("__module__") if isinstance(t.__dict__, types.MappingProxyType) else None
        module = module if isinstance(module, str) else ""
        if module.startswith("torch") and any("next_functions" in vars(c) for c in t.__mro__):
            return _NODE  # autograd graph nodes (generated C++ classes, BackwardCFunction)
        if "Optimizer" in t.__name__:
            return _OPTIMIZER_LIKE
        return _PLAIN_TYPE

    def _tensor_buffer(self, t):
        Tensor = self.torch.Tensor
        ptr = Tensor.data_ptr(t)
        if not ptr or self._item_at(ptr) is None:
            return None
        storage = Tensor.untyped_storage(t)
        return storage.data_ptr(), storage.nbytes()

    def _cai_buffer(self, o):
        cai = o.__cuda_array_interface__
        ptr = int(cai["data"][0])
        n = int(cai["typestr"][2:])
        for dim in cai.get("shape", ()):
            n *= int(dim)
        return ptr, n

    def _jax_buffer(self, o):
        return int(o.unsafe_buffer_pointer()), int(o.nbytes)

    def _note_identity(self, o, role):
        """What a tensor's relatives are: its .grad a gradient; it an activation when it has an
        autograd history; an optimizer's state and master weights; a parameter's module."""
        try:
            if role == _MODULE:
                for name, p in object.__getattribute__(o, "_parameters").items():
                    if p is not None:
                        self.home.setdefault(id(p), (o, name))
            elif role == _TENSOR:
                if o.is_leaf:
                    g = o.grad
                    if g is not None:
                        self.grads.add(id(g))
                        self.home.setdefault(id(g), (o, None))
                elif o.grad_fn is not None:
                    self.activations.add(id(o))
            elif role == _OPTIMIZER:
                for st in o.state.values():
                    for v in (st.values() if isinstance(st, dict) else ()):
                        self.optimizer_state.add(id(v))
                for group in o.param_groups:
                    for p in group.get("params", ()):
                        self.optimizer_state.add(id(p))  # master weights, unless a Parameter
            elif role == _OPTIMIZER_LIKE:
                # An optimizer that is not a torch.optim.Optimizer (DeepSpeed's ZeRO): what it owns
                # is its state, and what it names a gradient is one.
                for name, value in list(object.__getattribute__(o, "__dict__").items()):
                    low = name.lower()
                    into = self.optimizer_grads if "grad" in low or low.startswith("ipg") else self.optimizer_state
                    for v in _tensors_in(value, 3):
                        into.add(id(v))
        except Exception:
            pass

    def find_owners(self):
        """The objects that own a queried buffer, and what tensors', modules' and optimizers'
        relatives are. The heap is filtered by type at C speed first: most objects are none of
        these."""
        self.everything = gc.get_objects()
        types_seen = set(map(type, self.everything))
        wanted = {t for t in types_seen if self._kind(t) is not _IGNORED or self._role(t) not in (_PLAIN_TYPE, _FRAME)}
        for o in itertools.compress(self.everything, map(wanted.__contains__, map(type, self.everything))):
            t = type(o)
            role = self._role(t)
            if role != _PLAIN_TYPE:
                self._note_identity(o, role)
            k = self._kind(t)
            if k is _IGNORED:
                continue
            try:
                found = k(self, o)
            except Exception:
                continue  # a tensor without storage (meta, fake, a wrapper subclass), a bad interface
            if not found or not found[0]:
                continue
            ptr, n = found
            item = self._item_at(ptr)
            if item is None:
                continue
            b = self.buffers.get(ptr)
            if b is None:
                b = self.buffers[ptr] = [n, item[2], []]
            b[2].append(o)
            self.owner_of[id(o)] = ptr
            if not gc.is_tracked(o):
                self.untracked_owner_types.add(t)

    # -- references, with the ones the cyclic GC does not see

    def referents(self, o, extra_only=False):
        refs = [] if extra_only else gc.get_referents(o)
        role = self.roles.get(type(o))
        if role is None:
            role = self._role(type(o))
        if role == _PLAIN_TYPE:
            return refs
        extra = []
        try:
            if role == _FRAME:
                # A running frame's locals are the GC's roots, not the frame's referents.
                extra.extend(o.f_locals.values())
            elif role == _TENSOR:
                # Kept in C++: .grad, grad_fn; and a tensor whose C++ side is shared is not
                # traversed at all, its __dict__ (a Parameter's attributes) included.
                if extra_only or not refs or isinstance(o, self.torch.nn.Parameter):
                    d = object.__getattribute__(o, "__dict__")
                    if d:
                        extra.append(d)
                if o.is_leaf:
                    if o.grad is not None:
                        extra.append(o.grad)
                elif o.grad_fn is not None:
                    extra.append(o.grad_fn)
                if o._backward_hooks:
                    extra.append(o._backward_hooks)
            elif role == _NODE:
                extra.extend(fn for fn, _ in o.next_functions if fn is not None)
                v = getattr(o, "variable", None)
                if v is not None:
                    extra.append(v)
        except Exception:
            pass
        return refs + extra if extra else refs

    # -- the walk

    def roots(self):
        out = []
        me = threading.get_ident()
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            f = frame
            while f is not None and ident == me and f.f_globals.get("__name__", "").startswith("vramtrace"):
                f = f.f_back  # our own frames are not roots
            while f is not None:
                if _module_frame(f):
                    f = f.f_back  # its locals are a module's globals, named through the module
                    continue
                code = f.f_code
                where = "%s (%s:%d)" % (getattr(code, "co_qualname", code.co_name),
                                        os.path.basename(code.co_filename), f.f_lineno or 0)
                out.append((f, where if ident == me else "thread %s: %s" % (names.get(ident, ident), where)))
                f = f.f_back
        main = sys.modules.get("__main__")
        mods = [("__main__", main)] if main is not None else []
        mods += [(n, m) for n, m in list(sys.modules.items()) if m is not main]
        for name, m in mods:
            if isinstance(m, types.ModuleType) and not name.startswith("vramtrace"):
                out.append((m, name))
        out.append((gc.garbage, "gc.garbage"))
        return out

    def run(self):
        torch = self.torch
        quiet = torch._C.DisableTorchFunctionSubclass() if torch is not None else _Nothing()
        with quiet:  # torch's own methods, never a subclass's __torch_function__
            self.find_owners()
            if self.buffers:
                self.reach()
            self.emit()
        return self.status

    def reach(self):
        """Finds a path from a root to every owner (and to the homes that name them): in C when
        the preload can (pyreach.c), else in Python."""
        roots = self.roots()
        for obj, text in roots:
            self.root_text.setdefault(id(obj), text)
        targets = {id(o): o for buf in self.buffers.values() for o in buf[2]}
        frontier = list(targets.values())
        while frontier:  # and the homes that name them: a gradient's parameter, its module
            homes = [h[0] for h in (self.home.get(id(o)) for o in frontier) if h is not None]
            frontier = [h for h in homes if id(h) not in targets]
            targets.update((id(h), h) for h in frontier)
        self.targets = targets
        fast = _native.reach_function()
        if fast is not None:
            keep, everything = [], self.everything
            exclude = [self, self.__dict__, targets, keep, everything, self.buffers, self.owner_of, self.items,
                       self.starts, self.home, self.roles, self.kinds]
            try:
                answer = fast([o for o, _ in roots], targets, self._needs_extra, self._extra_list, keep, everything,
                              exclude, self.deadline, _MAX_OBJECTS)
            except Exception:
                answer = None
            if answer is not None:
                self.paths, self.visited, status, self.unreached = answer
                self.keep = keep
                if status:
                    self.status = TIMED_OUT
                return
        self._reach_in_python(roots)

    def _needs_extra(self, t):
        return self._role(t) in (_FRAME, _TENSOR, _NODE)

    def _extra_list(self, o):
        return self.referents(o, extra_only=True)

    def _reach_in_python(self, roots):
        remaining = set(self.targets)
        seen = self.seen
        seen.update((id(self), id(self.__dict__), id(self.parent), id(self.buffers), id(self.owner_of),
                     id(self.items), id(self.starts), id(remaining), id(seen), id(self.targets)))
        level = []
        for obj, _ in roots:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            self.parent[id(obj)] = None
            level.append(obj)
            remaining.discard(id(obj))
        # The hot loop: an object the cyclic GC does not track holds only such objects, so it
        # can lead to no owner, unless owners themselves are untracked (a C extension's arrays).
        tracked = gc.is_tracked
        untracked_owner_types = self.untracked_owner_types
        parent, targets, referents, seen_add = self.parent, self.targets, self.referents, seen.add
        visited = 0
        while level and remaining:
            nxt = []
            append = nxt.append
            for p in level:
                visited += 1
                if not visited & 1023 and (time.monotonic_ns() > self.deadline or visited > _MAX_OBJECTS):
                    self.status = TIMED_OUT
                    break
                for c in referents(p):
                    if not tracked(c) and type(c) not in untracked_owner_types:
                        continue
                    i = id(c)
                    if i in seen:
                        continue
                    seen_add(i)
                    parent[i] = p
                    if i in targets:
                        remaining.discard(i)
                    append(c)
            if self.status == TIMED_OUT:
                break
            level = nxt
        self.visited = visited

    def _raw_path(self, o):
        """[root, ..., o] as the search found it, or None."""
        if self.paths is not None:
            return self.paths.get(id(o))
        if id(o) not in self.parent:
            return None
        path = [o]
        while len(path) < _MAX_STEPS:
            p = self.parent.get(id(path[-1]))
            if p is None:
                break
            path.append(p)
        path.reverse()
        return path

    def path_of(self, o, depth=0):
        """A parameter is named through its module (model.layers.0.weight) and a gradient through
        its parameter (.grad), when those are reached, not through the shortest path (an
        optimizer's state dict keys): a person asks which part of the model it is."""
        h = self.home.get(id(o))
        if h is not None and depth < 4:
            via = self.path_of(h[0], depth + 1)
            if via is not None and all(x is not o for x in via):
                return via + [o]
        return self._raw_path(o)

    # -- what each buffer is

    def _category(self, objs):
        torch = self.torch
        best = OTHER
        rank = {OTHER: 0, ACTIVATION: 1, OPTIMIZER_STATE: 2, GRADIENT: 3, PARAMETER: 4}
        for o in objs:
            i = id(o)
            if torch is not None and isinstance(o, torch.nn.Parameter):
                c = PARAMETER
            elif i in self.grads or i in self.optimizer_grads:
                c = GRADIENT
            elif i in self.optimizer_state:
                c = OPTIMIZER_STATE
            elif i in self.activations:
                c = ACTIVATION
            else:
                c = OTHER
            if rank[c] > rank[best]:
                best = c
        return best

    # -- naming the chain

    def _chain(self, obj):
        path = self.path_of(obj)
        text = self.root_text.get(id(path[0])) if path else None
        return None if text is None else _describe(path[-_MAX_STEPS:] if len(path) > _MAX_STEPS else path, text)

    def _unreachable_chain(self, obj):
        """Who holds an owner that no root reaches: up through referrers outside the reached
        heap, to an object nothing there holds (native code holds it) or round a cycle."""
        if not hasattr(self, "_rev"):
            self._rev = {}
            unseen = self.unreached if self.paths is not None else \
                [o for o in self.everything if id(o) not in self.seen]
            unseen = unseen or []
            ids = {id(o) for o in unseen} | set(self.owner_of)
            for n, p in enumerate(unseen):
                if not n & 1023 and time.monotonic_ns() > self.deadline:
                    break  # what is mapped so far still names some holders
                for c in self.referents(p):
                    if id(c) in ids and id(c) not in self._rev:
                        self._rev[id(c)] = p
        path, on_path = [obj], {id(obj)}
        head = "a long chain of unreachable objects"
        while len(path) < _MAX_STEPS:
            p = self._rev.get(id(path[-1]))
            if p is None:
                head = "held by native code: " + _type_name(path[-1])
                break
            if id(p) in on_path:
                head = "a reference cycle: " + _type_name(p)
                path.append(p)  # the chain starts and ends the cycle at p
                break
            path.append(p)
            on_path.add(id(p))
        path.reverse()
        return _describe(path, head)

    def emit(self):
        for ptr, (size, device, objs) in self.buffers.items():
            best = next((o for o in objs if self._raw_path(o) is not None), None)
            status, chain = FOUND, None
            try:
                if best is not None:
                    chain = self._chain(best)
                elif self.status == COMPLETE:
                    status = UNREACHABLE
                    chain = self._unreachable_chain(objs[0])
                else:
                    continue  # the budget ran out before it was reached: unknown
            except Exception:
                chain = None
            _native.record_owner(device, ptr, size, self._category(objs), status, chain)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _module_frame(f):
    m = sys.modules.get(f.f_globals.get("__name__", ""))
    return f.f_code.co_name == "<module>" and m is not None and getattr(m, "__dict__", None) is f.f_globals


def _tensors_in(value, depth):
    """Tensors directly in value, or in its lists, tuples, dicts and plain objects' attributes
    (a bucket object holding buffers), depth levels down."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if isinstance(value, torch.Tensor):
        yield value
    elif depth <= 0:
        return
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors_in(v, depth - 1)
    elif type(value) is dict:
        for v in value.values():
            yield from _tensors_in(v, depth - 1)
    elif not isinstance(value, (type, types.ModuleType, types.FunctionType, torch.nn.Module)):
        try:
            attrs = object.__getattribute__(value, "__dict__")
        except Exception:
            return
        for v in list(attrs.values()):
            yield from _tensors_in(v, depth - 1)


# ---- chains as text ------------------------------------------------------------------------------

_PLAIN = (dict, list, tuple, set, frozenset, types.CellType, types.MappingProxyType)


def _is(o, kinds):
    """isinstance by the object's real type: an object's own __class__ may lie or raise."""
    return issubclass(type(o), kinds)


def _type_name(o):
    t = type(o)
    if _is(o, types.FunctionType):
        return "function %s" % o.__qualname__
    if _is(o, types.MethodType):
        return "method %s" % getattr(o.__func__, "__qualname__", "?")
    return t.__qualname__


def _is_module_container(o):
    torch = sys.modules.get("torch")
    return torch is not None and _is(o, torch.nn.Module)


def _significant(o):
    """Objects that end a step of the chain: those a person would name."""
    if _is(o, _PLAIN) or _is(o, (types.ModuleType, types.FrameType)):
        return False
    if type(o).__name__ in ("OrderedDict", "defaultdict", "deque"):
        return False
    return not _is_module_container(o)


def _key_text(k):
    if _is(k, str) and k.isidentifier():
        return "." + k
    if _is(k, (str, int)):
        return "[%r]" % (k if not _is(k, str) else k[:40])
    return "[%s]" % _type_name(k)


def _edge(grand, parent, child):
    """How parent refers to child (grand refers to parent, or None)."""
    if _is(parent, types.ModuleType):
        return ""  # its __dict__
    if _is(parent, types.FrameType):
        try:
            for name, v in parent.f_locals.items():
                if v is child:
                    return " local %s" % name
        except Exception:
            pass
        if child is parent.f_back:
            return " caller"
        return " (frame)"
    if _is(grand, types.FunctionType) and (parent is grand.__defaults__ or parent is grand.__kwdefaults__):
        keys = list(parent) if _is(parent, dict) else range(len(parent))
        for k in keys:
            if parent[k] is child:
                return "default argument %s" % k
        return "default argument"
    if _is(parent, dict) or type(parent).__name__ in ("OrderedDict", "defaultdict"):
        for k, v in parent.items():  # the heap holds still while the walk runs
            if v is child:
                return _key_text(k)
            if k is child:
                return " key of %s" % _type_name(parent)
        return "[?]"
    if _is(parent, types.MappingProxyType):
        return ""
    if _is(parent, tuple) and _is(grand, types.FunctionType) and parent is grand.__closure__:
        try:
            return "closure variable %s" % grand.__code__.co_freevars[parent.index(child)]
        except (ValueError, IndexError):
            return "closure variable"
    if _is(parent, (list, tuple)) or type(parent).__name__ == "deque":
        for i, v in enumerate(parent):
            if v is child:
                return "[%d]" % i
        return "[?]"
    if _is(parent, types.CellType):
        return ""
    if _is(parent, types.FunctionType):
        if child is parent.__closure__ or child is parent.__defaults__ or child is parent.__kwdefaults__:
            return ""  # named with the next hop
        if child is parent.__globals__:
            return ".__globals__"
        if child is parent.__defaults__:
            return ".__defaults__"
    if _is(parent, types.MethodType):
        return ".__self__" if child is parent.__self__ else ".__func__"
    try:
        attrs = object.__getattribute__(parent, "__dict__")
        if child is attrs:
            return ""
        for k, v in attrs.items():  # values kept inline (3.11+) are the object's own referents
            if v is child:
                return _key_text(k)
    except Exception:
        pass
    torch = sys.modules.get("torch")
    if torch is not None and _is(parent, torch.nn.Module):
        for part in ("_parameters", "_buffers", "_modules"):
            try:
                for k, v in object.__getattribute__(parent, part).items():
                    if v is child:
                        return "." + str(k)
            except Exception:
                pass
    if torch is not None and _is(parent, torch.Tensor):
        try:
            if child is parent.grad:
                return ".grad"
            if child is parent.grad_fn:
                return ".grad_fn"
        except Exception:
            pass
        return "._backward_hooks"
    try:
        for i, (fn, _) in enumerate(parent.next_functions):
            if fn is child:
                return ".next_functions[%d]" % i
        if getattr(parent, "variable", None) is child:
            return ".variable"
        if _is(child, dict):
            return " hooks"  # the hook dicts an autograd node's C++ side holds
    except Exception:
        pass
    for klass in type(parent).__mro__:
        for slot in klass.__dict__.get("__slots__", ()):
            try:
                if getattr(parent, slot) is child:
                    return "." + slot
            except Exception:
                pass
    return " -> "


_MODULE_PARTS = None


def _tidy(text):
    """model._modules['layers']._modules['0'].weight -> model.layers.0.weight"""
    global _MODULE_PARTS
    if _MODULE_PARTS is None:
        import re

        _MODULE_PARTS = re.compile(r"\._(?:modules|parameters|buffers)(?:\.([A-Za-z_]\w*)|\['([^']*)'\])")
    return _MODULE_PARTS.sub(lambda m: "." + (m.group(1) or m.group(2)), text)


def _describe(path, text):
    """The chain's steps, U+001F between them: the root (text names it), then one step per
    object a person would name, the owner last; hops through containers fold into the step
    (__main__.model.layers.0.weight)."""
    steps = []
    frame_root = _is(path[0], types.FrameType)
    for k in range(1, len(path)):
        grand = path[k - 2] if k >= 2 else None
        e = _edge(grand, path[k - 1], path[k])
        if frame_root and k == 1 and e.startswith(" local "):
            text = "%s: %s" % (text, e[7:])
        else:
            text += e
        if _significant(path[k]) or k == len(path) - 1:
            steps.append("%s (%s)" % (_tidy(text).strip()[:_MAX_STEP_TEXT], _type_name(path[k])))
            text = ""
    if len(path) == 1:
        steps.append("%s (%s)" % (text[:_MAX_STEP_TEXT], _type_name(path[0])))
    return _SEP.join(steps)
