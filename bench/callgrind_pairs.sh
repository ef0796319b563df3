#!/usr/bin/env bash
# Instructions per cudaMalloc+cudaFree pair, counted by callgrind: the same number on every run
# of the same binaries, whatever else the machine does (the timings of bench/ab.py move by 2-3x
# on a shared VM). added = the calling thread's instructions per pair traced minus untraced (the
# hook, the stack capture, the copy into its ring); collector = the collector thread's per pair
# (drain, live set, encoding, zstd, write).
#
#   bench/callgrind_pairs.sh BUILD [BUILD...]      e.g. bench/callgrind_pairs.sh /tmp/vt-base/build build
#
# Rows: C 1 call site without stacks; C 40-frame chain, native stacks; Python 20 deep through
# ctypes with native and Python stacks (the row of issue 17's 0.8 us target). Each BUILD needs
# preload/libvramtrace.so, bench/hotpath and bench/libcudart.so.13 (ninja -C BUILD bench/hotpath
# bench/libcudart.so.13 preload/libvramtrace.so). About a minute per build.
set -euo pipefail
command -v valgrind >/dev/null || { echo "callgrind_pairs: valgrind is not installed" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
py=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')  # not a pyenv shim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


# One row: PAIRS pairs; the worker is the thread file with the most instructions among those
# that are not the collector (the collector's file holds vrt_collector_drain).
# The busiest thread of an untraced run: the same loop without the preload.
untraced() {
  local build=$1; shift
  rm -f "$tmp"/cg.*
  env LD_LIBRARY_PATH="$build/bench" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$tmp/cg.%p" "$@" >/dev/null 2>&1
  local most=0
  for f in "$tmp"/cg.*-*; do
    callgrind_annotate "$f" >"$tmp/annotated" 2>/dev/null || true
    local ir; ir=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$tmp/annotated")
    [ "$ir" -gt "$most" ] && most=$ir
  done
  echo "$most"
}

row() {
  local build=$1 name=$2 pairs=$3; shift 3
  local base; base=$(untraced "$build" "$@")
  rm -f "$tmp"/cg.*
  env LD_LIBRARY_PATH="$build/bench" LD_PRELOAD="$build/preload/libvramtrace.so" VRAMTRACE_OUTPUT="$tmp/t.vrt" \
    VRAMTRACE_QUIET=1 VRAMTRACE_RING=0 VRAMTRACE_THREAD_BUFFER=64M "${extra[@]}" \
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/cg.%p" "$@" >/dev/null 2>&1
  local worker=0 collector=0
  for f in "$tmp"/cg.*-*; do
    callgrind_annotate "$f" >"$tmp/annotated" 2>/dev/null || true
    local ir; ir=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$tmp/annotated")
    if grep -q vrt_collector_drain "$tmp/annotated"; then
      collector=$ir
    elif [ "$ir" -gt "$worker" ]; then
      worker=$ir
    fi
  done
  printf '  %-44s %8d %10d %10d\n' "$name" "$pairs" $(((worker - base) / pairs)) $((collector / pairs))
}

for build in "$@"; do
  build=$(cd "$build" && pwd)
  echo "$build ($(git -C "$build/.." log -1 --format=%h 2>/dev/null || echo '?'))"
  printf '  %-44s %8s %10s %10s\n' "instructions per pair" "pairs" "added" "collector"
  extra=(VRAMTRACE_STACK_DEPTH=0 VRAMTRACE_PYTHON=0)
  row "$build" "C, 1 call site, no stacks" 100000 "$build/bench/hotpath" flat 1 100000
  extra=(VRAMTRACE_PYTHON=0)
  row "$build" "C, 40-frame chain, native stacks" 50000 "$build/bench/hotpath" deep 1 50000
  extra=()
  row "$build" "Python 20 deep (ctypes), native + Python" 20000 "$py" "$here/hotpath_py.py" \
    "$build/bench/libcudart.so.13" 20000
done
