#!/usr/bin/env python3
"""gpu_bench.py - vramtrace's overhead on a real GPU training loop (needs PyTorch and a CUDA GPU).

    python3 bench/gpu_bench.py PATH/TO/vramtrace [--json OUT.json] [--steps 50] [--warmup 15]
                               [--iters 100000] [--repeats 3] [--keep DIR] [--phase]
                               [--model gpt|llama] [--configs untraced,vramtrace,...]
                               [--preload NAME=PATH ...]

One invocation runs four configurations side by side, each in its own process, --repeats
times, rotating their order each time (after one untimed process that warms the GPU up, so
no configuration is always first); the table shows medians:

  untraced        plain python
  vramtrace       `vramtrace run -o T.vrt -- python ...`          (full tracing, default settings)
  vramtrace-armed `vramtrace run --armed -o T.vrt -- python ...`  (live set only, no stacks)
  torch-recorder  torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python"),
                  no vramtrace: PyTorch's own recorder, the usual alternative

and in each:

  step loop   a small GPT (6 layers, d_model 768, 12 heads, seq 512, batch 8, vocab 32768), AdamW,
              bf16 autocast; --warmup steps, then --steps timed in blocks of 10 with
              torch.cuda.synchronize() after each: median ms per step, and the ratio to untraced;
              --model llama: instead issue 17's transformers step (bench/ab.py's: LlamaForCausalLM,
              8 layers, hidden 1024, batch 8x512, bf16 weights, AdamW), which bench/ab.py can
              only compare with armed (one process cannot run untraced): this compares all with
              untraced, in separate processes
  microloop   --iters iterations (5 rounds) of torch.empty (4 sizes in turn, 1 KiB - 4 MiB) and
              its release: median us per alloc+free pair, and what each configuration adds
              (--steps 0: the microloop alone)

--preload NAME=PATH adds the configurations vramtrace@NAME and vramtrace-armed@NAME, which
use PATH's libvramtrace.so (VRAMTRACE_PRELOAD) instead: two builds of the preload side by side,
e.g. --preload base=/tmp/old/libvramtrace.so --configs untraced,vramtrace,vramtrace@base.

Every process is pinned to the same CPUs (--cpus, default 2,3: the Python thread and
vramtrace's collector), which takes most of the process-to-process noise out.

Prints a table, the preload's own messages (e.g. whether PyTorch tensor events were attached:
without them only CUDA segments are traced and the microloop shows ~no overhead), and writes
every number as JSON (--json). VRAMTRACE_PRELOAD in the environment picks the libvramtrace.so
that `vramtrace run` injects, as usual. Needs no network: the model is built
from random weights and trained on random tokens. Traces go to a temporary directory, deleted
at the end unless --keep DIR. --phase also passes `--phase train_step` to vramtrace (needs the
vramtrace Python package next to the binary) so phase events are in the full trace.

Anchors for reading the ratios: memray slows Python programs 1.45x (no native stacks) to 1.65x
(native stacks); PyTorch's recorder costs ~2 us per allocator event.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = ["untraced", "vramtrace", "vramtrace-armed", "torch-recorder"]


# ---- the worker: runs inside each configuration's process ------------------------------------

def worker(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device("cuda")

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.out = nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab=32768, d=768, layers=6, heads=12, seq=512):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

        def train_step(self, opt, idx, target):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = self(idx)
                loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), target.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

    if args.worker == "torch-recorder":
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")

    if args.steps == 0:
        step_ms, final_loss = None, None
    elif args.model == "llama":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import ab
        llama_steps = ab.workload("llama", None)[0]
        train_step = lambda: llama_steps(1)
    else:
        model = GPT().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        batch, seq, vocab = 8, 512, 32768
        idx = torch.randint(0, vocab, (batch, seq), device=dev)
        target = torch.randint(0, vocab, (batch, seq), device=dev)
        train_step = lambda: model.train_step(opt, idx, target)
    if args.steps:
        step_ms, final_loss = time_steps(args, train_step)

    # microloop: tensor allocations through the caching allocator
    sizes = [256, 16384, 262144, 1048576]  # float32 elements: 1 KiB, 64 KiB, 1 MiB, 4 MiB
    for i in range(1000):
        t = torch.empty(sizes[i % 4], device=dev)
        del t
    torch.cuda.synchronize()
    # Five rounds of iters/5; the median round.
    # CPU: the calling thread's, and the whole process's (vramtrace's collector included).
    rounds, cpu_rounds, proc_rounds, n = [], [], [], max(1, args.iters // 5)
    for _ in range(5):
        c0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
        for i in range(n):
            t = torch.empty(sizes[i & 3], device=dev)
            del t
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - w0) * 1e6 / n)
        cpu_rounds.append((time.thread_time() - c0) * 1e6 / n)
        proc_rounds.append((time.process_time() - p0) * 1e6 / n)
    micro_us, micro_cpu_us = statistics.median(rounds), statistics.median(cpu_rounds)

    if args.worker == "torch-recorder":
        torch.cuda.memory._record_memory_history(enabled=None)
    out = {"config": args.worker, "step_ms": step_ms, "loss": final_loss, "micro_us_per_pair": micro_us,
           "micro_cpu_us_per_pair": micro_cpu_us, "micro_process_cpu_us_per_pair": statistics.median(proc_rounds),
           "max_memory_allocated": torch.cuda.max_memory_allocated(),
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    print("GPU_BENCH_RESULT " + json.dumps(out), flush=True)


def time_steps(args, train_step):
    """--warmup steps, then --steps timed in blocks of 10; the median block resists a stray slow one."""
    import torch
    for _ in range(args.warmup):
        train_step()
    torch.cuda.synchronize()
    blocks = []
    for _ in range(max(1, args.steps // 10)):
        t0 = time.perf_counter()
        for _ in range(10):
            last = train_step()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - t0) * 100)
    return statistics.median(blocks), (float(last) if args.model == "gpt" else None)  # ab.py's step returns a count


# ---- the driver ----------------------------------------------------------------------------

def run_config(args, config, tmp, rep):
    me = os.path.abspath(__file__)
    kind, _, variant = config.partition("@")
    cmd = [sys.executable, me, "--worker", kind, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--iters", str(args.iters), "--model", args.model]
    trace = None
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("VRAMTRACE_") and k != "VRAMTRACE_PRELOAD":
            del env[k]
    if variant:
        env["VRAMTRACE_PRELOAD"] = args.preloads[variant]
    if kind.startswith("vramtrace"):
        trace = os.path.join(tmp, f"{config}.{rep}.vrt")
        pre = [args.vramtrace, "run", "-o", trace]
        if kind == "vramtrace-armed":
            pre.append("--armed")
        if args.phase and kind == "vramtrace":
            pre += ["--phase", "train_step"]
        cmd = pre + ["--"] + cmd
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.time() - t0
    lines = [l for l in r.stdout.splitlines() if l.startswith("GPU_BENCH_RESULT ")]
    if r.returncode or not lines:
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-4000:])
        raise SystemExit(f"gpu_bench: {config} failed with status {r.returncode}")
    res = json.loads(lines[-1].split(" ", 1)[1])
    res["process_wall_s"] = wall
    res["vramtrace_messages"] = [l for l in r.stderr.splitlines() if l.startswith("vramtrace")
                                 and "tracing to" not in l and "trace:" not in l]
    if trace and os.path.exists(trace):
        info = subprocess.run([args.vramtrace, "info", "--json", trace], capture_output=True, text=True)
        if info.returncode == 0:
            inf = json.loads(info.stdout)
            res["events_written"] = inf.get("events_written")
            res["events_lost"] = inf.get("events_lost")
            res["trace_bytes"] = os.path.getsize(trace)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("vramtrace", nargs="?", help="path of the vramtrace binary (build/analyzer/vramtrace)")
    p.add_argument("--json", help="write every measurement here")
    p.add_argument("--steps", type=int, default=60, help="timed steps (in blocks of 10)")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", help="keep the traces in this directory")
    p.add_argument("--phase", action="store_true")
    p.add_argument("--cpus", default="2,3", help="CPUs every configuration runs on (the same for all; '' = any)")
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt", help="the step timed (see above)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="which configurations, comma-separated")
    p.add_argument("--preload", action="append", default=[], metavar="NAME=PATH",
                   help="another libvramtrace.so, for the configurations vramtrace@NAME and vramtrace-armed@NAME")
    p.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.preloads = {}
    for item in args.preload:
        name, eq, path = item.partition("=")
        if not eq or not name or not os.path.isfile(path):
            p.error(f"--preload {item}: NAME=PATH of an existing libvramtrace.so")
        args.preloads[name] = os.path.abspath(path)
    known = CONFIGS + [f"{k}@{n}" for n in args.preloads for k in ("vramtrace", "vramtrace-armed")]
    configs = [c for c in args.configs.split(",") if c]
    if any(c not in known for c in configs) or "untraced" not in configs:
        p.error(f"--configs: names from {', '.join(known)}, untraced among them")
    if args.worker:
        worker(args)
        return 0
    if not args.vramtrace or not os.access(args.vramtrace, os.X_OK):
        p.error("give the path of the vramtrace binary")
    args.vramtrace = os.path.abspath(args.vramtrace)
    if args.cpus:
        want = {int(c) for c in args.cpus.split(",")} & os.sched_getaffinity(0)
        if want:
            os.sched_setaffinity(0, want)  # inherited by every configuration's process
    tmp = args.keep or tempfile.mkdtemp(prefix="vramtrace-gpu-bench-")
    os.makedirs(tmp, exist_ok=True)
    runs = {c: [] for c in configs}
    try:
        warm = argparse.Namespace(**vars(args))
        warm.steps, warm.warmup, warm.iters = min(args.steps, 10), 5, 10000
        run_config(warm, "untraced", tmp, -1)  # GPU clocks, driver, kernels' first-use costs
        for rep in range(args.repeats):
            for config in configs[rep % len(configs):] + configs[:rep % len(configs)]:
                res = run_config(args, config, tmp, rep)
                runs[config].append(res)
                step = f"step {res['step_ms']:.2f} ms, " if res["step_ms"] is not None else ""
                print(f"  [{time.strftime('%H:%M:%S')}] {config:16} {step}"
                      f"microloop {res['micro_us_per_pair']:.2f} us/pair", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    key = "step_ms" if args.steps else "micro_us_per_pair"  # what the spread of a configuration's runs is read on
    med = {c: summary(runs[c]) for c in configs}
    base = med["untraced"]
    first = runs["untraced"][0]
    step = ("transformers Llama (8x1024, batch 8x512, bf16, AdamW)" if args.model == "llama"
            else "small GPT (6x768, seq 512, batch 8, AdamW, bf16 autocast)")
    step = f"{step}, {args.steps} timed steps after {args.warmup}" if args.steps else "no step loop"
    print(f"vramtrace GPU benchmark: {first['gpu']}, PyTorch {first['torch']}; {step}; microloop "
          f"{args.iters} torch.empty+free; median of {args.repeats}")
    print(f"  {'configuration':22} {'step ms':>9} {'vs untraced':>12} {'best':>7} {'us/pair':>9} {'added us/pair':>14} "
          f"{'best':>6} {'process CPU added':>18} {'events':>10} {'lost':>6} {'trace B/event':>14}")
    for c in configs:
        m = med[c]
        last = runs[c][-1]
        ev = last.get("events_written")
        lost = last.get("events_lost")
        bpe = f"{last['trace_bytes'] / ev:.2f}" if ev else "-"
        untraced = c == "untraced"
        added = "" if untraced else f"{m['micro_us'] - base['micro_us']:+.3f}"
        best_added = "" if untraced else f"{m['best_micro_us'] - base['best_micro_us']:+.3f}"
        proc_added = "" if untraced else f"{m['micro_process_cpu_us'] - base['micro_process_cpu_us']:+.3f}"
        if m["step_ms"] is None:
            steps = f"{'-':>9} {'-':>12} {'-':>7}"
        else:
            steps = (f"{m['step_ms']:>9.2f} {m['step_ms'] / base['step_ms']:>11.3f}x "
                     f"{m['best_step_ms'] / base['best_step_ms']:>6.3f}x")
        print(f"  {c:22} {steps} {m['micro_us']:>9.3f} {added:>14} {best_added:>6} {proc_added:>18} "
              f"{ev if ev is not None else '-':>10} {lost if lost is not None else '-':>6} {bpe:>14}")
    print("  (median of the runs; 'best' compares the fastest run of each configuration; process CPU counts "
          "every thread, vramtrace's collector included)")
    for line in spread_verdict(runs, configs, key):
        print(line)
    print("  anchors: memray 1.45x (Python only) / 1.65x (native stacks) slowdown; "
          "PyTorch _record_memory_history ~2 us per event")
    seen = set()
    for c in configs:
        for r in runs[c]:
            for m in r.get("vramtrace_messages", []):
                m = m.split(":", 1)[1].strip() if ":" in m else m
                if (c, m) not in seen:
                    seen.add((c, m))
                    print(f"  {c}: {m}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median": med, "runs": runs, "args": {k: v for k, v in vars(args).items() if k != "worker"}},
                      f, indent=1)
    return 0


def summary(runs):
    """The medians (and bests) of one configuration's runs."""
    steps = [r["step_ms"] for r in runs if r["step_ms"] is not None]
    return {"step_ms": statistics.median(steps) if steps else None,
            "best_step_ms": min(steps) if steps else None,
            "best_micro_us": min(r["micro_us_per_pair"] for r in runs),
            "micro_us": statistics.median(r["micro_us_per_pair"] for r in runs),
            "micro_cpu_us": statistics.median(r["micro_cpu_us_per_pair"] for r in runs),
            "micro_process_cpu_us": statistics.median(r["micro_process_cpu_us_per_pair"] for r in runs)}


