"""Naming a chain of references for people: the root, then one step per object a person would
name, the owner last; hops through containers and modules fold into a step
(`__main__.model.layers.0.weight (Parameter)`). Steps are joined by U+001F (docs/trace-format.md,
"Retention"). Objects are looked at by identity and by their real type only: an object's own
__class__, __eq__ or __getattr__ may lie or raise.
"""
import contextvars
import sys
import types
import weakref

SEP = "\x1f"
MAX_STEP_TEXT = 160

_PLAIN = (dict, list, tuple, set, frozenset, types.CellType, types.MappingProxyType)
_CONTEXT = type(contextvars.copy_context())
_CONTEXT_VAR = contextvars.ContextVar
_SUSPENDED = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
# Objects a chain passes through on its way to a frame's local: named by the hop, not a step.
_HOPS = (types.ModuleType, types.FrameType, types.TracebackType)


def _is(o, kinds):
    """isinstance by the object's real type: an object's own __class__ may lie or raise."""
    return issubclass(type(o), kinds)


def _where(frame):
    """name at file:line of a frame (a suspended generator's, a traceback's), or ""."""
    try:
        code = frame.f_code
        return "%s at %s:%d" % (code.co_name, code.co_filename.rsplit("/", 1)[-1], frame.f_lineno or 0)
    except Exception:
        return ""


def _suspended_frame(o):
    for name in ("gi_frame", "cr_frame", "ag_frame"):
        try:
            return object.__getattribute__(o, name)
        except Exception:
            pass
    return None


def _is_named(o, module, name):
    """Whether o's real type is module.name (a type the chain names but cannot import: C types
    of _thread and functools)."""
    t = type(o)
    return t.__name__ == name and t.__module__ == module


def type_name(o):
    t = type(o)
    if _is(o, types.FunctionType):
        return "function %s" % o.__qualname__
    if _is(o, types.MethodType):
        return "method %s" % getattr(o.__func__, "__qualname__", "?")
    if _is(o, types.BuiltinMethodType) and not _is(getattr(o, "__self__", None), types.ModuleType):
        return "method %s" % getattr(o, "__qualname__", "?")
    if _is(o, _SUSPENDED):
        where = _where(_suspended_frame(o))
        return "%s %s" % (t.__name__, where or getattr(o, "__qualname__", "?"))
    if _is_named(o, "functools", "_lru_cache_wrapper"):
        return "lru_cache of %s" % getattr(o, "__qualname__", "?")
    if _is(o, weakref.ref):  # a WeakKeyDictionary's key: what it refers to (the base's call runs no program code)
        try:
            target = weakref.ref.__call__(o)
        except Exception:
            target = None
        return "weakref to %s" % (type(target).__qualname__ if target is not None else "a dead object")
    return t.__qualname__


def _is_module_container(o):
    torch = sys.modules.get("torch")
    return torch is not None and _is(o, torch.nn.Module)


def _is_graph_node(o):
    """An autograd graph's node (C++ nodes, a custom Function's BackwardCFunction): the test
    _owners.py's walk follows them by."""
    torch = sys.modules.get("torch")
    if o is None or torch is None:
        return False
    try:
        from ._owners import _is_graph_node_type

        t = type(o)
        module = t.__dict__.get("__module__")
        return _is_graph_node_type(torch, t, module if isinstance(module, str) else "")
    except Exception:
        return False


# What a C future or task holds, read as asyncio's own code reads them (plain getters).
_ASYNCIO_FIELDS = ("_coro", "_result", "_exception", "_callbacks", "_fut_waiter", "_loop")


def _is_hamt(o):
    """A node of the immutable map behind contextvars.Context (its C types are not importable)."""
    return type(o).__module__ == "builtins" and type(o).__name__.startswith("hamt")


def _significant(o):
    """Objects that end a step of the chain: those a person would name. An autograd graph's
    nodes are hops: what a graph keeps is named from the tensor that holds the graph; so are
    the nodes of a context's map: a value is named by its variable."""
    if _is(o, _PLAIN) or _is(o, _HOPS) or _is_graph_node(o) or _is_hamt(o):
        return False
    if _is(o, _CONTEXT):
        return False
    if type(o).__name__ in ("OrderedDict", "defaultdict", "deque") or _is_named(o, "functools", "_lru_list_elem"):
        return False
    return not _is_module_container(o)


