#!/usr/bin/env python3
"""On a GPU host: every release in a gpu_bundle.sh bundle, its allocator driven by gpu_alloc
under `vramtrace run`; the trace's tensor layer against what the allocator itself counts.

    gpu_run.py VRAMTRACE BUNDLE.tar.xz OUTDIR

A release with a trace tracker must say "recording tensors" and its live tensor bytes at the end
must equal DeviceStats' allocated_bytes.current; one without (2.1) must say why it is off in one
line and still record its segments. Prints a line per release and writes OUTDIR/gpu_run.json.
"""
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path


def release_key(v):
    return tuple(int(x) for x in v.split("."))


def main(vt, bundle, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle) as t:
        t.extractall(out / "releases")
    results, bad = [], 0
    for d in sorted((p for p in (out / "releases").iterdir() if p.is_dir()), key=lambda p: release_key(p.name)):
        v = d.name
        trace = out / f"{v}.vrt"
        env = dict(os.environ, LD_LIBRARY_PATH=f"{d / 'torch' / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}")
        p = subprocess.run([vt, "run", "-o", str(trace), "--", str(d / "gpu_alloc")], capture_output=True,
                           text=True, env=env, timeout=300)
        m = re.search(r"VRAMTRACE_TRUTH (\{.*\})", p.stdout)
        truth = json.loads(m[1]) if m else None
        rep = subprocess.run([vt, "report", "--json", "-q", str(trace)], capture_output=True, text=True)
        report = json.loads(rep.stdout) if rep.returncode == 0 else {}
        tensors = next((t["live_bytes_at_end"] for t in report.get("tensors", []) if t["device"] == 0), None)
        segments = next((dv.get("live_bytes_at_end") for dv in report.get("devices", []) if dv["kind"] == "device"),
                        None)
        said = [line for line in p.stderr.splitlines() if "PyTorch" in line]
        attached = any("recording tensors" in line for line in said)
        if v.startswith("2.1."):
            ok = p.returncode == 0 and not attached and len(said) == 1 and "no allocator trace tracker" in said[0]
        else:
            ok = p.returncode == 0 and attached and truth is not None and tensors == truth["allocated"]
        bad += not ok
        r = {"release": v, "ok": ok, "exit": p.returncode, "said": said, "truth": truth, "tensor_bytes": tensors,
             "segment_bytes": segments}
        results.append(r)
        print(f"{v}: {'ok' if ok else 'FAILED'}: tensors {tensors} vs allocated {truth and truth['allocated']}, "
              f"segments {segments} vs reserved {truth and truth['reserved']}; {' | '.join(said)}"
              + ("" if p.returncode == 0 else f"; exit {p.returncode}: {p.stderr[-500:]}"), flush=True)
    (out / "gpu_run.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"{len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
