#!/usr/bin/env bash
# The Python walk with cold caches, counted by callgrind's cache simulation (the same numbers on
# every run of the same binaries): bench/python_cold.py (pairs 21 frames deep, each frame its own
# code object, 8 MiB touched between pairs) under each BUILD's preload, native and Python stacks;
# prints per walk (one a pair: frees carry no stack) the instructions, first-level data misses
# and last-level misses of vrt_python_walk, and the same summed over the whole preload
# (D1 32 KiB 8-way, LL 2 MiB 16-way: a core's share of a server part).
#
#   bench/cachesim_python.sh BUILD [BUILD...]      e.g. bench/cachesim_python.sh /tmp/vt-base/build build
#
# Each BUILD needs preload/libvramtrace.so and bench/libcudart.so.13. About 20 s per build.
set -euo pipefail
command -v valgrind >/dev/null || { echo "cachesim_python: valgrind is not installed" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
py=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')  # not a pyenv shim
pairs=2000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-28s %-10s %12s %10s %10s\n' build part "instr/walk" "D1 miss" "LL miss"
for build in "$@"; do
  rm -f "$tmp"/cg.* "$tmp"/t.vrt
  env LD_LIBRARY_PATH="$build/bench" LD_PRELOAD="$build/preload/libvramtrace.so" VRAMTRACE_OUTPUT="$tmp/t.vrt" \
    VRAMTRACE_QUIET=1 VRAMTRACE_RING=0 valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 \
    --LL=2097152,16,64 --callgrind-out-file="$tmp/cg.out" "$py" "$here/python_cold.py" \
    "$build/bench/libcudart.so.13" $pairs >/dev/null 2>&1
  label="$build ($(git -C "$build/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
  callgrind_annotate --show=Ir,D1mr,DLmr --show-percs=no "$tmp/cg.out" 2>/dev/null | awk -v pairs=$pairs -v label="$label" '
    function num(s) { gsub(",", "", s); return s == "." ? 0 : s + 0 }
    /libvramtrace\.so\]$/ { ir += num($1); d1 += num($2); ll += num($3) }
    /python\.c:vrt_python_walk / { wir = num($1); wd1 = num($2); wll = num($3) }
    END {
      printf "%-28s %-10s %12.0f %10.1f %10.1f\n", label, "walk", wir / pairs, wd1 / pairs, wll / pairs
      printf "%-28s %-10s %12.0f %10.1f %10.1f\n", "", "preload", ir / pairs, d1 / pairs, ll / pairs
    }'
done
