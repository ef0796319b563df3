#!/usr/bin/env bash
# Line and branch coverage of the test suites, per folder of the code users run: preload/
# (libvramtrace.so, measured inside the traced test programs), analyzer/ (the vramtrace binary)
# and include/ (the headers both compile). Builds build-cov (-Db_coverage=true) once, runs the
# unit, doubles, fuzz-replay, e2e and stress suites there from zero counts, and prints one row per
# folder; COVERAGE_HTML=DIR also writes gcovr's per-file HTML report there. About 6 minutes on
# two cores. Needs gcovr (apt-get install gcovr, or pip install gcovr).
#
#   scripts/coverage.sh [SUITE...]     (default: unit doubles fuzz-replay e2e stress)
#
# Environment: COVERAGE_BUILD_DIR (default build-cov), COVERAGE_HTML.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${COVERAGE_BUILD_DIR:-$root/build-cov}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(unit doubles fuzz-replay e2e stress)
command -v gcovr >/dev/null || { echo "coverage: gcovr is not installed (apt-get install gcovr, or pip install gcovr)" >&2; exit 2; }

cuda_include() {
  for d in "${CUDA_HOME:-}/include" "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include" \
           /usr/local/cuda/include /usr/include; do
    if [ -f "$d/cuda.h" ] && [ -f "$d/cuda_runtime_api.h" ]; then (cd "$d" && pwd); return 0; fi
  done
  echo "coverage: the CUDA Toolkit headers were not found; set CUDA_HOME" >&2
  return 1
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Db_coverage=true -Dtoolkit_include="$(cuda_include)" >"$log" 2>&1 ||
    { cat "$log"; echo "coverage: meson setup failed" >&2; exit 1; }
fi
ninja -C "$dir" >"$log" 2>&1 || { cat "$log"; echo "coverage: the build failed" >&2; exit 1; }
find "$dir" -name '*.gcda' -delete

args=()
for s in "${suites[@]}"; do args+=(--suite "$s"); done
# A failing test is reported but does not stop the measurement: the figures say what ran.
meson test -C "$dir" --no-rebuild --num-processes 2 --timeout-multiplier 3 "${args[@]}" >"$log" 2>&1 ||
  { grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT)' "$log" || true; echo "coverage: some tests failed (above); figures follow" >&2; }

gcov_args=(-r "$root" --object-directory "$dir" --filter "$root/preload/" --filter "$root/analyzer/"
           --filter "$root/include/" --gcov-ignore-parse-errors)
summary=$dir/coverage-summary.json
gcovr "${gcov_args[@]}" --json-summary "$summary" >/dev/null
if [ -n "${COVERAGE_HTML:-}" ]; then
  mkdir -p "$COVERAGE_HTML"
  gcovr "${gcov_args[@]}" --html-details "$COVERAGE_HTML/index.html" >/dev/null
  echo "coverage: $COVERAGE_HTML/index.html"
fi
python3 - "$summary" "${suites[*]}" <<'EOF'
import json, sys
files = json.load(open(sys.argv[1]))["files"]
rows = {}
for f in files:
    folder = f["filename"].split("/", 1)[0] + "/"
    r = rows.setdefault(folder, [0, 0, 0, 0])
    r[0] += f["line_covered"]; r[1] += f["line_total"]; r[2] += f["branch_covered"]; r[3] += f["branch_total"]
print(f"coverage of the {sys.argv[2]} suites:")
print(f"{'folder':<10} {'lines':>15} {'':>7} {'branches':>15} {'':>7}")
for folder in ("preload/", "analyzer/", "include/"):
    lc, lt, bc, bt = rows.get(folder, [0, 0, 0, 0])
    pct = lambda c, t: f"{100 * c / t:6.1f}%" if t else "     -"
    print(f"{folder:<10} {lc:>7}/{lt:<7} {pct(lc, lt)} {bc:>7}/{bt:<7} {pct(bc, bt)}")
EOF