def spread_verdict(runs, configs, key="step_ms", decides=0.03):
    """What the run can decide: the widest spread among one configuration's own runs (slowest
    over fastest, of the step or, without one, of the microloop). Separate processes meet the
    host at different minutes; when one configuration's runs differ by more than the ratios in
    question (issue 17's 1.03x), the host's speed changed under the run and no ratio of this
    table is decided by it."""
    unit = "ms" if key == "step_ms" else "us/pair"
    spread = {c: max(r[key] for r in runs[c]) / min(r[key] for r in runs[c]) - 1
              for c in configs if len(runs[c]) >= 2}
    if not spread:
        return ["  one run of each configuration: how far the host's speed moved is not known (--repeats 2 or more)"]
    worst = max(spread, key=spread.get)
    lines = [f"  runs of one configuration differ by up to {spread[worst] * 100:.1f}% ({worst}: "
             f"{min(r[key] for r in runs[worst]):.2f}..{max(r[key] for r in runs[worst]):.2f} {unit})"]
    if spread[worst] > decides:
        lines.append(f"  UNDECIDED: more than {decides * 100:.0f}%: the host's speed changed during the run; "
                     "compare in one process (bench/ab.py) or rerun on a quiet host")
    return lines

if __name__ == "__main__":
    sys.exit(main())
