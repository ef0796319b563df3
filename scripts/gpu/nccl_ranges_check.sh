#!/usr/bin/env bash
# ux defect 44 on the GPU: NCCL's ncclCommInitRankConfig (and ncclCommAbort/Destroy) ranges end
# now that the preload takes NVTX's payload extension (NCCL 2.24+ closes them with
# nvtxRangePopPayload). Runs scripts/gpu/scenario.py nccl traced and prints, per NCCL range name,
# how many times it was entered and exited; every line should read "entered N exited N".
#   scripts/gpu/nccl_ranges_check.sh [OUT_DIR]     (PYTHON: the interpreter with torch)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
py=${PYTHON:-python3}
build/analyzer/vramtrace run -f -q -o "$out/nccl.vrt" -- "$py" scripts/gpu/scenario.py nccl >/dev/null
build/analyzer/vramtrace dump "$out/nccl.vrt" |
  awk '$3 == "phase_enter" || $3 == "phase_exit" { if ($4 ~ /nvtx:nccl/) n[$4 " " $3]++; names[$4] = 1 }
       END { bad = 0
             for (k in names) if (k ~ /nvtx:nccl/) {
               e = n[k " phase_enter"] + 0; x = n[k " phase_exit"] + 0
               printf "%-40s entered %d exited %d%s\n", k, e, x, e == x ? "" : "   <- never closed"
               bad += e != x }
             exit bad != 0 }'
