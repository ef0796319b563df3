#!/usr/bin/env python3
"""The hot path's unwinder against libunwind on real PyTorch (issue 17, item 2).

    python3 scripts/gpu/unwind_check.py OUT

Runs one small training job twice under `vramtrace run`: with the call-frame walk and its
per-thread memos (the default) and with VRAMTRACE_FAST_UNWIND=0 (libunwind for every native
stack). The job allocates from Python (forward, optimizer), from the autograd engine's own thread
(backward: C++ frames only) and from cuBLAS. Every event must carry the same frames in both
traces (`dump --stacks`; a frame without a symbol as module+offset, since libraries may load at
other addresses). Prints the counts and the first differences; exit 1 if any event differs.
"""
import os
import re
import subprocess
import sys

from common import VT

JOB = r"""
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(6):
    x = torch.randn(64, 512, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print("done", flush=True)
"""


def stacks(trace):
    tables = subprocess.run([VT, "dump", "-q", "--tables", trace], capture_output=True, text=True).stdout
    bases = {os.path.basename(m[1]): int(m[2], 16)
             for m in re.finditer(r"^module \d+ (\S+) base=0x([0-9a-f]+)", tables, re.M)}
    text = subprocess.run([VT, "dump", "-q", "--stacks", trace], capture_output=True, text=True).stdout
    out, event, frames = [], None, []
    for line in text.splitlines() + [""]:
        m = re.match(r"^    #\d+ (.*)$", line)
        if m:
            raw = re.match(r"^0x([0-9a-f]+) \((.+)\)$", m[1])
            frames.append(f"{raw[2]}+{int(raw[1], 16) - bases[raw[2]]:#x}" if raw and raw[2] in bases else m[1])
            continue
        if event is not None and frames:
            out.append((event, tuple(frames)))
        fields = line.split()
        keep = [f for f in fields[1:] if not f.startswith(("addr=", "stack=", "alloc_stack=", "aux=", "stream="))]
        event = " ".join(keep) if len(fields) > 2 and re.match(r"^\d+\.\d+$", fields[0]) else None
        frames = []
    return sorted(out)  # the autograd thread interleaves with the main one differently each run


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    job = os.path.join(out, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    traces = {}
    for name, fast in (("fast", "1"), ("libunwind", "0")):
        traces[name] = os.path.join(out, f"unwind-{name}.vrt")
        env = dict(os.environ, VRAMTRACE_FAST_UNWIND=fast, VRAMTRACE_RING="0")
        p = subprocess.run([VT, "run", "-q", "-o", traces[name], "--", sys.executable, job], env=env,
                           capture_output=True, text=True)
        print(name, "exit", p.returncode, p.stdout.strip(), p.stderr.strip()[-500:])
    a, b = stacks(traces["fast"]), stacks(traces["libunwind"])
    differ = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    depth = sum(len(f) for _, f in a) / max(len(a), 1)
    print(f"events with a stack: fast {len(a)}, libunwind {len(b)}; {differ} differ; {depth:.1f} frames on average")
    for x, y in [(x, y) for x, y in zip(a, b) if x != y][:3]:
        print("fast:     ", x)
        print("libunwind:", y)
    return 1 if differ or not a else 0


if __name__ == "__main__":
    sys.exit(main())
