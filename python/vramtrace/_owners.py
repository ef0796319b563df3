"""One retention walk's work (python/vramtrace/_retention.py decides when): which Python objects
own the live buffers asked about, what each is (a parameter, a gradient, optimizer state, an
activation), and the shortest chain of references from a root to it. The search is the
preload's C (preload/pyreach.c) when it can, else Python's gc.get_referents. The caller holds the
heap still (the cyclic GC off, other threads held back) for the walk's whole life.
"""
import bisect
import contextvars
import ctypes
import gc
import itertools
import os
import signal
import sys
import threading
import time
import types

from . import _chains, _native
from ._chains import _CONTEXT, _is, _significant, _where, describe, type_name, view_note

# enum vrt_walk_status, vrt_owner_category, vrt_owner_status (format.h)
COMPLETE, TIMED_OUT, FAILED = 0, 1, 2
OTHER, PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION = 0, 1, 2, 3, 4
FOUND, UNREACHABLE = 1, 2

MAX_OBJECTS = 10_000_000  # the C search holds 32 bytes an object: at most about 320 MB
MAX_STEPS = 40         # references followed back from an owner to its root, at most

_IGNORED = object()

# What Walk._extra adds for a type (kept per type: the test runs once for each).
_PLAIN_TYPE, _TENSOR, _NODE, _OPTIMIZER, _OPTIMIZER_LIKE, _FRAME, _MODULE = 0, 1, 2, 3, 4, 5, 6


_LOCALS_COPIED = sys.version_info < (3, 13)  # from 3.13 f_locals is a view (PEP 667)
_CO_OPTIMIZED = 0x0001  # a function's code: its frame's f_locals is a copy, not a namespace


def _forget_locals(frames):
    """Before 3.13 reading a function frame's f_locals leaves a dict of the values its locals
    had then on the frame until it ends or is read again: a loop's frame would keep what its
    local named when the walk ran after the loop rebinds it. Empties those dicts where nothing
    can be between reading and writing them back: not a frame running on another thread, nor
    (before 3.12) the one whose profile event runs this walk (its trampoline writes the dict
    back into the frame's locals when the event returns); a later read fills the dict anew."""
    if not _LOCALS_COPIED or not frames:
        return
    me = threading.get_ident()
    busy = set()
    for ident, stack in _thread_stacks():
        if ident != me:
            busy.update(id(f) for f in stack)
        elif stack and sys.version_info < (3, 12):
            busy.add(id(stack[0]))
    try:
        for f in frames:
            if id(f) not in busy and f.f_code.co_flags & _CO_OPTIMIZED:
                f.f_locals.clear()
    except Exception:  # a frame that does not read as expected keeps its copy
        pass


def _start_cycle_at_object(path):
    """A cycle (path[0] again further on) that starts at an object's attribute dict (before 3.11
    an object's attributes are a dict of its own) starts at the object instead: named as
    Node.other, as on later versions."""
    try:
        again = next(i for i in range(1, len(path)) if path[i] is path[0])
        owner = path[again - 1]
        if again >= 2 and not _significant(path[0]) and _significant(owner) and \
                object.__getattribute__(owner, "__dict__") is path[0]:
            path.insert(0, owner)
    except Exception:  # no __dict__, or a cycle that does not close
        pass


def _exceptions_being_handled():
    """The exception each thread's code is handling (in an except block, not bound to a name:
    a thread's state holds it, with its traceback's frames and their locals, until the block
    ends). This thread's, and from 3.12 the others'."""
    out = []
    try:
        me = threading.get_ident()
        names = {t.ident: t.name for t in threading.enumerate()}
        handled = {me: sys.exc_info()[1]}
        current = getattr(sys, "_current_exceptions", None)
        if current is not None and sys.version_info >= (3, 12):
            handled.update((ident, e) for ident, e in current().items() if ident != me)
        for ident, e in handled.items():
            if not _is(e, BaseException):
                continue
            text = "exception being handled"
            tb = BaseException.__dict__["__traceback__"].__get__(e, BaseException)
            if tb is not None:  # its first entry is the frame that caught it, which runs the handler
                text += " in " + _where(tb.tb_frame)
            out.append((e, text + ("" if ident == me else " (thread %s)" % names.get(ident, ident))))
    except Exception:
        pass
    return out


