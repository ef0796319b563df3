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


try:
    from vramtrace import _phases

    _phases.install_from_environment()
except Exception as e:  # never break the user's program
    sys.stderr.write("vramtrace: phases disabled: %s\n" % e)
_chain_to_original()
