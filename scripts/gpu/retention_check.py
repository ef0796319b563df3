#!/usr/bin/env python3
"""Why memory survives, on a real GPU: runs scripts/gpu/retention_scenarios.py's programs under
`vramtrace run` and checks what `vramtrace leaks` and `vramtrace oom` say against what each
program says about itself.

usage: scripts/gpu/retention_check.py OUTDIR [--only NAME ...]
Writes OUTDIR/retention.txt and OUTDIR/retention.json (what goes into docs/gpu-results.md) and
OUTDIR/retention-traces.tar.gz (the traces and logs).
"""
import argparse
import json
import os
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VT = os.environ.get("VRAMTRACE", os.path.join(ROOT, "build", "analyzer", "vramtrace"))
SCENARIOS = os.path.join(HERE, "retention_scenarios.py")
LOG = []

# name, phase, extra `vramtrace run` options
RUNS = [
    ("ds-zero2", "train", []),
    ("ds-oom-offload", None, []),
    ("hf-history", "hf_train", []),
    ("accelerate", "train_accelerate", []),
    ("ds-zero2-offload", "train", []),
    ("ds-zero1", "train", []),
    ("ds-zero2-retain-off", "train", ["--retain", "off"]),
]


def say(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.append(line)


def traced(out, name, phase, extra):
    scenario = name.replace("-retain-off", "")
    trace = os.path.join(out, name + ".vrt")
    if os.path.exists(trace):
        os.unlink(trace)
    argv = [VT, "run", "-q", "-o", trace] + (["--phase", phase] if phase else []) + extra + \
           ["--", sys.executable, SCENARIOS, scenario]
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    secs = time.time() - t0
    with open(os.path.join(out, name + ".log"), "w") as f:
        f.write(p.stdout + "\n--- stderr ---\n" + p.stderr)
    found = [json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines() if l.startswith("VRAMTRACE_TRUTH ")]
    return trace, (found[-1] if found else None), p, secs


def vt(*args):
    p = subprocess.run([VT] + list(args), capture_output=True, text=True, timeout=600)
    return p


def leaks(trace, phase):
    p = vt("leaks", "--json", "-q", "--phase", phase, "--top", "50", trace)
    return json.loads(p.stdout) if p.stdout.strip() else None


def explained(survivors):
    """Bytes of non-persistent survivors by held_by_status, and the chains' roots."""
    by = {}
    roots = set()
    for s in survivors:
        if s["persistent"]:
            continue
        by[s["held_by_status"]] = by.get(s["held_by_status"], 0) + s["bytes"]
        for chain in s["held_by"]:
            roots.add(chain[0])
    return by, sorted(roots)


def check_repeated(out, name, phase, extra, result):
    trace, truth, p, secs = traced(out, name, phase, extra)
    row = {"name": name, "seconds": round(secs, 1), "returncode": p.returncode}
    result.append(row)
    if truth is None:
        row["error"] = "no truth line: " + p.stderr[-2000:]
        say("%s: FAILED to run (exit %d); see %s.log" % (name, p.returncode, name))
        return
    found = leaks(trace, phase)
    row["truth"] = truth
    row["entries_traced"] = [ph["live_bytes_at_entry"] for ph in found["phases"]]
    row["entries_exact"] = row["entries_traced"] == truth["allocated_at_entry"]
    row["growth_traced"] = found["growth_per_invocation_bytes"]
    row["summary"] = found["summary"]
    row["retention_walks"] = found.get("retention_walks")
    by, roots = explained(found["survivors"])
    row["survivor_bytes_by_status"] = by
    row["chain_roots"] = roots[:20]
    cats = {}
    for s in found["survivors"]:
        if not s["persistent"]:
            key = "%s (%s)" % (s["category"], s["decided_by"])
            cats[key] = cats.get(key, 0) + s["bytes"]
    row["survivor_bytes_by_category"] = cats
    top = sorted((s for s in found["survivors"] if not s["persistent"]), key=lambda s: -s["bytes"])[:8]
    row["top_survivors"] = [{"bytes": s["bytes"], "call": s["phase_index"], "category": s["category"],
                             "decided_by": s["decided_by"], "status": s["held_by_status"], "held_by": s["held_by"][:2],
                             "line": next(("%s:%d" % (f["file"].rsplit("/", 1)[-1], f["line"]) for f in s["frames"]
                                           if f["kind"] == "python"), "")} for s in top]
    text = vt("leaks", "-q", "--phase", phase, "--top", "8", trace).stdout
    with open(os.path.join(out, name + ".leaks.txt"), "w") as f:
        f.write(text)
    total = sum(by.values())
    held = by.get("found", 0) + by.get("unreachable", 0)
    say("%s: %d calls, entries exact=%s, growth traced %s vs memory_allocated %s; survivors %d B, %.1f%% explained"
        " (%s); walks %s; %s" % (name, len(row["entries_traced"]), row["entries_exact"], row["growth_traced"],
                                 truth["growth_per_call"], total, 100.0 * held / total if total else 100.0,
                                 by, row["retention_walks"], found["summary"]))
    for s in row["top_survivors"][:5]:
        say("   %12d B call %d %-16s %-8s %-11s %s <- %s" % (s["bytes"], s["call"], s["category"], s["decided_by"],
                                                          s["status"], " -> ".join(s["held_by"][0]) if s["held_by"]
                                                          else "-", s["line"]))


def check_oom(out, name, result):
    trace, truth, p, secs = traced(out, name, None, [])
    row = {"name": name, "seconds": round(secs, 1), "returncode": p.returncode}
    result.append(row)
    q = vt("oom", "--json", "-q", trace)
    if truth is None or not q.stdout.strip():
        row["error"] = "no truth or no oom: " + (p.stderr + q.stderr)[-2000:]
        say("%s: FAILED (see %s.log)" % (name, name))
        return
    oom = json.loads(q.stdout)["oom"]
    row["truth"] = truth
    row["categories"] = oom["categories"]
    row["host_categories"] = oom["host_categories"]
    row["limit"] = oom["limit"]
    row["retention_walk"] = oom["retention_walk"]
    row["tensor_bytes"] = oom["tensor_bytes"]
    with open(os.path.join(out, name + ".oom.txt"), "w") as f:
        f.write(vt("oom", "-q", trace).stdout)
    cats = {c["name"]: c for c in oom["categories"]}
    hosts = {c["name"]: c["bytes"] for c in oom["host_categories"]}
    say("%s: OOM at batch %s; tensors %d vs memory_allocated %d; limit %s (allowed %s vs %s); walk %s" % (
        name, truth.get("batch"), oom["tensor_bytes"], truth.get("allocated", -1), oom["limit"] and oom["limit"]["kind"],
        oom["limit"] and oom["limit"]["allowed_bytes"], truth.get("allowed"), oom["retention_walk"]))
    for c in oom["categories"]:
        say("   %-16s %12d B  identity %12d  rule %12d" % (c["name"], c["bytes"], c["identity_bytes"], c["rule_bytes"]))
    say("   pinned host: %s" % hosts)
    say("   truth: parameters %s, gradients %s, optimizer on device %s, optimizer pinned %s, inputs %s" % (
        truth.get("parameters"), truth.get("gradients"), truth.get("optimizer_device"), truth.get("optimizer_pinned"),
        truth.get("inputs")))
    row["largest_is_activations"] = bool(oom["categories"]) and oom["categories"][0]["name"] == "activations"
    row["parameters_traced"] = cats.get("parameters", {}).get("bytes", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; scenarios that would start later are skipped")
    a = ap.parse_args()
    start = time.time()
    os.makedirs(a.out, exist_ok=True)
    result = []
    for name, phase, extra in RUNS:
        if a.only and name not in a.only:
            continue
        if time.time() - start > a.budget:
            say("%s: skipped (the time budget is spent)" % name)
            continue
        try:
            if phase is None:
                check_oom(a.out, name, result)
            else:
                check_repeated(a.out, name, phase, extra, result)
        except Exception as e:  # keep going: every scenario's figures are worth having
            say("%s: checker error %s: %s" % (name, type(e).__name__, e))
            result.append({"name": name, "error": str(e)})
    with open(os.path.join(a.out, "retention.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(a.out, "retention.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")
    with tarfile.open(os.path.join(a.out, "retention-traces.tar.gz"), "w:gz") as tar:
        for n in sorted(os.listdir(a.out)):
            if n.endswith((".vrt", ".log", ".txt")) and n != "retention.txt":
                path = os.path.join(a.out, n)
                if os.path.getsize(path) < (12 << 20):
                    tar.add(path, arcname=n)
                os.unlink(path)


if __name__ == "__main__":
    main()
