#!/usr/bin/env python3
"""`vramtrace export --format memory-viz` against PyTorch's own snapshot of the same run (issue 16).

    memviz_check.py OUTDIR          (the driver: runs the workload traced, compares, writes
                                     OUTDIR/memviz.json and OUTDIR/memviz.txt)
    memviz_check.py --workload SNAP (the workload: a small transformers-free training loop whose
                                     allocator history PyTorch records from before its first
                                     allocation; writes torch.cuda.memory._snapshot() to SNAP)

Compared, for device 0: segments and their blocks at the end (counts, total reserved, active
bytes, per state), the peak of the active bytes replayed from each file's device trace, and
whether every torch.cuda._memory_viz view renders from each.
"""
import json
import os
import pickle
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "analyzer", "vramtrace")


STATE = {}  # the workload's model, optimizer and kept tensors: alive until the interpreter exits


def workload(snap_path):
    import torch

    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    torch.manual_seed(0)
    model = STATE["model"] = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(6)]).cuda()
    opt = STATE["opt"] = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kept = STATE["kept"] = []
    for step in range(12):
        x = torch.randn(96 + 8 * step, 1024, device="cuda")  # varying sizes: splits and reuse
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 3 == 0:
            kept.append(torch.empty((step + 1) << 20, dtype=torch.uint8, device="cuda"))
    del x
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()  # then nothing allocates or frees until teardown
    with open(snap_path, "wb") as f:
        pickle.dump(snap, f)
    print("VRAMTRACE_TRUTH " + json.dumps({"allocated": torch.cuda.memory_allocated(),
                                           "reserved": torch.cuda.memory_reserved(),
                                           "peak_allocated": torch.cuda.max_memory_allocated(),
                                           "torch_trace_entries": len(snap["device_traces"][0])}), flush=True)


def summary(snap):
    segs = [s for s in snap["segments"] if s.get("device", 0) == 0]
    blocks = [b for s in segs for b in s["blocks"]]
    states = {}
    for b in blocks:
        states[b["state"]] = states.get(b["state"], 0) + 1
    live = peak = 0
    actions = {}
    for e in (snap["device_traces"][0] if snap["device_traces"] else []):
        actions[e["action"]] = actions.get(e["action"], 0) + 1
        if e["action"] == "alloc":
            live += e["size"]
            peak = max(peak, live)
        elif e["action"] == "free_completed":
            live -= e["size"]
    return {"segments": len(segs), "blocks": len(blocks), "block_states": states,
            "reserved": sum(s["total_size"] for s in segs),
            "active": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "trace_entries": len(snap["device_traces"][0]) if snap["device_traces"] else 0,
            "trace_peak_active": peak, "trace_live_at_end": live, "actions": actions}


def views(snap):
    from torch.cuda import _memory_viz as mv

    out = {}
    for name, fn in (("segsum", lambda: mv.segsum(snap)), ("trace", lambda: mv.trace(snap)),
                     ("trace_plot", lambda: mv.trace_plot(snap)), ("segment_plot", lambda: mv.segment_plot(snap)),
                     ("segments", lambda: mv.segments(snap, format_flamegraph=lambda s: s)),
                     ("memory", lambda: mv.memory(snap, format_flamegraph=lambda s: s))):
        try:
            out[name] = "ok (%d chars)" % len(fn())
        except Exception as e:  # a view that throws is the finding
            out[name] = "FAILED: %s: %s" % (type(e).__name__, str(e)[:200])
    return out


def main(out):
    os.makedirs(out, exist_ok=True)
    trace, theirs, ours = (os.path.join(out, n) for n in ("memviz.vrt", "torch-snapshot.pickle", "memviz.pickle"))
    for p in (trace, theirs, ours):
        if os.path.exists(p):
            os.unlink(p)
    run = subprocess.run([VT, "run", "-q", "-o", trace, "--", sys.executable, os.path.abspath(__file__), "--workload",
                          theirs], capture_output=True, text=True, timeout=300)
    truth = json.loads(next(l for l in run.stdout.splitlines() if l.startswith("VRAMTRACE_TRUTH ")).split(" ", 1)[1])
    exp = subprocess.run([VT, "export", "--format", "memory-viz", "-q", trace, "-o", ours], capture_output=True,
                         text=True, timeout=300)
    with open(theirs, "rb") as f:
        t = pickle.load(f)
    with open(ours, "rb") as f:
        o = pickle.load(f)
    result = {"truth": truth, "run_stderr": run.stderr[-2000:], "export_stderr": exp.stderr[-2000:],
              "torch": summary(t), "vramtrace": summary(o), "torch_views": views(t), "vramtrace_views": views(o),
              "pickle_bytes": {"torch": os.path.getsize(theirs), "vramtrace": os.path.getsize(ours)}}
    keys = ("segments", "blocks", "reserved", "active", "trace_peak_active", "trace_live_at_end")
    result["equal"] = {k: result["torch"][k] == result["vramtrace"][k] for k in keys}
    with open(os.path.join(out, "memviz.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["%-18s %14s %14s %s" % ("", "torch", "vramtrace", "equal")]
    lines += ["%-18s %14s %14s %s" % (k, result["torch"][k], result["vramtrace"][k], result["equal"][k]) for k in keys]
    lines += ["block states: torch %s, vramtrace %s" % (result["torch"]["block_states"],
                                                        result["vramtrace"]["block_states"])]
    lines += ["trace actions: torch %s, vramtrace %s" % (result["torch"]["actions"], result["vramtrace"]["actions"])]
    lines += ["views torch: %s" % result["torch_views"], "views vramtrace: %s" % result["vramtrace_views"],
              "pickle bytes: %s" % result["pickle_bytes"], "truth: %s" % truth]
    text = "\n".join(lines)
    with open(os.path.join(out, "memviz.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0 if all(result["equal"].values()) and all(v.startswith("ok") for v in result["vramtrace_views"].values()) \
        else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--workload":
        workload(sys.argv[2])
    else:
        sys.exit(main(sys.argv[1]))
