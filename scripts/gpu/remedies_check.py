#!/usr/bin/env python3
"""Each remedy `vramtrace oom` proposes for the second user story, run for real (issue 21 item 5).

    scripts/gpu/remedies_check.py OUTDIR

The program is retention_scenarios.py's `ds-oom-offload`: real DeepSpeed ZeRO-2 with
`offload_optimizer`, a per-process cap of 0.04 of the device, the batch doubled from 1 until a
step fails. First it runs once under `vramtrace run` and `vramtrace oom --json` says, remedy by
remedy, whether the failing request (and the run up to it) would then fit. Then every remedy is
applied for real, each in its own process under `vramtrace run` (all at once: each has its own
allocator and cap), over the same batches up to the one that failed:

  baseline             as recorded (it must fail at the same batch again)
  no per-process cap   no set_per_process_memory_fraction
  expandable_segments:True, max_split_size_mb:128, max_split_size_mb:512  (PYTORCH_CUDA_ALLOC_CONF)
  empty_cache()        torch.cuda.empty_cache() before every forward
  activation checkpointing  model.gradient_checkpointing_enable()
  ZeRO-3 partitioning  stage 3, offload_optimizer kept
  offload_param        stage 3 with offload_param and offload_optimizer
  a smaller batch or sequence  the failing batch halved

Each prints one VRAMTRACE_REMEDY line: the batches that completed a whole step, and the first
that failed with where (forward, backward, step). OUTDIR gets remedies.txt (the predicted and
the measured side by side), remedies.json, and the traces with the logs (remedies.tar.gz).
"""
import argparse
import json
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VT = os.path.join(ROOT, "build", "analyzer", "vramtrace")
CAP = 0.04
SEQ = 1024

# remedy name as `oom --json` spells it -> (environment, program options)
REMEDIES = {
    "baseline": ({}, {}),
    "no per-process cap": ({}, {"cap": 0}),
    "expandable_segments:True": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, {}),
    "max_split_size_mb:128": ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, {}),
    "max_split_size_mb:512": ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}, {}),
    "empty_cache()": ({}, {"empty_cache": True}),
    "activation checkpointing": ({}, {"checkpointing": True}),
    "ZeRO-3 partitioning": ({}, {"stage": 3}),
    "offload_param": ({}, {"stage": 3, "offload_param": True}),
    "a smaller batch or sequence": ({}, {"halve_last": True}),
}