def _signal_handlers():
    """The Python functions set as signal handlers: the signal module holds them in C."""
    out = []
    try:
        signals = signal.valid_signals()
    except Exception:
        return out
    for sig in signals:
        try:
            handler = signal.getsignal(sig)
            if handler is not None and not _is(handler, (int, types.BuiltinFunctionType)):
                try:
                    name = signal.Signals(sig).name
                except ValueError:  # a real-time signal past SIGRTMIN
                    name = "signal %d" % sig
                out.append((handler, "signal handler for %s" % name))
        except Exception:  # a signal this interpreter cannot ask about
            pass
    return out


def _thread_stacks():
    """Each thread's frames, innermost first, as (thread id, frames); the current thread's
    without vramtrace's own on top. The answer of sys._current_frames() holds this function's
    own frame: kept past the return, it would make a cycle through every frame below it, the
    traced program's included, which a program with the cyclic GC off (or until its next full
    collection) would keep with all their locals."""
    me = threading.get_ident()
    out = []
    current = sys._current_frames()
    try:
        for ident, f in current.items():
            while f is not None and ident == me and f.f_globals.get("__name__", "").startswith("vramtrace"):
                f = f.f_back  # our own frames
            stack = []
            while f is not None:
                stack.append(f)
                f = f.f_back
            out.append((ident, stack))
    finally:
        current = f = None
    return out


def _thread_frames():
    """Every thread's frames (innermost first) but ours and module-level ones, with their text."""
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = []
    for ident, stack in _thread_stacks():
        for f in stack:
            if _module_frame(f):
                continue  # a module's locals are its globals, named through the module
            code = f.f_code
            where = "%s (%s:%d)" % (getattr(code, "co_qualname", code.co_name), os.path.basename(code.co_filename),
                                    f.f_lineno or 0)
            frames.append((f, where if ident == me else "thread %s: %s" % (names.get(ident, ident), where)))
    return frames


