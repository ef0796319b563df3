#!/usr/bin/env python3
"""The retry inside the except block, on a GPU: a training step runs out of memory after its
forward made activations; the handler retries with a smaller batch before its block ends, so
the failed step's frames (and their activations) are still the exception's, and the retry runs
out of memory too. Under `vramtrace run`, `vramtrace oom` (the last OOM, the retry's) must say
that the exception being handled keeps the failed step's activations, and where it is handled.
Prints the report and PASS/FAIL.

    python3 scripts/gpu/retry_oom_check.py [VRAMTRACE [--keep DIR]]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

JOB = r'''import sys, torch
torch.cuda.set_per_process_memory_fraction(6 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()

def step(batch):
    x = torch.randn(batch, 4096, device="cuda")
    loss = model(x).square().mean()  # activations saved for backward, then more than the cap
    loss.backward()

try:
    step(65536)
except torch.cuda.OutOfMemoryError:
    print("first attempt failed", flush=True)
    try:
        step(32768)  # retried inside the block: the failed step's activations are still held
    except torch.cuda.OutOfMemoryError:
        print("the retry failed too", flush=True)
print("python", sys.version.split()[0], "torch", torch.__version__, flush=True)
'''


def main():
    vramtrace = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else
                                os.path.join(os.path.dirname(__file__), "..", "..", "build", "analyzer", "vramtrace"))
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    tmp = tempfile.mkdtemp(prefix="retry-oom-")
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    trace = os.path.join(tmp, "t.vrt")
    r = subprocess.run([vramtrace, "run", "-o", trace, "--", sys.executable, job], capture_output=True, text=True,
                       timeout=300, cwd=tmp)
    print(r.stdout.strip())
    print(r.stderr.strip()[-2000:])
    text = subprocess.run([vramtrace, "oom", "-q", trace], capture_output=True, text=True).stdout
    print(text)
    out = json.loads(subprocess.run([vramtrace, "oom", "-q", "--json", trace], capture_output=True, text=True).stdout)
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(trace, os.path.join(keep, "retry-oom.vrt"))
    lines = JOB.splitlines()
    retried = next(n for n, line in enumerate(lines, 1) if line.strip().startswith("step(32768)"))
    said = "exception being handled in <module> at job.py:%d" % retried
    quiet = "Warning" not in r.stderr  # the walk must not make PyTorch warn in the program's stderr
    in_json = any(said in root["root"] for root in out.get("oom", {}).get("kept_alive_by", []))
    ok = "the retry failed too" in r.stdout and said in text and in_json and quiet
    print("retry_oom_check: %s (wanted %r in the report%s)" % (
        "PASS" if ok else "FAIL", said, "" if quiet else "; the job's stderr has a warning"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