def child(opts):
    port = os.environ.get("MASTER_PORT", "29600")
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", port)):
        os.environ.setdefault(k, v)
    import torch
    import deepspeed

    sys.path.insert(0, HERE)
    from retention_scenarios import llama, VOCAB

    model = llama(hidden=1024, layers=8, inter=2816, heads=16)
    if opts.get("checkpointing"):
        model.gradient_checkpointing_enable()
    model = model.cuda()
    cap = opts.get("cap", CAP)
    if cap:
        torch.cuda.set_per_process_memory_fraction(cap)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    zero = {"stage": opts.get("stage", 2), "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    if opts.get("offload_param"):
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
           "zero_force_ds_cpu_optimizer": False, "steps_per_print": 1 << 30, "wall_clock_breakdown": False}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    batches = [1 << i for i in range(opts["last"].bit_length()) if (1 << i) <= opts["last"]]
    if opts.get("halve_last"):
        batches[-1] //= 2
    if opts.get("final"):  # the same batches, the last one replaced (the largest size that fits)
        batches[-1] = opts["final"]
    done, failed = [], None
    for batch in batches:
        ids = torch.randint(0, VOCAB, (batch, SEQ), device=engine.device)
        where = "forward"
        try:
            if opts.get("empty_cache"):
                torch.cuda.empty_cache()
            loss = engine(input_ids=ids, labels=ids).loss
            where = "backward"
            engine.backward(loss)
            where = "step"
            engine.step()
            torch.cuda.synchronize()
            done.append(batch)
        except torch.OutOfMemoryError as e:
            failed = {"batch": batch, "where": where, "message": str(e).splitlines()[0]}
            break
    print("VRAMTRACE_REMEDY " + json.dumps({
        "done": done, "failed": failed, "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated()}), flush=True)


def slug(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def last_line(stdout, tag):
    found = [json.loads(l.split(" ", 1)[1]) for l in stdout.splitlines() if l.startswith(tag + " ")]
    return found[-1] if found else None


def sizes(out, candidates):
    """Which sizes fit, for `oom`'s "the largest that fits is about N": batches 1, 2, 4, 8 and
    then each candidate in place of 16, untraced, side by side."""
    os.makedirs(out, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    procs = {n: subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child",
                                  json.dumps({"last": 16, "final": n})],
                                 env=dict(env, MASTER_PORT=str(29700 + n)), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n in candidates}
    rows = {}
    for n, p in procs.items():
        so, se = p.communicate(timeout=500)
        m = last_line(so, "VRAMTRACE_REMEDY")
        rows[n] = {"fits": bool(m and not m["failed"]), "measured": m, "exit": p.returncode}
        print("batch %d: %s" % (n, "fits" if rows[n]["fits"] else "OOM" if m else "no result: " + se[-300:]),
              flush=True)
    with open(os.path.join(out, "sizes.json"), "w") as f:
        json.dump(rows, f, indent=1)


def parent(out):
    os.makedirs(out, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    trace = os.path.join(out, "ds-oom-offload.vrt")
    rec = subprocess.run([VT, "run", "-q", "-f", "-o", trace, "--", sys.executable,
                          os.path.join(HERE, "retention_scenarios.py"), "ds-oom-offload"],
                         env=dict(env, MASTER_PORT="29590"), capture_output=True, text=True, timeout=500)
    logs = {"record": rec.stdout + "\n--- stderr ---\n" + rec.stderr}
    truth = last_line(rec.stdout, "VRAMTRACE_TRUTH") or {}
    last = int(truth.get("batch") or 16)
    oom = subprocess.run([VT, "oom", "--json", "-q", trace], capture_output=True, text=True, timeout=300)
    logs["oom"] = oom.stdout + "\n--- stderr ---\n" + oom.stderr
    predicted = {}
    if oom.returncode == 0:
        predicted = {m["name"]: m for m in json.loads(oom.stdout)["oom"].get("remedies", [])}
    procs, traces = {}, {}
    for i, (name, (extra_env, opts)) in enumerate(REMEDIES.items()):
        # traced too: where each real run failed, and whatif's check of its own setting
        traces[name] = os.path.join(out, "remedy-%s.vrt" % slug(name))
        argv = [VT, "run", "-q", "-f", "-o", traces[name], "--", sys.executable, os.path.abspath(__file__),
                "--child", json.dumps(dict(opts, last=last))]
        procs[name] = subprocess.Popen(argv, env=dict(env, MASTER_PORT=str(29600 + i), **extra_env),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    measured = {}
    for name, p in procs.items():
        so, se = p.communicate(timeout=500)
        logs[name] = "exit %d\n%s\n--- stderr ---\n%s" % (p.returncode, so, se[-4000:])
        measured[name] = last_line(so, "VRAMTRACE_REMEDY")
    rows = ["recorded run: %s; it failed at batch %d" % ("exit %d" % rec.returncode, last), "",
            "%-28s %-9s %-12s %-10s %s" % ("remedy", "predicted", "frees", "measured", "what the real run did")]
    for name in REMEDIES:
        m, p = measured.get(name), predicted.get(name)
        if m is None:
            real = "did not finish (see its log)"
            fits = "-"
        elif m["failed"]:
            real = "OOM at batch %d in %s; reserved peak %d" % (m["failed"]["batch"], m["failed"]["where"],
                                                               m["max_memory_reserved"])
            # the failing request fits when the run gets past it: a later phase of that batch or none
            fits = "fits" if m["failed"]["batch"] > last or m["failed"]["where"] != "forward" else "no"
        else:
            real = "batches %s done; reserved peak %d" % (m["done"], m["max_memory_reserved"])
            fits = "fits"
        rows.append("%-28s %-9s %-12s %-10s %s" % (name, ("fits" if p["fits"] else "no") if p else "-",
                                                    p["frees_bytes"] if p else "-", fits, real))
    text = "\n".join(rows) + "\n"
    print(text, flush=True)
    with open(os.path.join(out, "remedies.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "remedies.json"), "w") as f:
        json.dump({"truth": truth, "predicted": predicted, "measured": measured}, f, indent=1)
    with tarfile.open(os.path.join(out, "remedies.tar.gz"), "w:gz") as tar:
        for path in [trace] + list(traces.values()):
            if os.path.exists(path):
                tar.add(path, arcname=os.path.basename(path))
        for name, text in logs.items():
            path = os.path.join(out, "log-" + slug(name) + ".txt")
            with open(path, "w") as f:
                f.write(text)
            tar.add(path, arcname=os.path.basename(path))
            os.unlink(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help="only: which of these batch sizes (comma-separated) fit in place of 16")
    a = ap.parse_args()
    if a.child:
        child(json.loads(a.child))
    elif a.sizes and a.out:
        sizes(a.out, [int(x) for x in a.sizes.split(",")])
    elif a.out:
        parent(a.out)
    else:
        ap.error("give OUTDIR")


if __name__ == "__main__":
    main()
