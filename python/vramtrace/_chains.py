"""Naming a chain of references for people: the root, then one step per object a person would
name, the owner last; hops through containers and modules fold into a step
(`__main__.model.layers.0.weight (Parameter)`). Steps are joined by U+001F (docs/trace-format.md,
"Retention"). Objects are looked at by identity and by their real type only: an object's own
__class__, __eq__ or __getattr__ may lie or raise.
"""
import sys
import types

SEP = "\x1f"
MAX_STEP_TEXT = 160

_PLAIN = (dict, list, tuple, set, frozenset, types.CellType, types.MappingProxyType)


def _is(o, kinds):
    """isinstance by the object's real type: an object's own __class__ may lie or raise."""
    return issubclass(type(o), kinds)


def type_name(o):
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


def _key_text(k, attribute):
    """.name for an attribute (a namespace's dict: an object's, a module's, a class's), [key]
    for a dict's entry."""
    if attribute and _is(k, str) and k.isidentifier():
        return "." + k
    if _is(k, (str, int)):
        return "[%r]" % (k if not _is(k, str) else k[:40])
    return "[%s]" % type_name(k)


def _namespace_of(grand, parent):
    """Whether parent is the __dict__ of grand (module, class or instance)."""
    if grand is None:
        return False
    try:
        return object.__getattribute__(grand, "__dict__") is parent
    except Exception:
        return False


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
        attribute = _namespace_of(grand, parent)
        for k, v in parent.items():  # the heap holds still while the walk runs
            if v is child:
                return _key_text(k, attribute)
            if k is child:
                return " key of %s" % type_name(parent)
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


def describe(path, text):
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
            steps.append("%s (%s)" % (_tidy(text).strip()[:MAX_STEP_TEXT], type_name(path[k])))
            text = ""
    if len(path) == 1:
        steps.append("%s (%s)" % (text[:MAX_STEP_TEXT], type_name(path[0])))
    return SEP.join(steps)
