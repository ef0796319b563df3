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
VT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "analyzer", "vramtrace")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "attach-grow.vrt")
    job = subprocess.Popen([sys.executable, os.path.join(HERE, "attach_grow.py"), "20"], stdout=subprocess.PIPE,
                           text=True)
    time.sleep(float(os.environ.get("ATTACH_AFTER_S", "6")))  # torch's import takes ~5 s there
    t0 = time.time()
    att = subprocess.run([VT, "attach", str(job.pid), "-o", trace], capture_output=True, text=True, timeout=60)
    attach_s = time.time() - t0
    stdout, _ = job.communicate(timeout=120)
    truth = json.loads(next(l for l in stdout.splitlines() if l.startswith("VRAMTRACE_TRUTH ")).split(" ", 1)[1])
    leaks = subprocess.run([VT, "leaks", "--json", "-q", trace], capture_output=True, text=True)
    text = subprocess.run([VT, "leaks", "-q", trace], capture_output=True, text=True).stdout
    report = subprocess.run([VT, "report", "-q", trace], capture_output=True, text=True).stdout
    # what was there before the attach, from PyTorch's own snapshot (issue 19 item 3): the tensor
    # layer's live bytes at the end against memory_allocated(), the labelled pre-attach sites
    rj = subprocess.run([VT, "report", "--json", "-q", trace], capture_output=True, text=True)
    rep = json.loads(rj.stdout) if rj.returncode in (0, 1) and rj.stdout.strip() else {}
    seeded = {}
    for site in rep.get("live_at_end", []):
        head = site.get("headline", {}).get("function", "")
        if head.startswith("[") and "before" in head:
            key = head.split(" at ")[0]
            seeded[key] = seeded.get(key, 0) + site["bytes"]
    tensors = (rep.get("tensors") or [{}])[0].get("live_bytes_at_end")
    result = {"truth": truth, "attach": att.stdout + att.stderr, "attach_seconds": round(attach_s, 2),
              "leaks": json.loads(leaks.stdout) if leaks.stdout.strip() else leaks.stderr,
              "tensors_live_at_end": tensors, "before_attach": seeded,
              "categories_at_end": rep.get("categories_at_end")}
    with open(os.path.join(out, "attach.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "attach.txt"), "w") as f:
        f.write(att.stdout + att.stderr + "\n" + text + "\n" + report)
    print(att.stdout + att.stderr)
    print(text[:4000])
    print("truth:", truth)
    print("tensors live at the end of the trace: %s; the job's memory_allocated(): %s" % (tensors, truth["allocated"]))
    print("before the attach:", seeded)
    print("categories at the end:", rep.get("categories_at_end"))


if __name__ == "__main__":
    main()