def _key_text(k, attribute):
    """.name for an attribute (a namespace's dict: an object's, a module's, a class's), [key]
    for a dict's entry."""
    if attribute and _is(k, str) and k.isidentifier():
        return "." + k
    if _is(k, (str, int)):
        return "[%r]" % (k if not _is(k, str) else k[:40])
    return "[%s]" % type_name(k)


def _class_namespace(cls, d):
    """Whether d is the dict behind a class's __dict__ (a read-only proxy of it): the same
    entries, by identity."""
    try:
        proxy = type.__dict__["__dict__"].__get__(cls)
        if len(proxy) != len(d) or not all(type(k) is str for k in d):
            return False  # a key of another type could hash and compare by code of its own
        return all(k in d and d[k] is v for k, v in proxy.items())
    except Exception:
        return False


def _field_text(parent, i):
    """[i], or .name for a named tuple's field."""
    try:
        fields = type(parent).__dict__.get("_fields") if _is(parent, tuple) else None
        if _is(fields, tuple) and i < len(fields) and _is(fields[i], str):
            return "." + fields[i]
    except Exception:
        pass
    return "[%d]" % i


def _namespace_of(grand, parent, great=None):
    """Whether parent is the __dict__ of grand (module, class or instance), or one thread's
    attributes of a threading.local (great)."""
    if grand is None:
        return False
    if _is(grand, type):
        return _class_namespace(grand, parent)
    if great is not None and _is_named(great, "_thread", "_local") and _is(grand, dict):
        return True
    try:
        return object.__getattribute__(grand, "__dict__") is parent
    except Exception:
        return False


def _default_name(function, defaults, k):
    """The parameter whose default is defaults[k] (__kwdefaults__ is keyed by it already)."""
    if _is(defaults, dict):
        return k
    try:
        code = function.__code__
        return code.co_varnames[code.co_argcount - len(defaults) + k]
    except Exception:
        return k


def _lru_key(wrapper, result):
    """[key] of a bounded lru_cache's result, or "". The cache's dict maps each key to a linked
    list entry that holds the result out of Python's sight; the wrapper's referents list each
    entry's key and result in a row next to the entry's type (after them since heap types are
    visited, before them otherwise), the key being one of the dict's by identity."""
    import gc

    def entry_type(o):
        return _is(o, type) and o.__name__ == "_lru_list_elem"

    try:
        refs = gc.get_referents(wrapper)
        for i in range(1, len(refs)):
            if refs[i] is result and (i + 1 < len(refs) and entry_type(refs[i + 1]) or
                                      i >= 2 and entry_type(refs[i - 2])):
                key = refs[i - 1]
                if any(_is(d, dict) and any(k is key for k in d) for d in refs):
                    return _key_text(key, False)
    except Exception:
        pass
    return ""


def _context_variable(node, child):
    """How a context (or a node of its map) holds child: ": variable NAME" for a value, "" for the
    map's inner nodes. A node's referents list each value next to its key (a NULL key, for an
    inner node, is not listed), on the side _key_side() says."""
    import gc

    try:
        refs = gc.get_referents(node)
        side = _key_side()
        for i in range(len(refs)):
            if refs[i] is child and 0 <= i + side < len(refs) and _is(refs[i + side], _CONTEXT_VAR):
                return ": variable %s" % refs[i + side].name
    except Exception:
        pass
    return ""


_KEY_SIDE = []


def _key_side():
    """+1 where a map node's referents list a key after its value (CPython's hamt.c visits its
    array from the end), -1 where before: found once, on a context of two variables."""
    if not _KEY_SIDE:
        import gc

        def probe():
            a, b = contextvars.ContextVar("a"), contextvars.ContextVar("b")
            a.set(1.5)
            b.set(2.5)
            nodes = [contextvars.copy_context()]
            while nodes:
                refs = gc.get_referents(nodes.pop())
                for i, r in enumerate(refs):
                    if r == 1.5 and type(r) is float:
                        return 1 if i + 1 < len(refs) and refs[i + 1] is a else -1
                    if _is_hamt(r):
                        nodes.append(r)
            return 1

        _KEY_SIDE.append(contextvars.Context().run(probe))
    return _KEY_SIDE[0]