class Walk:
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
        self.read_locals = []     # frames whose f_locals the walk read (release() forgets them)
        self.object_roots = set() # id(root) of roots that are objects of their own (signal handlers)
        self.gc_off = False       # the program runs with the cyclic GC off
        self.unreached = None
        self.targets = {}
        self.grads, self.activations, self.optimizer_state, self.optimizer_grads = set(), set(), set(), set()
        # id(autograd node) -> the owning tensors it made: what a graph kept for backward holds
        # alive is reached through the node (the graph keeps the tensor in C++, out of sight)
        self.outputs_of = {}
        self.graph_nodes = []     # those nodes: held, so that the graph's walk meets these objects
        self.torch = sys.modules.get("torch")
        self.status = COMPLETE

    def release(self):
        """Drops every reference the walk took (the program may run with the cyclic GC off),
        the copies of locals left on the frames it read included."""
        _forget_locals(self.read_locals + _chains.FRAMES_READ)
        del _chains.FRAMES_READ[:]
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
                    k = Walk._tensor_buffer
                elif any("__cuda_array_interface__" in vars(c) for c in t.__mro__):
                    k = Walk._cai_buffer
                elif t.__name__ == "ArrayImpl" and "unsafe_buffer_pointer" in dir(t):
                    k = Walk._jax_buffer
                elif issubclass(t, ctypes.c_void_p):
                    k = Walk._ctypes_buffer
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
        if _is_graph_node_type(torch, t, module):
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

    def _ctypes_buffer(self, o):
        """A raw pointer kept in a ctypes.c_void_p (what cudaMalloc through ctypes returns): it
        owns the buffer it points at the start of; a pointer into the middle of one is a view."""
        ptr = ctypes.c_void_p.value.__get__(o)
        item = self._item_at(ptr) if ptr else None
        if item is None or item[0] != ptr:
            return None
        return ptr, item[1]

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
            if role == _TENSOR:
                self._note_output(o)
            if not gc.is_tracked(o):
                self.untracked_owner_types.add(t)

    def _note_output(self, tensor):
        """A tensor an autograd node made: the node leads to it. A graph that outlives its step
        (a loss kept with its history) keeps the activations saved for backward in C++, where
        neither the GC nor a walk sees them; the Python tensor of each stays alive with them,
        its grad_fn the node the graph reaches."""
        try:
            if tensor.is_leaf:
                return
            node = tensor.grad_fn
        except Exception:
            return
        if node is not None:
            made = self.outputs_of.get(id(node))
            if made is None:
                made = self.outputs_of[id(node)] = []
                self.graph_nodes.append(node)
            made.append(tensor)

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
                self.read_locals.append(o)
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
                extra.extend(self.outputs_of.get(id(o), ()))
                v = getattr(o, "variable", None)
                if v is not None:
                    extra.append(v)
        except Exception:
            pass
        return refs + extra if extra else refs

    # -- the walk

    def roots(self):
        """Modules first, then every thread's frames, then gc.garbage. The search is breadth
        first and a tie at one depth goes to the root listed first: a module's globals are a
        frame's globals too (a frame's referents before 3.11), and named through the module."""
        frames = _thread_frames()
        main = sys.modules.get("__main__")
        mods = [("__main__", main)] if main is not None else []
        mods += [(n, m) for n, m in list(sys.modules.items()) if m is not main]
        out = [(m, name) for name, m in mods if isinstance(m, types.ModuleType) and not name.startswith("vramtrace")]
        out += frames
        out += _exceptions_being_handled()
        out += _signal_handlers()
        context = contextvars.copy_context()  # a new Context around this thread's map
        if len(context):
            out.append((context, "context of thread %s" % threading.current_thread().name))
        out.append((gc.garbage, "gc.garbage"))
        self.object_roots.update(id(o) for o, _ in out if not _is(o, (types.ModuleType, types.FrameType, list, _CONTEXT)))
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
                       self.starts, self.home, self.roles, self.kinds, self.outputs_of, self.graph_nodes]
            try:
                answer = fast([o for o, _ in roots], targets, self._needs_extra, self._extra_list, keep, everything,
                              exclude, self.deadline, MAX_OBJECTS)
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
                if not visited & 1023 and (time.monotonic_ns() > self.deadline or visited > MAX_OBJECTS):
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
        while len(path) < MAX_STEPS:
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

    def _own_bytes(self, o):
        """A tensor's elements' bytes and its storage's, which it keeps whole however little of
        it it covers; (-1, 0) for anything else. Not an array's (`__cuda_array_interface__`) of
        the allocation it points into: a pool's arrays share one (CuPy's), which the pool
        keeps, not the array."""
        try:
            if self.torch is not None and _is(o, self.torch.Tensor):
                Tensor = self.torch.Tensor
                return Tensor.numel(o) * Tensor.element_size(o), Tensor.untyped_storage(o).nbytes()
        except Exception:
            pass
        return -1, 0

    def _chain(self, obj):
        path = self.path_of(obj)
        text = self.root_text.get(id(path[0])) if path else None
        if text is None:
            return None
        return describe(path[-MAX_STEPS:] if len(path) > MAX_STEPS else path, text,
                        root_step=id(path[0]) in self.object_roots, owner_note=view_note(*self._own_bytes(obj)))

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
        while len(path) < MAX_STEPS:
            p = self._rev.get(id(path[-1]))
            if p is None:
                head = "held by native code"
                if not _significant(path[-1]):
                    head += ": " + type_name(path[-1])
                break
            if id(p) in on_path:
                head = "a reference cycle"
                path.append(p)  # the chain starts and ends the cycle at p
                break
            path.append(p)
            on_path.add(id(p))
        path.reverse()
        if head == "a reference cycle":
            _start_cycle_at_object(path)
            if self.gc_off:  # what the cyclic GC would free, but the program turned it off
                head += " (the cyclic GC is off)"
            head += ": " + type_name(path[0])
        return describe(path, head, root_step=head == "held by native code")

    def emit(self):
        for ptr, (size, device, objs) in self.buffers.items():
            # An object that says what it is (a tensor, an array) names the buffer before the raw
            # pointer it keeps inside (a DeviceBuffer's .ptr), whatever order the heap lists them.
            objs.sort(key=lambda o: isinstance(o, ctypes.c_void_p))
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


def _is_graph_node_type(torch, t, module):
    """An autograd graph's node type: a C++ node's generated class (registered by its name in
    torch._C._functions, the test torch.autograd.graph.Node makes; the class says it comes
    from builtins), or a class of torch's with next_functions (BackwardCFunction)."""
    functions = getattr(getattr(torch, "_C", None), "_functions", None)
    try:
        name = type.__dict__["__name__"].__get__(t)
        if functions is not None and getattr(functions, name, None) is t:
            return True
    except Exception:
        pass
    return module.startswith("torch") and any("next_functions" in vars(c) for c in t.__mro__)


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


