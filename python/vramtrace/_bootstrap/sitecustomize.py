"""Loaded first by `vramtrace run` in a Python program (only this directory is put on
PYTHONPATH): installs the phase hooks and the retention walks, then hands over to whatever
sitecustomize the environment already had, so nothing else changes."""
import importlib
import os
import sys


def _import_hooks():
    """The vramtrace package lives in VRAMTRACE_PYTHON_PACKAGE, which may be a whole
    site-packages of another environment: on sys.path only for this import."""
    package_dir = os.environ.get("VRAMTRACE_PYTHON_PACKAGE")
    added = bool(package_dir) and package_dir not in sys.path
    if added:
        sys.path.insert(0, package_dir)
    try:
        from vramtrace import _phases, _retention
    finally:
        if added:
            sys.path.remove(package_dir)
    return _phases, _retention


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
    _phases, _retention = _import_hooks()
    _phases.install_from_environment()
    _retention.install_from_environment()
except Exception as e:  # never break the user's program
    sys.stderr.write("vramtrace: phases and retention walks disabled: %s\n" % e)
_chain_to_original()
