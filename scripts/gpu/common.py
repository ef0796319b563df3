"""Helpers shared by the GPU scripts."""
import ctypes
import json
import os
import subprocess

VT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "analyzer",
                  "vramtrace")


def mark(label):
    """Marks this instant in the trace when running under vramtrace (no-op otherwise)."""
    fn = getattr(ctypes.CDLL(None), "vramtrace_mark", None)
    if fn:
        fn.argtypes = [ctypes.c_char_p]
        fn(label.encode())


def truth(**kw):
    """Marks "vramtrace-truth" and prints the process's own figures for the verifier."""
    mark("vramtrace-truth")
    print("VRAMTRACE_TRUTH " + json.dumps(kw), flush=True)


def analyze_attached(trace):
    """What `leaks` and `report` say of an attached job's trace: the leaks JSON (or its error),
    the two texts, the tensor layer's live bytes at the end, the labelled sites from before the
    attach (PyTorch's snapshot, the unattributed rest), the categories at the end."""
    def vt(*args):
        return subprocess.run([VT, *args, trace], capture_output=True, text=True)

    leaks, text, report, rj = vt("leaks", "--json", "-q"), vt("leaks", "-q"), vt("report", "-q"), vt("report", "--json", "-q")
    rep = json.loads(rj.stdout) if rj.returncode in (0, 1) and rj.stdout.strip() else {}
    before = {}
    for site in rep.get("live_at_end", []):
        head = site.get("headline", {}).get("function", "")
        if head.startswith("[") and "before" in head:
            before[head.split(" at ")[0]] = before.get(head.split(" at ")[0], 0) + site["bytes"]
    return {"leaks": json.loads(leaks.stdout) if leaks.stdout.strip() else leaks.stderr,
            "leaks_text": text.stdout, "report_text": report.stdout,
            "tensors_live_at_end": (rep.get("tensors") or [{}])[0].get("live_bytes_at_end"),
            "before_attach": before, "categories_at_end": rep.get("categories_at_end")}


def save_attached(out, stem, attached, analysis, truth, **extra):
    """OUT/STEM.json (the analysis, what the job said of itself, what attach said) and OUT/STEM.txt
    (attach's answer, `leaks` and `report` as printed); prints the start of it."""
    said = attached.stdout + attached.stderr
    result = dict({k: v for k, v in analysis.items() if not k.endswith("_text")}, truth=truth, attach=said, **extra)
    with open(os.path.join(out, stem + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, stem + ".txt"), "w") as f:
        f.write(said + "\n" + analysis["leaks_text"] + "\n" + analysis["report_text"])
    print(said)
    print(analysis["leaks_text"][:5000])
    print("truth:", truth)


def line_of(job, text):
    """The line of a job's text that ends with text (a "# kept: WAY" marker)."""
    return next(n for n, line in enumerate(job.splitlines(), 1) if line.rstrip().endswith(text))


def kept_at(out, job, way):
    """leaks --json's survivors allocated at the job's line marked "# kept: WAY" (its job.py)."""
    line = line_of(job, f"# kept: {way}")
    return [s for s in out["survivors"]
            if any(f.get("file", "").endswith("job.py") and f.get("line") == line for f in s["frames"])]


def run_phase_job(vramtrace, job_text, prefix, phase="train"):
    """Runs job_text (a Python program that prints "entry N BYTES" at each call's entry) under
    `vramtrace run --phase PHASE` in a new temporary directory; prints what it said. Returns the
    process, the trace's path and the entries it printed."""
    import re
    import sys
    import tempfile

    vramtrace = os.path.abspath(vramtrace)  # the job runs in its own directory
    tmp = tempfile.mkdtemp(prefix=prefix)
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(job_text)
    trace = os.path.join(tmp, "t.vrt")
    r = subprocess.run([vramtrace, "run", "--phase", phase, "-o", trace, "--", sys.executable, job],
                       capture_output=True, text=True, timeout=400, cwd=tmp)
    print(r.stdout.strip())
    print(r.stderr.strip()[-3000:])
    entries = [int(m[1]) for m in re.finditer(r"^entry \d+ (\d+)$", r.stdout, re.M)]
    return r, trace, entries


def keep_trace(trace, name):
    """With --keep DIR on the command line, copies the trace to DIR/NAME (a fixture for the tests)."""
    import shutil
    import sys

    if "--keep" in sys.argv:
        shutil.copy(trace, os.path.join(sys.argv[sys.argv.index("--keep") + 1], name))


def leaks_of(vramtrace, trace, *args, as_json=False):
    """`vramtrace leaks -q ARGS TRACE`: its text, or its JSON parsed."""
    out = subprocess.run([vramtrace, "leaks", "-q", *(["--json"] if as_json else []), *args, trace],
                         capture_output=True, text=True).stdout
    return json.loads(out) if as_json else out
