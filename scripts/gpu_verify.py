#!/usr/bin/env python3
"""Checks, on a real GPU, that what vramtrace records equals what each framework says it holds.

Each scenario (scripts/gpu/scenario.py, scripts/gpu/static_alloc.cu) runs under `vramtrace run`,
marks the instant it measures itself ("vramtrace-truth") and prints its own figures; the trace is
then reported up to that mark and the two are compared.

usage: scripts/gpu_verify.py [--vramtrace PATH] [--out DIR] [--only NAME ...]
Prints a table and writes DIR/gpu_verify.json. Exit status 1 if a row that must match does not.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _replay():
    """tests/e2e/replay.py: the trace's records replayed by the format's rules, apart from the
    analyzer's model (a figure checked against it is not checked against itself)."""
    spec = importlib.util.spec_from_file_location("replay", os.path.join(ROOT, "tests", "e2e", "replay.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_traced(vt, out, name, argv, env_extra):
    trace = os.path.join(out, name + ".vrt")
    if os.path.exists(trace):
        os.unlink(trace)
    env = dict(os.environ, **env_extra)
    t0 = time.time()
    p = subprocess.run([vt, "run", "-o", trace, "--"] + argv, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.time() - t0
    truth = None
    for line in p.stdout.splitlines():
        if line.startswith("VRAMTRACE_TRUTH "):
            truth = json.loads(line[len("VRAMTRACE_TRUTH "):])
    with open(os.path.join(out, name + ".log"), "w") as f:
        f.write(p.stdout + "\n--- stderr ---\n" + p.stderr)
    if p.returncode != 0 or truth is None:
        return None, None, "exit %d: %s" % (p.returncode, p.stderr.strip().splitlines()[-3:] if p.stderr else "")
    rep = subprocess.run([vt, "report", "--json", "-q", "--top", "20", "--until-mark", "vramtrace-truth", trace],
                         capture_output=True, text=True)
    if rep.returncode != 0:
        return truth, None, "report failed: " + rep.stderr.strip()
    report = json.loads(rep.stdout)
    report["elapsed_s"] = elapsed
    report["trace"], report["vramtrace"] = trace, vt
    return truth, report, None


def device_live(report, kind="device", device=0, key="live_bytes_at_end"):
    for d in report.get("devices", []):
        if d["device"] == device and d["kind"] == kind:
            return d.get(key, 0)
    return 0


def tensors_live(report, device=0):
    for d in report.get("tensors", []):
        if d["device"] == device:
            return d["live_bytes_at_end"]
    return None


def row(name, what, traced, expected, must_match=True, note="", at_most=False):
    """One comparison; expected None: a figure shown for information, compared with nothing.
    at_most: expected is an upper bound."""
    ok = None if expected is None else traced <= expected if at_most else traced == expected
    return {"scenario": name, "what": what, "traced": traced, "truth": expected, "match": ok,
            "must_match": must_match and expected is not None, "note": note}


def check_torch(name, truth, report):
    rows = [row(name, "device bytes via PyTorch allocator vs memory_reserved()",
                device_live(report, key="pytorch_allocator_bytes"), truth["reserved"])]
    t = tensors_live(report)
    if name in ("torch-default", "torch-expandable", "torch-pinned"):
        rows.append(row(name, "tensor bytes vs memory_allocated()", t, truth["allocated"]))
    other = device_live(report) - device_live(report, key="pytorch_allocator_bytes")
    rows.append(row(name, "other CUDA allocations (not PyTorch's allocator)", other, None, False,
                    "cuBLAS/cuDNN handles etc.; shown for information"))
    return rows


def trace_fact(report, key):
    """A fact of the trace's header, as `vramtrace info --json` gives it (None: not there)."""
    p = subprocess.run([report["vramtrace"], "info", "--json", report["trace"]], capture_output=True, text=True)
    return json.loads(p.stdout).get(key) if p.returncode == 0 else None


def check_async(name, truth, report):
    return [row(name, "cudaMallocAsync live bytes vs memory_allocated()",
                device_live(report, key="pytorch_allocator_bytes") or device_live(report), truth["allocated"], True,
                "each tensor is one cudaMallocAsync; the pool's cache is not visible as allocations")]


def check_nocache(name, truth, report):
    return [row(name, "cudaMalloc live bytes vs live tensor storage",
                device_live(report, key="pytorch_allocator_bytes"), truth["tensor_storage_bytes"])]


def check_pinned(name, truth, report):
    rows = check_torch(name, truth, report)
    host = device_live(report, kind="host_pinned", device=-1)
    expected = truth["host_stats"].get("reserved_bytes.current", truth["host_stats"].get("allocated_bytes.current"))
    rows.append(row(name, "pinned host bytes vs host_memory_stats()", host, expected, expected is not None))
    return rows


def check_cupy(name, truth, report):
    return [row(name, "device bytes vs CuPy pool total_bytes()", device_live(report), truth["pool_total"])]


def site_bytes(report, needle):
    """Bytes live at the end in sites whose frames mention needle."""
    return sum(s["bytes"] for s in report.get("live_at_end", [])
               if any(needle in f["function"] or needle in f["module"] for f in s["frames"]))


def check_jax(name, truth, report):
    expected = truth.get("pool_bytes", truth.get("bytes_reserved"))
    return [row(name, "device bytes via XLA's device allocator vs its pool_bytes",
                site_bytes(report, "CudaDeviceAllocator"), expected, True, "XLA_PYTHON_CLIENT_PREALLOCATE=false"),
            row(name, "other device allocations (cuDNN handle)", device_live(report) - expected, None, False,
                "not part of XLA's pool; shown for information")]


def check_static(name, truth, report):
    return [row(name, "device bytes vs sizes the binary allocated", device_live(report), truth["device_bytes"]),
            row(name, "pinned host bytes", device_live(report, kind="host_pinned", device=-1), truth["pinned_bytes"])]


def check_nccl(name, truth, report):
    traced = device_live(report) - device_live(report, key="pytorch_allocator_bytes")
    nccl = site_bytes(report, "libnccl")
    replay = _replay()
    records = replay.Replay(report["trace"], report["vramtrace"], until="vramtrace-truth")
    in_records = records.held_bytes(lambda it: any(replay.frame_module(f).startswith("libnccl.so")
                                                   for f in it.frames))
    return [row(name, "NCCL's own device memory vs at most cudaMemGetInfo delta minus PyTorch's", traced,
                truth["meminfo_delta"] - truth["torch_reserved_delta"], True,
                "the delta also holds NCCL's module and context growth, which are no allocations", at_most=True),
            row(name, "attributed to libnccl vs libnccl-allocated items in the trace's records", nccl, in_records,
                True, "NCCL_CUMEM_ENABLE=%s" % truth.get("nccl_cumem"))]


SCENARIOS = [
    ("torch-default", ["scenario", "torch-default"], {}, check_torch),
    ("torch-expandable", ["scenario", "torch-expandable"], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
     check_torch),
    ("torch-async", ["scenario", "torch-async"], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, check_async),
    ("torch-nocache", ["scenario", "torch-nocache"], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, check_nocache),
    ("torch-pinned", ["scenario", "torch-pinned"], {}, check_pinned),
    ("jax", ["scenario", "jax"], {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, check_jax),
    ("cupy", ["scenario", "cupy"], {}, check_cupy),
    ("static-binary", ["static"], {}, check_static),
    ("nccl-cumem1", ["scenario", "nccl"], {"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "1"}, check_nccl),
    ("nccl-cumem0", ["scenario", "nccl"], {"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}, check_nccl),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramtrace", default=os.path.join(ROOT, "build", "analyzer", "vramtrace"))
    ap.add_argument("--static-binary", default=os.path.join(ROOT, ".carry", "static_alloc"))
    ap.add_argument("--out", default="gpu-verify")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name, argv, env, check in SCENARIOS:
        if a.only and name not in a.only:
            continue
        if argv[0] == "scenario":
            argv = [sys.executable, os.path.join(HERE, "gpu", "scenario.py")] + argv[1:]
        else:
            argv = [a.static_binary]
        truth, report, err = run_traced(a.vramtrace, a.out, name, argv, env)
        if err:
            rows.append({"scenario": name, "what": "run", "traced": None, "truth": None, "match": False,
                         "must_match": True, "note": err})
            continue
        rows.extend(check(name, truth, report))
        if check in (check_torch, check_pinned):  # PyTorch's caching allocator: its tensor layer read the release
            rows.append(row(name, "the trace's torch release vs torch.__version__", trace_fact(report, "torch"),
                            truth["torch"], True, "learned inside the first allocation's hook, kept until the file exists"))
    w = max(len(r["what"]) for r in rows)
    print("%-17s %-*s %15s %15s  %s" % ("scenario", w, "what", "traced", "truth", "match"))
    for r in rows:
        mark = "info" if r["match"] is None else "yes" if r["match"] else "NO" if r["must_match"] else "n/a"
        print("%-17s %-*s %15s %15s  %s %s" % (r["scenario"], w, r["what"], r["traced"], r["truth"], mark,
                                               ("(" + r["note"] + ")") if r["note"] else ""))
    with open(os.path.join(a.out, "gpu_verify.json"), "w") as f:
        json.dump(rows, f, indent=1)
    sys.exit(1 if any(r["must_match"] and not r["match"] for r in rows) else 0)


if __name__ == "__main__":
    main()
