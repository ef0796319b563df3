#!/usr/bin/env bash
# Configures (once) and builds vramtrace in ./build. Finds the CUDA headers (only headers are
# used) under $CUDA_HOME, next to nvcc, or in /usr/local/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda_include() {
  for d in "${CUDA_HOME:-}/include" "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include" \
           /usr/local/cuda/include /usr/include; do
    if [ -f "$d/cuda.h" ] && [ -f "$d/cuda_runtime_api.h" ]; then (cd "$d" && pwd); return 0; fi
  done
  echo "vramtrace: the CUDA Toolkit headers (cuda.h, cuda_runtime_api.h) were not found; set CUDA_HOME" >&2
  return 1
}
log=$(mktemp)
if [ ! -f build/build.ninja ]; then
  if ! meson setup build -Dtoolkit_include="$(cuda_include)" >"$log" 2>&1; then
    cat "$log"; echo "vramtrace: meson setup failed (above)" >&2; exit 1
  fi
fi
if ! ninja -C build >"$log" 2>&1; then
  cat "$log"; echo "vramtrace: the build failed (above)" >&2; exit 1
fi
rm -f "$log"
echo "vramtrace: built build/analyzer/vramtrace and build/preload/libvramtrace.so"