# Frames whose f_locals naming read (before 3.13 that leaves a copy of the locals on the frame):
# the walk that named them forgets those copies when it ends (_owners._forget_locals).
FRAMES_READ = []


def _frame_local(frame, child):
    """The name of frame's local that is child: "local NAME", or "its iterable" for the hidden
    argument ".0" a generator expression or comprehension loops over."""
    try:
        FRAMES_READ.append(frame)
        for name, v in frame.f_locals.items():
            if v is child:
                return "its iterable" if name == ".0" else "local " + name
    except Exception:
        pass
    return None


def _edge(grand, parent, child, great=None):
    """How parent refers to child (grand refers to parent, great to grand, or None)."""
    if _is(parent, types.ModuleType):
        return ""  # its __dict__
    if _is(parent, types.FrameType):
        name = _frame_local(parent, child)
        if name is not None:
            return " " + name
        if child is parent.f_back:
            return " caller"
        return " (frame)"
    if _is(parent, type) and _is(child, dict) and _class_namespace(parent, child):
        return ""  # the class's namespace: its entries are named as attributes
    if _is(parent, _SUSPENDED):
        frame = _suspended_frame(parent)
        if child is frame:
            return ""  # before 3.11 the frame is an object of its own: its locals name the hop
        name = _frame_local(frame, child) if frame is not None else None
        return name if name is not None else ""
    if _is(parent, BaseException):
        for attr in ("__traceback__", "__context__", "__cause__", "args"):
            try:  # BaseException's own descriptors: a subclass's property of that name may raise
                if BaseException.__dict__[attr].__get__(parent, BaseException) is child:
                    return "." + attr
            except Exception:
                pass
    if _is(parent, types.TracebackType):
        if child is parent.tb_next:
            return ".tb_next"
        if child is parent.tb_frame:
            return ", in %s:" % _where(child)
    if _is(parent, _CONTEXT) or _is_hamt(parent):
        return _context_variable(parent, child)
    if _is_named(parent, "_thread", "_local"):
        return ""  # its per-thread attribute dicts: their entries are named as attributes
    if _is_named(grand, "_thread", "_local") and _is(parent, dict):
        return ""  # one thread's attributes, keyed by a weak reference to the thread's state
    if _is_named(parent, "functools", "_lru_cache_wrapper"):
        return "cache" if _is(child, dict) else "cache" + _lru_key(parent, child)
    if _is_named(parent, "functools", "_lru_list_elem"):
        return ""  # a bounded cache's entry: its result
    if _is(grand, types.FunctionType) and (parent is grand.__defaults__ or parent is grand.__kwdefaults__):
        keys = list(parent) if _is(parent, dict) else range(len(parent))
        for k in keys:
            if parent[k] is child:
                return "default argument %s" % _default_name(grand, parent, k)
        return "default argument"
    if _is(parent, dict) or type(parent).__name__ in ("OrderedDict", "defaultdict"):
        attribute = _namespace_of(grand, parent, great)
        for k, v in parent.items():  # the heap holds still while the walk runs
            if v is child:
                return _key_text(k, attribute)
            if k is child:
                return " key"  # as a set's " member": the root or step before names the dict
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
                return _field_text(parent, i)
        return "[?]"
    if _is(parent, (set, frozenset)):
        return " member"
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
    if _is(parent, types.BuiltinMethodType):
        return ".__self__" if child is getattr(parent, "__self__", None) else " -> "
    if type(parent).__module__ == "_asyncio":  # C futures and tasks: their fields are getsets
        for name in _ASYNCIO_FIELDS:
            try:
                value = object.__getattribute__(parent, name)
            except Exception:
                continue
            if value is child:
                return "." + name
            if _is(value, list) and any(v is child or _is(v, tuple) and any(x is child for x in v) for v in value):
                return "." + name  # _callbacks: (callback, context) pairs, made anew by each read
    try:
        attrs = object.__getattribute__(parent, "__dict__")
        if child is attrs:
            return ""
        for k, v in attrs.items():  # values kept inline (3.11+) are the object's own referents
            if v is child:
                return _key_text(k, True)
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
            if parent.is_leaf and child is parent.grad:  # a non-leaf's .grad warns, into the program's stderr
                return ".grad"
            if child is parent.grad_fn:
                return ".grad_fn"
        except Exception:
            pass
        return "._backward_hooks"
    try:
        if torch is not None and _is(child, torch.Tensor) and child.grad_fn is parent:
            return " graph: %s's output" % type(parent).__name__  # what _owners.py follows
        for i, (fn, _) in enumerate(parent.next_functions):
            if fn is child:  # within a graph a node is a hop: the graph is named as a whole
                within = _is_graph_node(grand) or (torch is not None and _is(grand, torch.Tensor))
                return "" if within else ".next_functions[%d]" % i
        if getattr(parent, "variable", None) is child:
            return ".variable"
        if _is(child, dict):
            return " hooks"  # the hook dicts an autograd node's C++ side holds
    except Exception:
        pass
    for klass in type(parent).__mro__:
        for name, d in vars(klass).items():  # __slots__, and a C type's members (partial's args)
            if _is(d, types.MemberDescriptorType):
                try:
                    if d.__get__(parent, type(parent)) is child:
                        return "." + name
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


