#!/usr/bin/env python3
"""A SIGKILL right after a big allocation (issue 22, item 6), on a GPU with PyTorch.

    python3 scripts/gpu/sigkill_check.py OUTDIR [DELAYS_MS]     (default 0,1,2,5,10,20,50,100,200)

For each delay, a job runs under `vramtrace run -o OUTDIR/kill-<ms>ms.vrt`: it allocates tensors
for about 2 s (keeping every third), then one 777 MiB tensor, synchronizes, and prints "big"
with what PyTorch's allocator has reserved; the parent SIGKILLs it that many milliseconds after
reading the line. `run` recovers the trace from its rings sidecar. The check: the trace holds the
777 MiB block (the tensor when the tensor layer is on, and the cudaMalloc of its segment), and
the device's live bytes at the end equal what the job said was reserved. One line per delay, then
"WRONG" if any delay missed the block or the bytes, else "all present".
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import VT  # noqa: E402

BIG = 777 << 20


def job():
    import torch
    torch.cuda.init()
    kept, sizes, end, i = [], [1 << 20, 3 << 20, 8 << 20, 17 << 20, 40 << 20], time.time() + 2.0, 0
    while time.time() < end:
        t = torch.empty(sizes[i % len(sizes)] + 512 * (i % 7), dtype=torch.uint8, device="cuda")
        if i % 3 == 0 and len(kept) < 60:
            kept.append(t)
        i += 1
    big = torch.empty(BIG, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print(f"big reserved={torch.cuda.memory_reserved()} allocated={torch.cuda.memory_allocated()} "
          f"pid={os.getpid()} tensors={i}", flush=True)
    time.sleep(600)
    return big, kept


def check(trace):
    """(block present, live device bytes at the end, recovered line) for a trace."""
    dump = subprocess.run([VT, "dump", "-q", trace], capture_output=True, text=True).stdout
    sizes = [int(s) for s in re.findall(r"\bsize=(\d+)", dump)]
    present = any(BIG <= s < BIG + (4 << 20) for s in sizes)
    rep = subprocess.run([VT, "report", "--json", trace], capture_output=True, text=True)
    live = None
    try:
        devices = json.loads(rep.stdout)["devices"]
        live = sum(d["live_bytes_at_end"] for d in devices if d["kind"] == "device")
    except (ValueError, KeyError):
        pass
    return present, live


def one(outdir, delay_ms):
    trace = os.path.join(outdir, f"kill-{delay_ms}ms.vrt")
    for leftover in (trace, trace + ".rings"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    p = subprocess.Popen([VT, "run", "-o", trace, "--", sys.executable, os.path.abspath(__file__), "--job"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    while not line.startswith("big"):
        line = p.stdout.readline()
        if not line:
            break
    said = dict(re.findall(r"(\w+)=(\d+)", line))
    if "pid" not in said:
        p.kill()
        return f"delay {delay_ms:3d} ms: the job never said 'big': {p.stderr.read()[-500:]}", False
    time.sleep(delay_ms / 1000)
    os.kill(int(said["pid"]), signal.SIGKILL)
    _, err = p.communicate(timeout=300)
    recovered = next((ln for ln in err.splitlines() if "recovered" in ln or "already held" in ln), "no recovery")
    present, live = check(trace)
    expected = int(said["reserved"])
    ok = present and live == expected
    return (f"delay {delay_ms:3d} ms: {'present' if present else 'MISSING'}, live {live} of expected {expected} "
            f"bytes ({'equal' if live == expected else 'DIFFERENT'}); {recovered.replace('vramtrace: ', '')}", ok)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        job()
        return 0
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    delays = [int(d) for d in (sys.argv[2] if len(sys.argv) > 2 else "0,1,2,5,10,20,50,100,200").split(",")]
    wrong = 0
    for d in delays:
        text, ok = one(outdir, d)
        print(text, flush=True)
        wrong += not ok
    print("WRONG" if wrong else "all present")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
