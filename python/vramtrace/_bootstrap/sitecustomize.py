"""Loaded first by `vramtrace run --phase ...` (PYTHONPATH): installs the phase hooks, then hands
over to whatever sitecustomize the environment already had, so nothing else changes."""
import importlib
import os
import sys


def _chain_to_original():
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = mine


def _demote_package_dir():
    """`vramtrace run` puts the directory holding the vramtrace package on PYTHONPATH right after
    this one. Installed from a wheel, that directory is a whole site-packages: ahead of the
    standard library, any package there could shadow a stdlib module, and a job run by another
    interpreter would see this environment's packages before its own. Once vramtrace is
    imported, move that entry behind everything else (or drop it where site-packages is on the
    path anyway); PYTHONPATH itself is left as it is for child processes."""
    here = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(os.path.dirname(here))
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if len(entries) < 2 or os.path.abspath(entries[0] or ".") != here \
            or os.path.abspath(entries[1] or ".") != parent:
        return
    found = [i for i, p in enumerate(sys.path) if os.path.abspath(p or ".") == parent]
    if found:
        del sys.path[found[0]]
        if len(found) == 1:
            sys.path.append(parent)


try:
    from vramtrace import _phases

    _phases.install_from_environment()
except Exception as e:  # never break the user's program
    sys.stderr.write("vramtrace: phases disabled: %s\n" % e)
try:
    _demote_package_dir()
except Exception:
    pass
_chain_to_original()
