#!/usr/bin/env python3
"""The sites at each peak on PyTorch (analyzer/peak_sites.c, docs/ux-audit.md #81): a small
training loop whose peak falls in the middle (a wide layer for the first steps only), traced
whole and traced in a 4 MiB ring that wraps. For the whole trace, every list at a peak (each
device and kind, and each tensor peak's tensors) must be what tests/e2e/replay.py, an
independent replay of the records, holds just after the record that set it; for the ring, the
device memory list at its peak must add up to the peak. Prints the figures and PASS/FAIL.

    python3 scripts/gpu/peak_sites_check.py [VRAMTRACE]   (default build/analyzer/vramtrace)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e"))
from replay import Replay  # noqa: E402

JOB = r'''
import sys, torch
steps = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).cuda()
wide = torch.nn.Linear(2048, 16384).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(steps):
    x = torch.randn(256, 2048, device="cuda")
    y = model(x)
    if step < 3:
        y = wide(y).sum(dim=1, keepdim=True) * y
    y.square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step == 3:
        del wide
torch.cuda.synchronize()
'''


def record(vramtrace, tmp, name, steps, ring=()):
    out = os.path.join(tmp, name)
    t = time.time()
    r = subprocess.run([vramtrace, "run", "-q", *ring, "-o", out, "--", sys.executable, "-c", JOB, str(steps)],
                       capture_output=True, text=True, timeout=600)
    print(f"{name}: rc={r.returncode} {time.time() - t:.1f} s {os.path.getsize(out) if os.path.exists(out) else 0} bytes")
    if r.returncode:
        print(r.stderr[-2000:])
    return out


def sites(items):
    out = {}
    for it in items:
        b, n = out.get(it.stack, (0, 0))
        out[it.stack] = (b + it.size, n + 1)
    return out


def listed(entry):
    return {s["stack"]: (s["bytes"], s["count"]) for s in entry["top_at_peak"]}


def report(vramtrace, path):
    t = time.time()
    r = subprocess.run([vramtrace, "report", "--json", "-q", "--top", "1000000", path], capture_output=True, text=True)
    print(f"report {os.path.basename(path)}: rc={r.returncode} {time.time() - t:.2f} s")
    return json.loads(r.stdout)


def check_whole(vramtrace, path):
    ok = True
    whole = Replay(path, vramtrace)
    rep = report(vramtrace, path)
    for entry in rep["devices"]:
        key = (entry["device"], entry["kind"])
        at = Replay(path, vramtrace, records=whole.peak_record[key])
        held = [it for it in at.held_items() if (it.device, it.kind) == key]
        same = listed(entry) == sites(held) and entry["peak_bytes"] == sum(it.size for it in held)
        print(f"  {key}: peak {entry['peak_bytes']} at record {whole.peak_record[key]}, "
              f"{len(entry['top_at_peak'])} sites: {'same' if same else 'DIFFERENT'}")
        ok &= same
    for entry in rep.get("tensors", []):
        device = entry["device"]
        at = Replay(path, vramtrace, records=whole.tensor_peak_record[device])
        blocks = sites(b for b in at.blocks.values() if b.device == device)
        shown = listed(entry)
        same = {s: shown.get(s) for s in blocks} == blocks and sum(b for b, _ in blocks.values()) == entry["peak_bytes"]
        print(f"  tensors {device}: peak {entry['peak_bytes']} at record {whole.tensor_peak_record[device]}, "
              f"{len(blocks)} tensor sites of {len(shown)}: {'same' if same else 'DIFFERENT'}")
        ok &= same
    return ok


def check_ring(vramtrace, path):
    info = json.loads(subprocess.run([vramtrace, "info", "--json", path], capture_output=True, text=True).stdout)
    rep = report(vramtrace, path)
    ok = bool(info.get("history_lost"))
    print(f"  ring: history_lost={info.get('history_lost')} events={rep['events']}")
    for entry in rep["devices"]:
        total = sum(s["bytes"] for s in entry["top_at_peak"])
        print(f"  {entry['device']} {entry['kind']}: peak {entry['peak_bytes']}, sites add up to {total}")
        ok &= total == entry["peak_bytes"]
    return ok


def main():
    vramtrace = sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace"
    tmp = tempfile.mkdtemp(prefix="vt-peaks-")
    ok = check_whole(vramtrace, record(vramtrace, tmp, "whole.vrt", 8))
    ok &= check_ring(vramtrace, record(vramtrace, tmp, "ring.vrt", 60000, ("--ring", "4M")))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
