#!/usr/bin/env python3
"""Attach to a running DeepSpeed job whose memory grows by a model's worth every train() call
and name what grows (issue 19: "the same with a DeepSpeed job attached mid-run").

usage: scripts/gpu/attach_ds_check.py OUTDIR [CALLS]
Starts scripts/gpu/attach_ds.py untraced (needs DeepSpeed: see docs/gpu-results.md), attaches once
its second call has begun, lets it run to its end, and writes OUTDIR/attach-ds.txt (attach's
answer, `leaks` and `report` without phases), OUTDIR/attach-ds.json, and the trace.
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
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "attach-ds.vrt")
    if os.path.exists(trace):  # attach keeps an existing trace (it needs -f): a rerun must not read the old one
        os.unlink(trace)
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
    job = subprocess.Popen([sys.executable, os.path.join(HERE, "attach_ds.py"), str(calls)], stdout=subprocess.PIPE,
                           text=True, env=env)
    seen = []
    for line in job.stdout:  # attach once the second call has begun: the job is running and growing
        seen.append(line)
        if line.startswith("VRAMTRACE_CALL 1 "):
            break
    time.sleep(1.0)
    attach_began = time.monotonic()
    att = subprocess.run([VT, "attach", str(job.pid), "-o", trace], capture_output=True, text=True, timeout=120)
    attach_ended = time.monotonic()
    rest, _ = job.communicate(timeout=600)
    lines = seen + rest.splitlines(True)
    truth = json.loads(next(l for l in lines if l.startswith("VRAMTRACE_TRUTH ")).split(" ", 1)[1])
    a = analyze_attached(trace)
    calls_at = [float(l.split()[3]) for l in lines if l.startswith("VRAMTRACE_CALL ")]
    save_attached(out, "attach-ds", att, a, truth, attach_began=attach_began, attach_ended=attach_ended,
                  calls_began_at=calls_at, calls_before_attach_ended=sum(t < attach_ended for t in calls_at))
    tensors = a["tensors_live_at_end"]
    print("tensors live at the end: %s; memory_allocated() at the end: %s" % (tensors, truth["allocated_at_end"]))


if __name__ == "__main__":
    main()
