#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this): builds, then runs every
# meson test suite (format/reader unit tests, the CUDA test doubles, end-to-end runs of real
# programs under `vramtrace run`, golden outputs, fuzz corpus replay, HTML rendering), then the
# stages: the sanitizer builds, the fuzz smoke runs, the wheel check and the mutation run
# (scripts/mutants.sh: every mutant must be killed).
# Ends with one line: "tests: N passed, N failed, N skipped".
#
# It never passes by leaving something out: pytest is installed (or found) before meson is
# configured, a suite that should be registered and is not, a missing test log, a test that did
# not run or a stage that cannot run fails the run with one line saying which. Skipped tests
# (meson's SKIP, and pytest skips inside the e2e and stress suites) are listed by name and
# counted apart from the passes.
#
# Environment: TEST_STAGES (default "sanitizers fuzz-smoke wheel no-cuda mutants": the stages to run;
# each named stage must be runnable).
set -uo pipefail
cd "$(dirname "$0")/.."

die() { echo "test.sh: FAILED: $*" >&2; echo "tests: 0 passed, 1 failed, 0 skipped"; exit 1; }

# ---- dependencies, before anything is configured --------------------------------------------
# tests/meson.build registers the e2e and stress suites with the first of these that has pytest
# (a pyenv shim on PATH may not have it while the distribution's python3 does, or the reverse).
pytest_python() {
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import pytest' 2>/dev/null; then
      command -v "$py"
      return 0
    fi
  done
  return 1
}
if ! pytest_python >/dev/null; then
  echo "test.sh: no python3 with pytest; installing it (python3 -m pip install pytest)"
  python3 -m pip install -q pytest >/dev/null 2>&1 ||
    { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get install -y -qq python3-pytest >/dev/null 2>&1; }
  pytest_python >/dev/null ||
    die "pytest is not installed and could not be installed (pip install pytest, or apt-get install python3-pytest)"
fi
# tests/e2e/test_parquet.py (export --format parquet, the DuckDB queries of docs/python.md) needs
# pyarrow and duckdb from PyPI; without them its tests skip, named in the summary.
engine_py=$(pytest_python)
if ! "$engine_py" -c 'import pyarrow, duckdb' 2>/dev/null; then
  echo "test.sh: installing pyarrow and duckdb for tests/e2e/test_parquet.py ($engine_py -m pip install)"
  "$engine_py" -m pip install -q pyarrow duckdb >/dev/null 2>&1 ||
    "$engine_py" -m pip install -q --break-system-packages pyarrow duckdb >/dev/null 2>&1 ||
    echo "test.sh: pyarrow and duckdb could not be installed: tests/e2e/test_parquet.py will skip"
fi

stages=(${TEST_STAGES-sanitizers fuzz-smoke wheel no-cuda mutants})
stage_script() {
  case $1 in
    sanitizers) echo scripts/test-sanitizers.sh ;;
    fuzz-smoke) echo scripts/fuzz-smoke.sh ;;
    wheel) echo scripts/test-wheel.sh ;;
    no-cuda) echo scripts/test-no-cuda.sh ;;   # the analyzer built and tested without CUDA headers
    mutants) echo scripts/mutants.sh ;;
    *) return 1 ;;
  esac
}
# What each stage needs, checked now rather than after the meson suites have run.
stage_ready() {
  case $1 in
    sanitizers) for lib in libasan.so libtsan.so; do
                  [ -f "$("${CC:-gcc}" -print-file-name=$lib 2>/dev/null)" ] || { echo "no $lib for ${CC:-gcc}"; return 1; }
                done ;;
    fuzz-smoke) command -v clang >/dev/null || { echo "clang is not installed"; return 1; } ;;
    wheel) python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "python3 has no venv/ensurepip (python3-venv)"; return 1; } ;;
  esac
}
for s in "${stages[@]}"; do
  script=$(stage_script "$s") || die "unknown stage '$s' in TEST_STAGES"
  [ -f "$script" ] || die "stage $s: $script does not exist"
  [ -x "$script" ] || die "stage $s: $script is not executable"
  why=$(stage_ready "$s") || die "stage $s cannot run: $why (install it, or leave the stage out with TEST_STAGES)"
