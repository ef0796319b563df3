#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this): builds, then runs every
# meson test suite (format/reader unit tests, the CUDA test doubles, end-to-end runs of real
# programs under `vramtrace run`, golden outputs, fuzz corpus replay, HTML rendering), the
# sanitizer build, the fuzz smoke runs and the wheel check when their tools are present.
# Ends with one line: "tests: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh || exit 1
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest || exit 1

passed=0
failed=0
count() { # $1 = meson build dir: adds its test results to the totals
  local json="$1/meson-logs/testlog.json"
  [ -f "$json" ] || return 0
  local p f
  p=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(x["result"] in ("OK","EXPECTEDFAIL","SKIP") for x in r))' "$json")
  f=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(x["result"] not in ("OK","EXPECTEDFAIL","SKIP") for x in r))' "$json")
  passed=$((passed + p)); failed=$((failed + f))
}

meson test -C build --print-errorlogs --num-processes 2 --timeout-multiplier 3
count build

export FUZZ_SEED=${FUZZ_SEED-20261202} # reproducible fuzz smoke runs (see scripts/fuzz-smoke.sh)
for extra in scripts/test-sanitizers.sh scripts/fuzz-smoke.sh scripts/test-wheel.sh; do
  if [ -x "$extra" ]; then
    if "$extra"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $extra"; fi
  fi
done

echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