def bytes_text(n):
    """n bytes as the reports print them (vrt_fmt_bytes): 16 B, 8.01 MiB, 64.0 MiB, 233 MiB."""
    v, unit = float(n), 0
    while v >= 1024 and unit < 4:
        v /= 1024
        unit += 1
    if not unit:
        return "%d B" % n
    return "%.*f %s" % (2 if v < 10 else 1 if v < 100 else 0, v, ("B", "KiB", "MiB", "GiB", "TiB")[unit])


def view_note(own, whole):
    """What to say of an owner that covers no more than half the buffer it keeps (a slice of a
    tensor): all of the buffer stays for it."""
    if own < 0 or whole <= 0 or own * 2 > whole:
        return ""
    return ", a view of %s that keeps all %s" % (bytes_text(own), bytes_text(whole))


def describe(path, text, root_step=False, owner_note=""):
    """The chain's steps, U+001F between them: the root (text names it), then one step per
    object a person would name, the owner last; hops through containers fold into the step
    (__main__.model.layers.0.weight). root_step: the root is an object of its own that the
    text does not name (a signal handler, what native code holds), a step of its own.
    owner_note: said of the owner after its type (view_note)."""
    steps = []
    frame_root = _is(path[0], types.FrameType)
    if root_step and len(path) > 1 and _significant(path[0]):
        steps.append("%s (%s)" % (text[:MAX_STEP_TEXT], type_name(path[0])))
        text = ""
    for k in range(1, len(path)):
        grand = path[k - 2] if k >= 2 else None
        great = path[k - 3] if k >= 3 else None
        e = _edge(grand, path[k - 1], path[k], great)
        if frame_root and k == 1 and e.startswith((" local ", " its iterable")):
            text = "%s: %s" % (text, e[7:] if e.startswith(" local ") else e[1:])
        elif e == " -> " and not text:
            pass  # a hop nothing names, at a step's start: the step's own arrow shows it
        else:
            text += e
        if _significant(path[k]) or k == len(path) - 1:
            last = k == len(path) - 1
            steps.append(_step(_tidy(text).strip()[:MAX_STEP_TEXT], path[k], owner_note if last else ""))
            text = ""
    if len(path) == 1:
        steps.append(_step(text[:MAX_STEP_TEXT], path[0], owner_note))
    return SEP.join(steps)


def _step(text, obj, note=""):
    """A step as printed: what names it, and its type; the type alone where nothing names the hop
    (an iterator inside itertools.cycle)."""
    return "%s (%s%s)" % (text, type_name(obj), note) if text else "(%s%s)" % (type_name(obj), note)
