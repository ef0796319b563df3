#!/usr/bin/env python3
"""ab.py - vramtrace's overhead measured inside one process that switches modes (issue 17, item 1).

    python3 bench/ab.py c      --build BUILD [--deep] [--pairs 20000] [--blocks 60] [--json OUT]
    python3 bench/ab.py python --build BUILD [--workload ctypes|torch-micro|torch-tiny|llama]
                               [--units N] [--blocks 40] [--recorder] [--split] [--json OUT]

Separate-process timings of one step were too noisy to tell 1.02x from 1.10x (bench/NOTES.md).
Here the same process runs many short intervals, switching vramtrace between full tracing and
armed (live set only) through its control socket (include/vramtrace/control.h: START, ARM)
before each one; each block runs one interval per mode in a shuffled order plus an empty one
(the control request's own cost, subtracted). An interval is

    request START (full) or ARM (others)   -- the collector drains what came before
    t0; the work; request ARM; t1          -- the interval's own events drained and written

so t1 - t0 holds the collector's work on those events (process CPU time, all threads) as well
as the hooks'. Modes:

  full     vramtrace records everything (stacks as configured)
  armed    vramtrace keeps its live set only
  raw      (c, python --workload ctypes) the same loop calling the null runtime's unhooked
           aliases (bench/null_cudart.c): untraced, in this process
  recorder (--recorder, torch workloads) PyTorch's _record_memory_history(stacks="all") on for
           the interval, vramtrace armed; the same process, the same work

--split runs the workload once per stack setting (everything; no stacks; native frames only;
Python frames only: VRAMTRACE_STACK_DEPTH and VRAMTRACE_PYTHON), each in its own process, and
prints one table of full against armed: what each part of a stack costs the step.

Reported per mode against the reference (raw where there is one, else armed): the ratio of
interval times and the time added per unit (pair, step), each as the median over blocks with its
interquartile range and a bootstrap 95% confidence interval of the median (2000 resamples, fixed
seed). Process CPU time decides CPU-bound work; for GPU steps read wall time (host overhead
shows in it only when the host is the bottleneck, which is the question). The torch workloads
synchronize the device at the end of every interval.

On this CPU (no GPU): `c` (ab_loop over bench/null_cudart.c) and `python --workload ctypes`.
On the H200, the same script (see bench/README.md):

    python3 bench/ab.py python --build build --workload torch-micro --recorder
    python3 bench/ab.py python --build build --workload torch-tiny  --recorder
    python3 bench/ab.py python --build build --workload llama       --recorder --units 5
"""
import argparse
import json
import os
import random
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

CTL_MAGIC, CTL_VERSION = 0x4C544356, 1
CTL_START, CTL_ARM, CTL_REPLY = 2, 3, 128
HEADER = struct.Struct("<IHHIi")  # struct vrt_ctl_header
LINE = re.compile(r"interval block=(\d+) mode=(\w+) (?:pairs|units)=(\d+) proc_ns=(\d+) thread_ns=(\d+) wall_ns=(\d+)")


# ---- statistics ----------------------------------------------------------------------------------

def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[1], q[2]


def bootstrap_median_ci(xs, resamples=2000, seed=17):
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def summarize(intervals, reference, clock):
    """Per mode: ratio to the reference and time added per unit, over the blocks that ran both."""
    by_block = {}
    for iv in intervals:
        by_block.setdefault(iv["block"], {})[iv["mode"]] = iv
    modes = sorted({iv["mode"] for iv in intervals} - {"empty", reference})
    out = {}
    for mode in modes:
        ratios, added = [], []
        for blk in by_block.values():
            if mode not in blk or reference not in blk:
                continue
            empty = blk["empty"][clock] if "empty" in blk else 0
            m, r = blk[mode][clock] - empty, blk[reference][clock] - empty
            if r > 0:
                ratios.append(m / r)
            added.append((m - r) / max(blk[mode]["units"], 1))
        if not ratios:
            continue
        out[mode] = {"blocks": len(ratios), "ratio": stat(ratios), "added_ns": stat(added)}
    return out


def stat(xs):
    q1, med, q3 = quartiles(xs)
    lo, hi = bootstrap_median_ci(xs)
    return {"median": med, "q1": q1, "q3": q3, "ci95": [lo, hi]}


def print_summary(title, summary, reference, clock, unit):
    print(f"{title}: against {reference}, {clock.replace('_ns', '')} time, median [IQR] (bootstrap 95% CI of the median)")
    for mode, s in summary.items():
        r, a = s["ratio"], s["added_ns"]
        print(f"  {mode:9s} ratio {r['median']:8.4f}x [{r['q1']:.4f}..{r['q3']:.4f}] ({r['ci95'][0]:.4f}..{r['ci95'][1]:.4f})"
              f"   added {a['median']:+9.1f} ns/{unit} [{a['q1']:+.1f}..{a['q3']:+.1f}] ({a['ci95'][0]:+.1f}..{a['ci95'][1]:+.1f})"
              f"   n={s['blocks']}")


