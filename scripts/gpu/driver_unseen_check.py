#!/usr/bin/env python3
"""The attach's blind spot on a real driver (docs/ux-audit.md #72): a PyTorch job started
without vramtrace keeps a ctypes handle to cudaMalloc taken before the attach; after
`vramtrace attach`, `vramtrace watch --json` looks, the job allocates 512 MiB through ctypes
(not traced), watch looks, the job allocates a 512 MiB tensor (traced), watch looks again.
Prints each look's driver figure (NVML), traced CUDA bytes and what grew unseen, and
PASS/FAIL: the ctypes 512 MiB must show as unseen and the tensor's must not.

    python3 scripts/gpu/driver_unseen_check.py [VRAMTRACE]   (default build/analyzer/vramtrace)
"""
import json
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20

JOB = r'''
import ctypes, sys, torch
x = torch.ones(1, device="cuda")                       # the context, PyTorch's allocator
rt = ctypes.CDLL("libcudart.so.13")                     # the runtime PyTorch loaded
malloc = rt.cudaMalloc                                  # looked up now, before any attach
malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
kept = []
print("ready", flush=True)
for line in sys.stdin:
    how, mib = line.split()
    if how == "ctypes":
        p = ctypes.c_void_p()
        assert malloc(ctypes.byref(p), int(mib) << 20) == 0
        kept.append(p)
    else:
        kept.append(torch.empty(int(mib) << 20, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    print("done", flush=True)
'''


def main():
    vramtrace = sys.argv[1] if len(sys.argv) > 1 else "build/analyzer/vramtrace"
    tmp = tempfile.mkdtemp(prefix="vt-unseen-")
    job = subprocess.Popen([sys.executable, "-c", JOB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    looks = []
    try:
        assert job.stdout.readline().strip() == "ready"
        a = subprocess.run([vramtrace, "attach", "-o", os.path.join(tmp, "job.vrt"), str(job.pid)],
                           capture_output=True, text=True, timeout=120)
        print(a.stdout.strip(), a.stderr.strip())
        if a.returncode:
            print("FAIL: attach")
            return 1
        watch = subprocess.Popen([vramtrace, "watch", "--json", "--interval", "2", "--count", "3", str(job.pid)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for command in ("ctypes 512", "torch 512", None):
            line = watch.stdout.readline()
            if not line:
                print("FAIL: watch ended:", watch.stderr.read())
                return 1
            looks.append(json.loads(line))
            if command:
                job.stdin.write(command + "\n")
                job.stdin.flush()
                assert job.stdout.readline().strip() == "done"
        watch.wait(timeout=60)
    finally:
        job.kill()
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True)
    print("nvidia-smi compute apps (after):", smi.stdout.strip() or smi.stderr.strip())
    print(f"{'look':>4} {'driver MiB':>11} {'driver +MiB':>12} {'traced CUDA +MiB':>17} {'unseen +MiB':>12}")
    for i, look in enumerate(looks):
        d = look["driver_bytes"]
        print(f"{i:>4} {d / MiB if d is not None else float('nan'):>11.1f} "
              f"{(look['driver_since_first_bytes'] or 0) / MiB:>12.1f} "
              f"{look['traced_cuda_since_first_bytes'] / MiB:>17.1f} {(look['unseen_since_first_bytes'] or 0) / MiB:>12.1f}")
    if looks[0]["driver_bytes"] is None:
        print("FAIL: NVML gave no figure for the job (a container listing the host's PIDs?)")
        return 1
    after_ctypes, after_torch = looks[1], looks[2]
    ok = (abs(after_ctypes["unseen_since_first_bytes"] - 512 * MiB) <= 16 * MiB
          and after_ctypes["traced_cuda_since_first_bytes"] == 0
          and after_torch["traced_cuda_since_first_bytes"] >= 512 * MiB
          and abs(after_torch["unseen_since_first_bytes"] - 512 * MiB) <= 16 * MiB)
    print("PASS" if ok else "FAIL", "the ctypes 512 MiB unseen, the tensor's traced")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
