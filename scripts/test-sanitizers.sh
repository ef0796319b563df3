#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The sanitizer runs (scripts/test.sh runs this when it is executable). About 6-8 minutes on two
# cores, builds included; later runs rebuild only what changed.
#
#  1. build-asan (-Db_sanitize=address,undefined): the unit, doubles and fuzz-replay suites, then
#     the end-to-end suite (tests/e2e, without the slow tests) with the ASan runtime preloaded
#     into every traced program, so libvramtrace.so runs instrumented inside the test programs.
#  2. build-tsan (-Db_sanitize=thread): the threaded paths of the preload - 8 and 64 threads
#     allocating at once, a thread allocating while the trace closes at exit, a signal handler
#     calling CUDA inside the hooks, the control socket under load, a fatal-signal flush - each
#     under `vramtrace run`, checked for TSan reports and against what the program says it did
#     (live bytes, allocations and frees, exactly).
#
# Every sanitizer report goes to a log file (log_path); any report fails the run and is printed.
# Usage: scripts/test-sanitizers.sh [asan|tsan]... (default both). Environment: CC (the compiler
# meson uses; its runtime libraries are found with `$CC -print-file-name`), SANITIZER_JOBS.
#
# What cannot run under a sanitizer, and why:
#  - ASan: tests marked `forks` (the child of a threaded process allocates: the preload starts
#    its collector at the child's first event; GCC 12's ASan allocator holds no lock across
#    fork, so that calloc can hang on a lock a parent thread held), and
#    `attach` injection (it dlopens an ASan-instrumented library into an uninstrumented process).
#  - TSan: forking programs (TSan does not support a child that starts threads, which the
#    preload's collector does), and native stacks (VRAMTRACE_STACK_DEPTH=0: libunwind's
#    per-thread cache destructor runs after TSan has finished the thread and crashes it).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The Python that has pytest (as in test.sh): a pyenv python3 first on PATH may lack it.
pytest_python=python3
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import pytest' 2>/dev/null; then
    pytest_python=$(command -v "$py")
    break
  fi