def parse(text):
    ivs = []
    for m in LINE.finditer(text):
        ivs.append({"block": int(m[1]), "mode": m[2], "units": int(m[3]), "proc_ns": int(m[4]),
                    "thread_ns": int(m[5]), "wall_ns": int(m[6])})
    return ivs


def traced_env(build, tmp):
    env = dict(os.environ)
    env["LD_PRELOAD"] = os.path.join(build, "preload", "libvramtrace.so")
    env["LD_LIBRARY_PATH"] = os.path.join(build, "bench") + ":" + env.get("LD_LIBRARY_PATH", "")
    env["VRAMTRACE_OUTPUT"] = os.path.join(tmp, "ab.vrt")
    env.setdefault("VRAMTRACE_QUIET", "1")
    env.setdefault("VRAMTRACE_RING", "0")  # keep-all: nothing is dropped for a ring's sake
    return env


def report(args, intervals, reference, unit):
    clocks = ["proc_ns", "wall_ns"] if args.cmd == "python" and args.workload != "ctypes" else ["proc_ns", "thread_ns"]
    result = {"args": vars(args), "reference": reference, "intervals": intervals}
    for clock in clocks:
        s = summarize(intervals, reference, clock)
        print_summary(f"{args.cmd} {args.workload if args.cmd == 'python' else 'deep' if args.deep else 'flat'}",
                      s, reference, clock, unit)
        result[clock] = s
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


# ---- c: bench/ab_loop over the null runtime --------------------------------------------------------

def run_c(args):
    with tempfile.TemporaryDirectory(prefix="vt-ab-") as tmp:
        cmd = [os.path.join(args.build, "bench", "ab_loop"), "deep" if args.deep else "flat", str(args.pairs),
               str(args.blocks), str(args.seed), "full,armed,raw"]
        p = subprocess.run(cmd, env=traced_env(args.build, tmp), capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"ab.py: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    report(args, parse(p.stdout), "raw", "pair")


# ---- python: this script again, inside the traced process ------------------------------------------

class Control:
    """The control channel's client side (preload/control_client.c's, in Python), to this process."""

    def __init__(self):
        self.pid = os.getpid()

    def _connect(self):
        names = ["\0vramtrace.%d" % self.pid]
        uid = os.getuid()
        names += [d + "/ctl.%d" % self.pid for d in (["/run/vramtrace"] if uid == 0 else []) +
                  ["/tmp/vramtrace-%d" % uid, "/dev/shm/vramtrace-%d" % uid]]
        for name in names:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(name)
                return s
            except OSError:
                s.close()
        sys.exit("ab.py: no vramtrace control socket in this process (is it run under the preload?)")

    def request(self, type_):
        with self._connect() as s:
            s.settimeout(30)
            s.send(HEADER.pack(CTL_MAGIC, CTL_VERSION, type_, 0, 0))
            reply = s.recv(HEADER.size + 4097)
        magic, _, rtype, _, status = HEADER.unpack_from(reply)
        if magic != CTL_MAGIC or rtype != CTL_REPLY or status:
            sys.exit(f"ab.py: control request {type_} refused (status {status})")


def workload(name, build):
    """(run(n) -> units done, raw_run(n) or None, sync, recorder (on, off) or None)."""
    if name == "ctypes":
        import ctypes
        rt = ctypes.PyDLL(os.path.join(build, "bench", "libcudart.so.13"))
        for fn in ("cudaMalloc", "vrt_bench_raw_malloc"):
            getattr(rt, fn).argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        for fn in ("cudaFree", "vrt_bench_raw_free"):
            getattr(rt, fn).argtypes = [ctypes.c_void_p]
        if rt.cudaSetDevice(0):
            sys.exit("ab.py: cudaSetDevice failed")
        ptr = ctypes.c_void_p()
        ref = ctypes.byref(ptr)

        def chain(depth, malloc, free, n):  # 20 Python frames, as bench/hotpath_py.py
            if depth:
                return chain(depth - 1, malloc, free, n)
            for _ in range(n):
                malloc(ref, 4096)
                free(ptr)
            return n
        hooked = lambda n: chain(20, rt.cudaMalloc, rt.cudaFree, n)
        raw = lambda n: chain(20, rt.vrt_bench_raw_malloc, rt.vrt_bench_raw_free, n)
        return hooked, raw, lambda: None, None

    import torch
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    rec = (lambda: torch.cuda.memory._record_memory_history(max_entries=100000, stacks="all"),
           lambda: torch.cuda.memory._record_memory_history(enabled=None))
    if name == "torch-micro":  # allocator events with host overhead only: bench/gpu_bench.py's microloop
        sizes = [256, 65536, 1 << 18, 1 << 20]

        def micro(n):
            for i in range(n):
                t = torch.empty(sizes[i & 3], device=dev)
                del t
            return n
        return micro, None, sync, rec
    if name == "torch-tiny":  # a step of tiny kernels: host-bound, ~100 allocator events
        w = [torch.randn(64, 64, device=dev, requires_grad=True) for _ in range(16)]
        opt = torch.optim.AdamW(w, lr=1e-3)

        def tiny(n):
            for _ in range(n):
                x = torch.randn(32, 64, device=dev)
                for p in w:
                    x = torch.tanh(x @ p)
                x.sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return n
        return tiny, None, sync, rec
    if name == "llama":  # issue 17's transformers step: 8 layers, hidden 1024, batch 8x512, bf16, AdamW
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                          num_key_value_heads=16, vocab_size=32000, max_position_embeddings=512)
        model = LlamaForCausalLM(cfg).to(dev, dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, cfg.vocab_size, (8, 512), device=dev)

        def step(n):
            for _ in range(n):
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return n
        return step, None, sync, rec
    sys.exit(f"ab.py: unknown workload {name}")