done

scripts/build.sh || die "the build failed (above)"

# ---- every suite registered -------------------------------------------------------------------
want_suites=(unit doubles e2e stress fuzz-replay)
missing_suites() {
  meson introspect build --tests 2>/dev/null | python3 -c '
import json, sys
have = {s.split(":")[-1] for t in json.load(sys.stdin) for s in t["suite"]}
print(" ".join(s for s in sys.argv[1:] if s not in have))' "${want_suites[@]}"
}
missing=$(missing_suites)
if [ -n "$missing" ]; then
  # configured before pytest was there: meson does not look again by itself
  echo "test.sh: suites not registered ($missing); reconfiguring build/"
  meson setup --reconfigure build >/dev/null || die "meson setup --reconfigure build failed"
  missing=$(missing_suites)
  [ -z "$missing" ] || die "meson registered no '$missing' suite (see the warnings of meson setup build)"
fi

# ---- the meson suites ---------------------------------------------------------------------------
passed=0
failed=0
skipped=0
logs=build/meson-logs
rm -f "$logs/testlog.json" "$logs"/pytest-*.xml
meson test -C build --print-errorlogs --num-processes 2 --timeout-multiplier 3
[ -f "$logs/testlog.json" ] || die "meson wrote no $logs/testlog.json"
# Every registered test must have a result: OK or EXPECTEDFAIL pass, SKIP is counted apart and
# named, anything else fails. pytest's skips inside the e2e and stress suites (from their JUnit
# files) are named and counted too, except the slow tests that e2e leaves to the stress suite.
read -r p f s < <(python3 - "$logs" <<'EOF'
import glob, json, subprocess, sys
import xml.etree.ElementTree as ET
logs = sys.argv[1]
results = [json.loads(line) for line in open(logs + "/testlog.json")]
registered = {t["name"] for t in json.loads(subprocess.run(["meson", "introspect", "build", "--tests"],
                                                           capture_output=True, text=True, check=True).stdout)}
ran = {r["name"].split(" / ", 1)[-1] for r in results}  # "project:suite / name"
p = sum(r["result"] in ("OK", "EXPECTEDFAIL") for r in results)
s = [r["name"] for r in results if r["result"] == "SKIP"]
f = [r["name"] for r in results if r["result"] not in ("OK", "EXPECTEDFAIL", "SKIP")]
for name in sorted(registered - ran):
    print(f"test.sh: FAILED: {name} is registered but did not run", file=sys.stderr)
    f.append(name)
for suite in ("e2e", "stress"):
    path = f"{logs}/pytest-{suite}.xml"
    try:
        cases = ET.parse(path).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        print(f"test.sh: FAILED: the {suite} suite left no readable {path} ({e})", file=sys.stderr)
        f.append(suite)
        continue
    for case in cases:
        skip = case.find("skipped")
        if skip is not None and not skip.get("message", "").startswith("slow stress test"):
            s.append(f"{suite}: {case.get('classname')}::{case.get('name')} ({skip.get('message', '')})")
for name in s:
    print(f"skipped: {name}", file=sys.stderr)
for name in f:
    print(f"failed: {name}", file=sys.stderr)
print(p, len(f), len(s))
EOF
) || die "could not read the test results in $logs"
passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))

# ---- the stages -------------------------------------------------------------------------------
export FUZZ_SEED=${FUZZ_SEED-20261202} # reproducible fuzz smoke runs (see scripts/fuzz-smoke.sh)
for s in "${stages[@]}"; do
  script=$(stage_script "$s")
  echo "== stage $s ($script)"
  if "$script"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: stage $s ($script)"; fi
done

echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