done
cc=${CC:-gcc}
jobs=${SANITIZER_JOBS:-2}
which=("$@")
[ ${#which[@]} -eq 0 ] && which=(asan tsan)
failed=0

note() { printf '\n== %s\n' "$*"; }
fail() { echo "test-sanitizers: FAILED: $*" >&2; failed=1; }

cuda_include() {
  for d in "${CUDA_HOME:-}/include" "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include" \
           /usr/local/cuda/include /usr/include; do
    if [ -f "$d/cuda.h" ] && [ -f "$d/cuda_runtime_api.h" ]; then (cd "$d" && pwd); return 0; fi
  done
  echo "test-sanitizers: the CUDA Toolkit headers were not found; set CUDA_HOME" >&2
  return 1
}

build() { # DIR SANITIZERS
  local dir=$1 san=$2
  if [ ! -f "$dir/build.ninja" ]; then
    local log
    log=$(mktemp)
    CC=$cc meson setup "$dir" -Db_sanitize="$san" -Db_lundef=false -Dtoolkit_include="$(cuda_include)" \
      >"$log" 2>&1 || { cat "$log"; rm -f "$log"; return 1; }
    rm -f "$log"
  fi
  ninja -C "$dir" -j "$jobs" >/dev/null || { ninja -C "$dir" -j 1 | tail -30; return 1; }
}

# Prints the sanitizer reports in a log directory; false if there were any.
no_reports() { # DIR WHAT
  local logs=("$1"/*)
  [ -e "${logs[0]}" ] || return 0
  for f in "${logs[@]}"; do echo "---- $f"; head -60 "$f"; done
  fail "$2: ${#logs[@]} sanitizer report(s) above"
  return 1
}

runtime() { # asan|tsan -> path of the shared runtime
  local lib
  lib=$("$cc" -print-file-name="lib$1.so")
  [ -f "$lib" ] || { echo "test-sanitizers: no lib$1.so for $cc (install the compiler's sanitizer runtime)" >&2; return 1; }
  echo "$lib"
}

# ---- ASan + UBSan ------------------------------------------------------------------------------

asan() {
  local dir=$root/build-asan logs lib
  note "ASan+UBSan: building $dir"
  build "$dir" address,undefined || { fail "build-asan"; return; }
  lib=$(runtime asan) || { fail "asan runtime"; return; }

  note "ASan+UBSan: unit, doubles and fuzz-replay suites"
  # UBSan reports and carries on by default: halt, so that undefined behaviour fails the test.
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" meson test -C "$dir" --suite unit --suite doubles \
    --suite fuzz-replay --num-processes "$jobs" --print-errorlogs --timeout-multiplier 3 \
    || fail "meson test (unit, doubles, fuzz-replay) under ASan"

  logs=$(mktemp -d)
  # The traced programs get the runtime first in LD_PRELOAD (conftest's VRAMTRACE_TEST_PRELOAD);
  # `vramtrace run` then puts libvramtrace.so in front of it, hence verify_asan_link_order=0.
  # ASan's dlopen interceptor hides the caller's RUNPATH: the runtime double finds the driver
  # double through LD_LIBRARY_PATH. Signals stay the programs' own (the suite crashes some on
  # purpose), leaks are not checked (the preload keeps its tables to the end on purpose).
  local env=(VRAMTRACE_BUILD="$dir" VRAMTRACE_SOURCE="$root" VRAMTRACE_TEST_PRELOAD="$lib"
             LD_LIBRARY_PATH="$dir/tests/doubles${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
             ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_abort=0:log_path=$logs/asan"
             UBSAN_OPTIONS="print_stacktrace=1:log_path=$logs/ubsan")

  note "ASan+UBSan: the preload starts inside an instrumented program"
  local probe out
  probe=$(mktemp -d)
  out=$(env "${env[@]}" LD_PRELOAD="$lib" "$dir/analyzer/vramtrace" run -q -o "$probe/t.vrt" -- \
        "$dir/tests/mt_alloc" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$probe/t.vrt" ]; then
    echo "$out"
    fail "a traced program under ASan exited $rc without a trace. If it is 139 (SIGSEGV) at start:" \
         "the sanitizer runtime calls dlsym while it initializes, before its shadow memory exists, and" \
         "dlsym is the preload's vrt_dlsym_filter (preload/lookup.c), which must not be instrumented" \
         "(docs/RELIABILITY.md F8)"
    rm -rf "$probe" "$logs"
    return
  fi
  rm -rf "$probe"

  note "ASan+UBSan: the end-to-end suite"
  env "${env[@]}" "$pytest_python" -m pytest -q -p no:cacheprovider -m "not slow and not forks" -k "not inject" tests/e2e \
    || fail "the e2e suite under ASan+UBSan"
  no_reports "$logs" "e2e under ASan+UBSan"
  rm -rf "$logs"
}

# ---- TSan ------------------------------------------------------------------------------------

# One program under `vramtrace run` with TSan: its exit status, no report, and the trace against
# what the program says it did (every program here prints it, "key=value"):
#   held_bytes, allocs, frees (its last line with held_bytes): live bytes at the end, alloc and
#     free records, exactly; and nothing lost
#   main_bytes + handler_bytes, main_ and handler_allocs/frees (stress_signal): the live bytes
#     exactly, and every alloc and free written or counted lost (a handler's event that finds
#     the deferred slots full is counted lost: docs/RELIABILITY.md F2)
#   "NAME ok enabled=1 bytes=N" lines (stress_atexit): the kept bytes of the handlers vramtrace
#     recorded, plus at most the busy thread's one 4 KiB allocation in flight
tsan_case() { # NAME EXPECTED_STATUS EXTRA_PRELOAD ARGV...
  local name=$1 want=$2 extra=$3
  shift 3
  local work logs
  work=$(mktemp -d)
  logs=$(mktemp -d)
  env LD_LIBRARY_PATH="$tdir/tests/doubles${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      LD_PRELOAD="$tlib${extra:+:$extra}" VRAMTRACE_STACK_DEPTH=0 VRAMTRACE_THREAD_BUFFER=16M \
      TSAN_OPTIONS="log_path=$logs/tsan:second_deadlock_stack=1${tsan_extra:+:$tsan_extra}" \
      timeout -k 5 300 "$tdir/analyzer/vramtrace" run -q -o "$work/t.vrt" -- "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne "$want" ]; then
    cat "$work/err"
    fail "tsan $name: exit $rc, expected $want"
  elif ! python3 - "$work/out" "$work/t.vrt" "$tdir/analyzer/vramtrace" <<'EOF'
import json, re, subprocess, sys
out, trace, vramtrace = sys.argv[1:]
lines = open(out).read().splitlines()
def fields(line):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
def analyze(*args):
    return subprocess.run([vramtrace, *args, trace], capture_output=True, text=True, check=True).stdout
rep = json.loads(analyze("report", "--json", "-q"))
live = sum(d["live_bytes_at_end"] for d in rep["devices"])
info = json.loads(analyze("info", "--json"))
ops = {}
for line in analyze("dump", "-q").splitlines():
    parts = line.split(None, 3)
    if len(parts) >= 3 and parts[1].startswith("t") and parts[2] in ("alloc", "free"):
        ops[parts[2]] = ops.get(parts[2], 0) + 1
said = [fields(line) for line in lines if "held_bytes=" in line or "main_bytes=" in line]
kept = [fields(line)["bytes"] for line in lines if re.match(r"\S+ ok enabled=1 ", line)]
if said:
    s = said[-1]
    held = s.get("held_bytes", s.get("main_bytes", 0) + s.get("handler_bytes", 0))
    allocs = s.get("allocs", s.get("main_allocs", 0) + s.get("handler_allocs", 0))
    frees = s.get("frees", s.get("main_frees", 0) + s.get("handler_frees", 0))
    lost = info["events_lost"]
    if "handler_allocs" in s:
        # a handler's event that finds the deferred slots full is counted lost (F2): every event
        # is written or counted, and the live set is exact all the same
        got = (live, ops.get("alloc", 0) + ops.get("free", 0) + lost)
        if got != (held, allocs + frees):
            sys.exit(f"live, written + lost: trace {got}, program {(held, allocs + frees)}")
    elif (live, ops.get("alloc", 0), ops.get("free", 0), lost) != (held, allocs, frees, 0):
        sys.exit(f"live, allocs, frees, lost: trace {(live, ops.get('alloc', 0), ops.get('free', 0), lost)}, "
                 f"program {(held, allocs, frees, 0)}")
elif kept:
    if not sum(kept) <= live <= sum(kept) + 4096:
        sys.exit(f"live at end {live}, the exit handlers kept {sum(kept)} (+ at most 4096 in flight)")
else:
    sys.exit("the program said nothing to check the trace against")
EOF
  then
    fail "tsan $name: the trace does not match what the program did"
  else
    echo "tsan $name: ok"
  fi
  no_reports "$logs" "tsan $name"
  rm -rf "$work" "$logs"
}

tsan_extra=
tsan() {
  tdir=$root/build-tsan
  note "TSan: building $tdir"
  build "$tdir" thread || { fail "build-tsan"; return; }
  tlib=$(runtime tsan) || { fail "tsan runtime"; return; }
  local t=$tdir/tests probe rc
  note "TSan: the preload starts inside an instrumented program"
  probe=$(mktemp -d)
  LD_LIBRARY_PATH="$tdir/tests/doubles${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$tlib" \
    "$tdir/analyzer/vramtrace" run -q -o "$probe/t.vrt" -- "$t/stress_churn" 10 10 >/dev/null 2>&1
  rc=$?
  rm -rf "$probe"
  if [ $rc -ne 0 ]; then
    fail "a traced program under TSan exited $rc (139: the sanitizer runtime calls dlsym while it" \
         "initializes, and the preload's vrt_dlsym_filter must not be instrumented: docs/RELIABILITY.md F8)"
    return
  fi
  note "TSan: threaded paths of the preload"
  tsan_case "8 threads" 0 "" "$t/mt_alloc"
  tsan_case "64 threads" 0 "" "$t/stress_threads" 64 2
  for i in 1 2 3; do
    tsan_case "allocating while the trace closes ($i)" 0 "" "$t/stress_atexit" busy
  done
  # The runtime double allocates (calloc) inside the handler's CUDA call: the double is not
  # async-signal-safe, and that is not what this case is about.
  tsan_extra=report_signal_unsafe=0 tsan_case "signal handler in hooks" 0 "$tdir/tests/libstress_sigshim.so" \
    "$t/stress_signal" 2000
  tsan_case "control socket under load" 0 "$tdir/tests/libstress_fastrt.so" "$t/stress_churn" 100000 100
  tsan_case "fatal-signal flush" 134 "" "$t/stress_crash" abort 300
}

for w in "${which[@]}"; do
  case $w in
    asan) asan ;;
    tsan) tsan ;;
    *) echo "usage: $0 [asan|tsan]..." >&2; exit 2 ;;
  esac
done
if [ $failed -ne 0 ]; then
  echo "test-sanitizers: FAILED"
  exit 1
fi
echo "test-sanitizers: all passed"
