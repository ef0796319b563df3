#!/usr/bin/env python3
"""Code reborn at a dead code object's address, on PyTorch (docs/ux-audit.md #79): a job makes
12 functions with exec, each allocating a tensor of its own size ((i + 1) MiB) and dropping the
function, so that code objects die and the next takes the address. Under `vramtrace run`, the
stack of every tensor (the block whose request is (i + 1) MiB) must name its own function
(fn_i in gen_i.py), and Python stacks must be on (the preload wraps PyCode_Type's deallocator;
it says "Python stacks off" where it cannot). Prints the sites and PASS/FAIL.

    python3 scripts/gpu/reborn_check.py [VRAMTRACE]   (default build/analyzer/vramtrace)
"""
import os
import re
import subprocess
import sys
import tempfile

JOB = r'''
import gc, sys, time, torch
torch.ones(1, device="cuda")
kept = []
def alloc(n):
    kept.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
reused = set()
for i in range(12):
    ns = {"alloc": alloc}
    exec(compile(f"def fn_{i}(n):\n    alloc(n)\n", f"gen_{i}.py", "exec"), ns)
    reused.add(id(ns[f"fn_{i}"].__code__))
    ns[f"fn_{i}"]((i + 1) << 20)
    time.sleep(0.2)
    del ns
    gc.collect()
print("addresses", len(reused), "python", sys.version.split()[0], flush=True)
'''


def main():
    vramtrace = sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace"
    tmp = tempfile.mkdtemp(prefix="vt-reborn-")
    trace = os.path.join(tmp, "t.vrt")
    r = subprocess.run([vramtrace, "run", "-o", trace, "--", sys.executable, "-c", JOB], capture_output=True,
                       text=True, env=dict(os.environ, VRAMTRACE_FLUSH_MS="10"), timeout=300)
    print(r.stdout.strip())
    print(r.stderr.strip())
    # Each tensor's request (a block's aux) and the function in its stack: the block itself may
    # be larger (the allocator hands out a whole free block when what is left would be small).
    dump = subprocess.run([vramtrace, "dump", "-q", "--stacks", trace], capture_output=True, text=True).stdout
    named, size = {}, None
    for line in dump.splitlines():
        m = re.search(r" block_alloc .* aux=(\d+) ", line)
        if m or not line.startswith("    #"):
            size = int(m[1]) if m and int(m[1]) % (1 << 20) == 0 else None
            continue
        fn = re.search(r"#\d+ (fn_\d+) \((gen_\d+\.py):\d+\)$", line)
        if size and fn:
            named[size >> 20] = (fn[1], fn[2])
            size = None
    for size in sorted(named):
        print(f"  {size:3d} MiB  {named[size][0]} ({named[size][1]})")
    want = {i + 1: (f"fn_{i}", f"gen_{i}.py") for i in range(12)}
    ok = r.returncode == 0 and "Python stacks off" not in r.stderr and named == want
    print("PASS" if ok else "FAIL: want each size named by its own function")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
