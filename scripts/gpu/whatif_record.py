#!/usr/bin/env python3
"""Records the traces `vramtrace whatif` is checked against (tests/e2e/test_whatif.py).

    scripts/gpu/whatif_record.py OUTDIR [--steps N] [--cap BYTES]

One training run, six times under vramtrace: a transformers Llama built from a config (6 layers,
random weights, nothing downloaded) trained with AdamW under bf16 autocast on a fixed sequence of
batches whose lengths vary from step to step (dynamic padding: each batch padded to its own
longest sequence, the labels masked there), under three allocator settings (the default,
expandable_segments:True, max_split_size_mb:128), first uncapped, then all three under one
per-process cap (set_per_process_memory_fraction) between the default run's peak reserved and
the lowest peak of the three. Each run prints what PyTorch measured about itself on its
VRAMTRACE_TRUTH line: max_memory_reserved(), max_memory_allocated(), whether it ran out of
memory and at which step; it also writes the cap (bytes the allocator may reserve) and its
PyTorch version into the trace (INFO torch.allocator_limit, INFO torch).

OUTDIR gets 8 files: whatif-{default,expandable,split128}[-capped].vrt, whatif_truth.json (the
TRUTH.json entries, keyed by trace name) and whatif_summary.txt (what `vramtrace whatif` says
about each trace on the machine, and the settings predicted from the default run).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VT = os.path.join(ROOT, "build", "analyzer", "vramtrace")
SETTINGS = [("default", ""), ("expandable", "expandable_segments:True"), ("split128", "max_split_size_mb:128")]
# Sequence lengths of the fixed batches: the longest comes late, after shorter ones left the
# cache in pieces the next ones do not fit.
LENGTHS = [640, 1024, 512, 896, 768, 1024, 384, 960]
BATCH = 8
VOCAB = 32000


def record_info(key, value):
    fn = getattr(ctypes.CDLL(None), "vramtrace_record_info", None)
    if fn:
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        fn(key.encode(), str(value).encode())


def mark(label):
    fn = getattr(ctypes.CDLL(None), "vramtrace_mark", None)
    if fn:
        fn.argtypes = [ctypes.c_char_p]
        fn(label.encode())


def batches(steps):
    """The same token ids, lengths and padding in every run (CPU generator, fixed seed)."""
    import torch

    g = torch.Generator().manual_seed(1234)
    for step in range(steps):
        longest = LENGTHS[step % len(LENGTHS)]
        lengths = torch.randint(longest // 2, longest + 1, (BATCH,), generator=g)
        lengths[0] = longest
        ids = torch.randint(0, VOCAB, (BATCH, longest), generator=g)
        mask = (torch.arange(longest)[None, :] < lengths[:, None]).long()
        labels = ids.masked_fill(mask == 0, -100)
        yield step, ids, mask, labels


def child(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    record_info("torch", torch.__version__)
    limit = 0
    if args.cap:
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = args.cap / total
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
        limit = int(fraction * float(total))  # what the allocator computes from the fraction
        record_info("torch.allocator_limit", limit)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=16,
                      num_key_value_heads=16, vocab_size=VOCAB, max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    oom_step, done = None, 0
    for step, ids, mask, labels in batches(args.steps):
        mark("step %d" % step)
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(input_ids=ids.cuda(), attention_mask=mask.cuda(), labels=labels.cuda())
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del out
            done += 1
        except torch.OutOfMemoryError as e:
            oom_step = step
            print("OOM at step %d: %s" % (step, str(e).splitlines()[0]), flush=True)
            break
    torch.cuda.synchronize()
    mark("vramtrace-truth")
    print("VRAMTRACE_TRUTH " + json.dumps({
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "allocator_limit": limit,
        "max_memory_reserved": torch.cuda.max_memory_reserved(), "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "oom": oom_step is not None, "oom_step": oom_step, "steps_done": done, "torch": torch.__version__,
        "program": "scripts/gpu/whatif_record.py"}), flush=True)


def start_traced(out, name, conf, cap, steps):
    """Starts one traced run; the runs of one round go at once (each process has its own allocator
    and cap, so running beside another changes none of its requests)."""
    trace = os.path.join(out, name + ".vrt")
    if os.path.exists(trace):
        os.unlink(trace)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    argv = [VT, "run", "-q", "--keep-all", "--depth", "24", "-o", trace, "--", sys.executable, os.path.abspath(__file__),
            "--child", "--steps", str(steps)] + (["--cap", str(cap)] if cap else [])
    return name, trace, time.time(), subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                      text=True)


def finish_traced(started):
    name, trace, t0, p = started
    stdout, stderr = p.communicate(timeout=900)
    truth = None
    for line in stdout.splitlines():
        if line.startswith("VRAMTRACE_TRUTH "):
            truth = json.loads(line.split(" ", 1)[1])
    log = "%s: exit %d in %.0f s, %d bytes\n%s%s" % (name, p.returncode, time.time() - t0,
                                                      os.path.getsize(trace) if os.path.exists(trace) else -1,
                                                      stdout[-2000:], stderr[-2000:])
    return truth, log


def run_round(out, runs, steps):
    """runs: (name, conf, cap) each; returns {name: truth} and the logs."""
    started = [start_traced(out, name, conf, cap, steps) for name, conf, cap in runs]
    truths, logs = {}, []
    for s in started:
        truths[s[0]], log = finish_traced(s)
        logs.append(log)
    return truths, logs


def whatif(trace, *args):
    p = subprocess.run([VT, "whatif", "--json", "-q", *args, trace], capture_output=True, text=True, timeout=600)
    return json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr.strip()}


def line_of(name, d, truth=None):
    if "error" in d:
        return "%-26s error: %s" % (name, d["error"])
    c = d.get("check") or {}
    s = "%-26s peak reserved %12d allocated %12d fails_at %s" % (
        name, d["peak_reserved"], d["peak_allocated"],
        ("%.3f s" % d["fails_at"]["time"]) if d["fails_at"] else "-")
    if c:
        s += "  check: %d/%d requests differ, %d/%d blocks at their address" % (
            c["mismatched_requests"], c["requests"], c["blocks_at_recorded_address"], c["blocks"])
    if truth:
        s += "  torch: reserved %d allocated %d oom %s" % (truth["max_memory_reserved"], truth["max_memory_allocated"],
                                                            truth["oom"])
    return s


def parent(args):
    os.makedirs(args.out, exist_ok=True)
    truths, logs = run_round(args.out, [("whatif-" + tag, conf, 0) for tag, conf in SETTINGS], args.steps)
    peaks = {tag: (truths["whatif-" + tag] or {}).get("max_memory_reserved", 0) for tag, _ in SETTINGS}
    cap = args.cap or (peaks["default"] + min(peaks.values())) // 2
    capped, capped_logs = run_round(args.out, [("whatif-%s-capped" % tag, conf, cap) for tag, conf in SETTINGS],
                                    args.steps)
    truths.update(capped)
    logs += capped_logs
    with open(os.path.join(args.out, "whatif_truth.json"), "w") as f:
        json.dump(truths, f, indent=1)
    lines = ["uncapped peaks reserved: %s; the cap: %d bytes" % (peaks, cap), ""]
    for name in sorted(truths):
        lines.append(line_of(name, whatif(os.path.join(args.out, name + ".vrt")), truths[name]))
    lines.append("")
    lines.append("predicted from whatif-default:")
    default = os.path.join(args.out, "whatif-default.vrt")
    for tag, conf in SETTINGS:
        conf_args = ["--alloc-conf", conf] if conf else []
        lines.append(line_of("  " + (conf or "default"), whatif(default, *conf_args)))
        limit = (truths.get("whatif-%s-capped" % tag) or {}).get("allocator_limit") or cap
        lines.append(line_of("  %s, limit %d" % (conf or "default", limit),
                             whatif(default, *conf_args, "--allocator-limit", str(limit))))
    lines += ["", "---- logs ----"] + logs
    with open(os.path.join(args.out, "whatif_summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:len(truths) + 12]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--steps", type=int, default=len(LENGTHS))
    ap.add_argument("--cap", type=int, default=0, help="bytes the allocator may reserve in the capped runs")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
    elif args.out:
        parent(args)
    else:
        ap.error("give OUTDIR")


if __name__ == "__main__":
    main()
