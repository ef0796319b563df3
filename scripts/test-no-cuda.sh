#!/usr/bin/env bash
# The analyzer without CUDA (issue 16, item 4): configures and builds with -Dcuda=disabled and,
# first on the include path, a cuda.h / cuda_runtime_api.h / cuda_runtime.h that #error, so any
# file of the analyzer-only build that includes a CUDA header fails it; then runs the unit and
# fuzz-replay suites, the golden-trace reports (tests/e2e/test_golden.py, test_h200_traces.py,
# which need no test program), and `meson install` of the wheel layout (-Dwheel=true): the
# analyzer in vramtrace/_bin, no preload. Also checks that `auto` falls back to the analyzer
# alone, saying so in one line, when the headers are not there. About a minute on two cores.
#
#   scripts/test-no-cuda.sh     (scripts/test.sh runs it as the stage "no-cuda")
#
# Environment: NO_CUDA_DIR (scratch directory, default a new one under $TMPDIR, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
scratch=${NO_CUDA_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/vramtrace-no-cuda.XXXXXX")}
[ -n "${NO_CUDA_DIR:-}" ] || trap 'rm -rf "$scratch"' EXIT
fail() { echo "test-no-cuda: FAILED: $*" >&2; exit 1; }

poison=$scratch/poison
mkdir -p "$poison" "$scratch/empty"
for h in cuda.h cuda_runtime_api.h cuda_runtime.h; do
  echo "#error \"$h: the analyzer-only build must not include a CUDA header\"" >"$poison/$h"
done

# auto, with no usable header: the analyzer alone and one line that says so.
log=$scratch/auto.log
meson setup "$scratch/auto" -Dc_args="-I$poison" -Dtoolkit_include="$scratch/empty" >"$log" 2>&1 ||
  { cat "$log"; fail "meson setup (auto, no CUDA headers) failed"; }
grep -q "^Message: no CUDA Toolkit headers (none in $scratch/empty): building the analyzer only" "$log" ||
  { cat "$log"; fail "meson setup did not say that it builds the analyzer only"; }
[ "$(grep -c 'no CUDA Toolkit headers' "$log")" = 1 ] || fail "more than one line about the missing headers"

build=$scratch/build
meson setup "$build" -Dcuda=disabled -Dc_args="-I$poison" >"$log" 2>&1 ||
  { cat "$log"; fail "meson setup -Dcuda=disabled failed"; }
ninja -C "$build" >"$log" 2>&1 || { tail -40 "$log"; fail "the analyzer-only build failed"; }
[ -x "$build/analyzer/vramtrace" ] || fail "no analyzer built"
[ ! -e "$build/preload/libvramtrace.so" ] || fail "the preload was built without CUDA headers"
meson test -C "$build" --suite unit --suite fuzz-replay --print-errorlogs >"$log" 2>&1 ||
  { tail -40 "$log"; fail "meson test (unit, fuzz-replay) failed"; }
grep -E '^(Ok|Fail):' "$log" | tr '\n' ' '; echo

py=$(for p in python3 /usr/bin/python3; do "$p" -c 'import pytest' 2>/dev/null && { echo "$p"; break; }; done)
[ -n "$py" ] || fail "no python3 with pytest (pip install pytest)"
VRAMTRACE_BUILD=$build VRAMTRACE_SOURCE=$src "$py" -m pytest -q -p no:cacheprovider \
  tests/e2e/test_golden.py tests/e2e/test_h200_traces.py >"$log" 2>&1 || { tail -40 "$log"; fail "golden reports failed"; }
tail -1 "$log"
"$build/analyzer/vramtrace" report -q tests/golden/oom.vrt | grep -q "peak" || fail "report on tests/golden/oom.vrt"

# The wheel's analyzer part: the wheel layout, installed, with the vendored libraries it needs.
wheel=$scratch/wheel
meson setup "$wheel" -Dwheel=true -Dcuda=disabled -Dc_args="-I$poison" >"$log" 2>&1 ||
  { cat "$log"; fail "meson setup -Dwheel=true -Dcuda=disabled failed"; }
ninja -C "$wheel" >"$log" 2>&1 || { tail -40 "$log"; fail "the analyzer-only wheel build failed"; }
meson install -C "$wheel" --destdir "$scratch/root" --tags runtime,python-runtime >"$log" 2>&1 ||
  { tail -40 "$log"; fail "meson install of the wheel layout failed"; }
bin=$(find "$scratch/root" -path '*/vramtrace/_bin/vramtrace' -type f | head -1)
[ -n "$bin" ] || fail "the wheel layout has no vramtrace/_bin/vramtrace"
[ -z "$(find "$scratch/root" -name libvramtrace.so)" ] || fail "the wheel layout has a preload"
[ -f "$(dirname "$bin")/../__init__.py" ] || fail "the wheel layout has no Python package"
"$bin" report -q tests/golden/oom.vrt | grep -q "peak" || fail "the wheel's analyzer cannot report tests/golden/oom.vrt"
echo "test-no-cuda: the analyzer, its unit and fuzz-replay suites, golden reports and the wheel layout without CUDA headers: ok"
