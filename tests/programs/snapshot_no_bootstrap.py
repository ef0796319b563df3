"""vramtrace.snapshot() in a process traced with a bare LD_PRELOAD (no sitecustomize, so no
retention walks of its own). The collector must not ask this thread for a walk: it is the thread
blocked in the snapshot call. A walk asked for would run, as a pending call, right after the call
returns; the program counts them. argv: the snapshot's path; CUDART, VRAMTRACE_TEST_PYTHON."""
import ctypes
import os
import sys

sys.path.insert(0, os.environ["VRAMTRACE_TEST_PYTHON"])
import vramtrace  # noqa: E402
from vramtrace import _retention  # noqa: E402

asked = []
_retention.walk_for_request = lambda reason: asked.append(reason)
rt = ctypes.CDLL(os.environ["CUDART"])
ptr = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
ok = vramtrace.snapshot(sys.argv[1])
for _ in range(100000):  # bytecode: the eval loop runs any pending call
    pass
print("snapshot %s, walks asked for %d" % (ok, len(asked)))
