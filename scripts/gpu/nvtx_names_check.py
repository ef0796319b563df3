#!/usr/bin/env python3
"""Phases named differently at every call, on PyTorch (docs/ux-audit.md #84): a small MLP trained
under torch.autograd.profiler.emit_nvtx, whose NVTX ranges carry each operator's sequence number
("aten::addmm, seq = 1234"), so that nearly every range is a phase name of its own. Runs the job
untraced and under `vramtrace run` with each preload given, and prints the wall time, the phase
names the trace holds and the events lost.

    python3 scripts/gpu/nvtx_names_check.py STEPS VRAMTRACE [OTHER_BUILD_DIR...]
"""
import os
import re
import subprocess
import sys
import tempfile
import time

JOB = r'''
import sys, torch
steps = int(sys.argv[1])
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 512, device="cuda")
with torch.autograd.profiler.emit_nvtx():
    for _ in range(steps):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
'''


def timed(cmd, env=None):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    return time.time() - t, r


def main():
    steps, vramtrace, others = sys.argv[1], sys.argv[2], sys.argv[3:]
    tmp = tempfile.mkdtemp(prefix="vt-nvtx-")
    s, r = timed([sys.executable, "-c", JOB, steps])
    print(f"untraced: {s:.2f} s (rc {r.returncode})")
    ok = r.returncode == 0
    for build in [None, *others]:
        out = os.path.join(tmp, f"t{len(os.listdir(tmp))}.vrt")
        env = dict(os.environ)
        if build:  # the analyzer runs the other build's preload
            env["VRAMTRACE_PRELOAD"] = os.path.join(build, "preload", "libvramtrace.so")
        s, r = timed([vramtrace, "run", "-q", "-o", out, "--", sys.executable, "-c", JOB, steps], env)
        info = subprocess.run([vramtrace, "info", out], capture_output=True, text=True).stdout
        dump = subprocess.run([vramtrace, "dump", "-q", out], capture_output=True, text=True).stdout
        names = len(set(re.findall(r' phase_enter +"([^"]*)"', dump)))
        lost = re.search(r"events +\d+ written, (\d+) lost", info)
        print(f"{build or 'this build'}: {s:.2f} s (rc {r.returncode}), {names} phase names, "
              f"{lost[1] if lost else '?'} events lost")
        if r.returncode:
            print(r.stderr[-1500:])
        ok &= r.returncode == 0 and names > 1000
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
