"""python -m vramtrace ARGS...: the vramtrace command, with the preload that came with it."""
import os
import sys

from . import binary


def main():
    exe = binary()
    if not os.path.isabs(exe):
        sys.stderr.write("vramtrace: the vramtrace executable is not installed with this package (%s/_bin) "
                         "nor on PATH\n" % os.path.dirname(os.path.abspath(__file__)))
        return 127
    here = os.path.dirname(os.path.abspath(__file__))
    preload = os.path.join(here, "_bin", "libvramtrace.so")
    if os.path.exists(preload):
        os.environ.setdefault("VRAMTRACE_PRELOAD", preload)
    try:
        os.execvp(exe, [exe] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("vramtrace: cannot run %s: %s\n" % (exe, e))
        return 127


if __name__ == "__main__":
    sys.exit(main())
