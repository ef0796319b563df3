"""Loaded first by `vramtrace run --phase ...` (only this directory is put on PYTHONPATH):
installs the phase hooks, then hands over to whatever sitecustomize the environment already had,
so nothing else changes."""
import importlib
import os
import sys


def _import_phases():
    """The vramtrace package lives in VRAMTRACE_PYTHON_PACKAGE, which may be a whole
    site-packages of another environment: on sys.path only for this import."""
    package_dir = os.environ.get("VRAMTRACE_PYTHON_PACKAGE")
    added = bool(package_dir) and package_dir not in sys.path
    if added:
        sys.path.insert(0, package_dir)
    try:
        from vramtrace import _phases
    finally:
        if added:
            sys.path.remove(package_dir)
    return _phases


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


try:
    _import_phases().install_from_environment()
except Exception as e:  # never break the user's program
    sys.stderr.write("vramtrace: phases disabled: %s\n" % e)
_chain_to_original()
