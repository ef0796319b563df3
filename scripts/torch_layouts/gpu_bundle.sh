#!/usr/bin/env bash
# Builds, for each release fetched by fetch.py into WORK, gpu_alloc.cpp against its headers and
# packs the program with that release's libc10.so, libc10_cuda.so, version.py and CUDA 12 runtime
# (CUDA 13 ones use the GPU host's) into OUT.tar.xz for gpu_run.sh on a GPU host.
#     gpu_bundle.sh WORK OUT.tar.xz VERSION...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$1 out=$2
shift 2
stage=$(mktemp -d)
for v in "$@"; do
  rel=$work/$v
  cuda=$(sed -n "s/^cuda[^=]*= '\([0-9.]*\)'.*/\1/p" "$rel/torch/version.py")
  inc=/usr/local/cuda/include
  d=$stage/$v
  mkdir -p "$d/torch/lib"
  if [[ $cuda == 12.* ]]; then
    rt=$(ls -d "$work"/cudart-12.* | while read -r c; do
      if grep -q "nvidia-cuda-runtime-cu12 (\?==${c#*cudart-}" "$rel"/*.dist-info/METADATA; then echo "$c"; fi
    done | head -1)
    rt=${rt:-$(ls -d "$work"/cudart-12.* | head -1)}
    inc=$rt/nvidia/cuda_runtime/include
    cp "$rt/nvidia/cuda_runtime/lib/libcudart.so.12" "$d/torch/lib/"
  fi
  cp "$rel/torch/lib/libc10.so" "$rel/torch/lib/libc10_cuda.so" "$d/torch/lib/"
  cp "$rel/torch/version.py" "$d/torch/"
  std=c++20
  g++ -std=$std -O1 -w -I "$rel/torch/include" -I "$inc" "$here/gpu_alloc.cpp" -o "$d/gpu_alloc" \
      -L "$rel/torch/lib" -lc10_cuda -lc10 -Wl,-rpath,'$ORIGIN/torch/lib' -Wl,--allow-shlib-undefined 2>/dev/null ||
    g++ -std=c++17 -O1 -w -I "$rel/torch/include" -I "$inc" "$here/gpu_alloc.cpp" -o "$d/gpu_alloc" \
      -L "$rel/torch/lib" -lc10_cuda -lc10 -Wl,-rpath,'$ORIGIN/torch/lib' -Wl,--allow-shlib-undefined
  echo "$v: built against CUDA $cuda headers"
done
tar -C "$stage" -cJf "$out" .
rm -rf "$stage"
ls -la "$out"
