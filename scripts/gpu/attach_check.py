#!/usr/bin/env python3
"""Attach to a running job and name the site that grows (issue 19), on a real GPU.

usage: scripts/gpu/attach_check.py OUTDIR
Starts scripts/gpu/attach_grow.py untraced, attaches after 6 s, lets it run to its end, then
checks `vramtrace leaks` (no phases) against what the job says about itself. Writes
OUTDIR/attach.txt, OUTDIR/attach.json and the trace OUTDIR/attach-grow.vrt.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import VT, analyze_attached, save_attached  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "attach-grow.vrt")
    if os.path.exists(trace):  # attach keeps an existing trace (it needs -f): a rerun must not read the old one
        os.unlink(trace)
    job = subprocess.Popen([sys.executable, os.path.join(HERE, "attach_grow.py"), "20"], stdout=subprocess.PIPE,
                           text=True)
    time.sleep(float(os.environ.get("ATTACH_AFTER_S", "6")))  # torch's import takes ~5 s there
    t0 = time.time()
    att = subprocess.run([VT, "attach", str(job.pid), "-o", trace], capture_output=True, text=True, timeout=60)
    attach_s = time.time() - t0
    stdout, _ = job.communicate(timeout=120)
    truth = json.loads(next(l for l in stdout.splitlines() if l.startswith("VRAMTRACE_TRUTH ")).split(" ", 1)[1])
    # what was there before the attach comes from PyTorch's own snapshot (issue 19 item 3): the
    # tensor layer's live bytes at the end against memory_allocated(), the labelled sites
    a = analyze_attached(trace)
    save_attached(out, "attach", att, a, truth, attach_seconds=round(attach_s, 2))
    seeded, tensors = a["before_attach"], a["tensors_live_at_end"]
    print("tensors live at the end of the trace: %s; the job's memory_allocated(): %s" % (tensors, truth["allocated"]))
    print("before the attach:", seeded)
    print("categories at the end:", a["categories_at_end"])


if __name__ == "__main__":
    main()