def worker(args):
    ctl = Control()
    run, raw, sync, rec = workload(args.workload, args.build)
    modes = ["full", "armed"] + (["raw"] if raw else []) + (["recorder"] if args.recorder and rec else []) + ["empty"]
    rng = random.Random(args.seed)
    run(1)  # the first event opens the trace, which START needs
    sync()
    for warm in ("full", "armed"):  # fills the stack caches; the first interval pays no first-touch
        ctl.request(CTL_START if warm == "full" else CTL_ARM)
        run(max(args.units // 4, 1))
        if raw:
            raw(max(args.units // 4, 1))
        sync()
    for b in range(args.blocks):
        rng.shuffle(modes)
        for mode in modes:
            fn = raw if mode == "raw" else run
            n = 0 if mode == "empty" else args.units
            if mode == "recorder":
                rec[0]()
            ctl.request(CTL_START if mode == "full" else CTL_ARM)
            w0, t0, p0 = time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()
            if n:
                fn(n)
            sync()
            t1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            ctl.request(CTL_ARM)
            p1 = time.process_time_ns()
            if mode == "recorder":
                rec[1]()
            print(f"interval block={b} mode={mode} units={n} proc_ns={p1 - p0} thread_ns={t1 - t0} wall_ns={w1 - w0}",
                  flush=True)


def run_worker(args, extra_env=None):
    """The worker's intervals, in a traced process with extra_env on top."""
    with tempfile.TemporaryDirectory(prefix="vt-ab-") as tmp:
        cmd = [sys.executable, os.path.abspath(__file__), "worker", "--build", args.build, "--workload", args.workload,
               "--units", str(args.units), "--blocks", str(args.blocks), "--seed", str(args.seed)]
        if args.recorder:
            cmd.append("--recorder")
        env = traced_env(args.build, tmp)
        env.update(extra_env or {})
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"ab.py: worker failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return parse(p.stdout)


# What --split runs: the stack settings that tell the parts of a stack's cost apart.
SPLITS = (("everything", {}),
          ("no stacks", {"VRAMTRACE_STACK_DEPTH": "0", "VRAMTRACE_PYTHON": "0"}),
          ("native frames only", {"VRAMTRACE_PYTHON": "0"}),
          ("Python frames only", {"VRAMTRACE_STACK_DEPTH": "0"}))


def run_split(args, reference, unit):
    clock = "proc_ns" if args.workload == "ctypes" else "wall_ns"
    print(f"python {args.workload}: full against {reference}, {clock.replace('_ns', '')} time, one process each, "
          f"median [IQR] (bootstrap 95% CI of the median)")
    result = {"args": vars(args), "reference": reference, "clock": clock, "splits": {}}
    scale, per = (1e6, "ms") if unit == "step" else (1, "ns")
    for name, env in SPLITS:
        s = summarize(run_worker(args, env), reference, clock)["full"]
        r, a = s["ratio"], s["added_ns"]
        print(f"  {name:19s} ratio {r['median']:7.4f}x ({r['ci95'][0]:.4f}..{r['ci95'][1]:.4f})   "
              f"added {a['median'] / scale:+9.2f} {per}/{unit} [{a['q1'] / scale:+.2f}..{a['q3'] / scale:+.2f}]"
              f"   n={s['blocks']}", flush=True)
        result["splits"][name] = s
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


def run_python(args):
    reference = "raw" if args.workload == "ctypes" else "armed"
    unit = "pair" if args.workload in ("ctypes", "torch-micro") else "step"
    if args.split:
        run_split(args, reference, unit)
        return
    report(args, run_worker(args), reference, unit)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["c", "python", "worker"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--deep", action="store_true", help="c: pairs from the bottom of a 40-frame chain")
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--workload", default="ctypes")
    ap.add_argument("--units", type=int, default=0, help="python: pairs or steps per interval")
    ap.add_argument("--blocks", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--recorder", action="store_true")
    ap.add_argument("--split", action="store_true", help="python: once per stack setting, one table")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if not args.units:
        args.units = {"ctypes": 5000, "torch-micro": 5000, "torch-tiny": 20, "llama": 5}.get(args.workload, 10)
    if not args.blocks:
        args.blocks = 60 if args.cmd == "c" else 40
    {"c": run_c, "python": run_python, "worker": worker}[args.cmd](args)


if __name__ == "__main__":
    main()
