#!/usr/bin/env bash
# bench/run.sh - builds and runs vramtrace's CPU benchmarks and prints one table.
#
#   bench/run.sh [--quick] [--reps N] [--big EVENTS] [--budget CPU_S] [--force-big]
#                [--only hot,whole,cold,size,analyzer,whatif] [--json FILE] [--compare BUILD_DIR[=LABEL]]
#
# What it measures (bench/NOTES.md explains every number and holds the results):
#   hot path    ns vramtrace adds to a cudaMalloc+cudaFree pair: C (1 call site, 40-frame chain)
#               at 1 and 8 threads, Python via ctypes 20 frames deep; untraced, no stacks,
#               native stacks, native+Python stacks, armed; against the CUDA test double and a
#               near-free runtime (bench/null_cudart.c)
#   trace size  bytes per event of a training-like loop
#   analyzer    `vramtrace report` / `vramtrace leaks` events/s and peak memory on synthetic
#               traces of 10M and 200M events (the 200M run shrinks to fit --budget CPU
#               seconds, default 60, unless --force-big); --compare runs an earlier build's
#               analyzer on the same traces, interleaved with this one (before and after)
#   whatif      the caching-allocator replay: the model alone and `vramtrace whatif` end to end,
#               allocator events/s on a synthetic PyTorch trace and an H200 trace
# Needs meson, ninja, a C compiler and python3; no GPU, no network. Uses the build directory
# $BENCH_BUILD (default: build/ at the top of the tree; `meson setup` if it does not exist).
# About 4-5 minutes on 2 cores; --quick checks the harness in about a minute.
# Exit status 1 if any traced run lost events. The GPU benchmark is bench/gpu_bench.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${BENCH_BUILD:-$root/build}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" >/dev/null
fi
ninja -C "$build" bench/hotpath bench/gen_trace bench/peakmem bench/libprefault.so bench/libcudart.so.13 \
	bench/alloc_model_speed bench/ab_loop tests/gen_torch_trace \
	preload/libvramtrace.so analyzer/vramtrace tests/doubles/libcudart.so.13 tests/doubles/libcuda.so.1 >/dev/null
exec python3 "$here/bench.py" --build "$build" "$@"
