#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Builds the libFuzzer targets (tests/fuzz) with clang in their own build directory and runs each
# for a while, starting from the seed corpora and the known-bad corpus.
#
#   scripts/fuzz-smoke.sh [SECONDS]      (default 30 seconds per target)
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_JOBS (parallel fuzzing jobs per target,
# default 1), FUZZ_SEED (libFuzzer's -seed; unset: a new random seed each run), FUZZ_ARGS (extra
# libFuzzer flags). scripts/test.sh fixes the seed, so that a red CI run names the change that
# broke something rather than a lucky draw; new bugs are hunted with random seeds:
#   FUZZ_JOBS=2 scripts/fuzz-smoke.sh 600
# Findings land in $FUZZ_BUILD_DIR/artifacts/; the exit status is non-zero when any target found
# something. Reproduce a finding with
#   $FUZZ_BUILD_DIR/tests/fuzz/fuzz_<target> $FUZZ_BUILD_DIR/artifacts/<target>/crash-...
# Needs clang with libFuzzer (Debian/Ubuntu: clang, and libclang-rt-14-dev for clang 14).
set -euo pipefail

secs=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-1}
targets=(reader chunks reports ctl)

command -v clang >/dev/null || { echo "fuzz-smoke: clang is not installed" >&2; exit 2; }
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' > "$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
	echo "fuzz-smoke: clang cannot link libFuzzer here:" >&2
	cat "$probe/err" >&2
	echo "fuzz-smoke: install the compiler runtime (e.g. apt-get install libclang-rt-14-dev)" >&2
	exit 2
fi

if grep -q "subdir('tests/fuzz')" "$root/meson.build"; then
	if [ ! -f "$bdir/build.ninja" ]; then
		CC=clang meson setup "$bdir" "$root" -Dfuzz=enabled -Dbuildtype=debugoptimized
	else
		meson configure "$bdir" -Dfuzz=enabled >/dev/null
	fi
	ninja -C "$bdir" "${targets[@]/#/tests/fuzz/fuzz_}"
	bin=$bdir/tests/fuzz
else
	# tests/fuzz is not wired into the build yet: compile the targets directly.
	echo "fuzz-smoke: the root meson.build has no subdir('tests/fuzz'); building with clang directly"
	bin=$bdir/tests/fuzz
	mkdir -p "$bin"
	flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/include" -I"$root/analyzer")
	clang "${flags[@]}" "$root/tests/fuzz/fuzz_reader.c" "$root/format/trace_reader.c" "$root/format/live.c" "$root/analyzer/model.c" -lzstd -lm -o "$bin/fuzz_reader"
	clang "${flags[@]}" "$root/tests/fuzz/fuzz_chunks.c" "$root/format/trace_reader.c" "$root/format/live.c" "$root/analyzer/model.c" -lzstd -lm -o "$bin/fuzz_chunks"
	clang "${flags[@]}" "$root/tests/fuzz/fuzz_ctl.c" -o "$bin/fuzz_ctl"
	echo "fuzz-smoke: fuzz_reports needs the meson build; skipped"
	targets=(reader chunks ctl)
fi

status=0
for t in "${targets[@]}"; do
	work=$bdir/corpus/$t
	art=$bdir/artifacts/$t
	mkdir -p "$work" "$art"
	seeds=("$root/tests/fuzz/corpus/$t")
	# reports: trace files and recipes. The H200 traces (100 KB, 4 inputs/s instrumented) only in
	# its corpus replay (tests/fuzz/meson.build), where they run under ASan in the sanitizer build.
	[ "$t" = reports ] && seeds=("$root/tests/fuzz/corpus/reader" "$root/tests/fuzz/corpus/chunks")
	[ "$t" = ctl ] || seeds+=("$root/tests/fuzz/bad")
	echo "== fuzz_$t for ${secs}s"
	# -rss_limit_mb: the reader must not need gigabytes for a small file; that is a finding too.
	# shellcheck disable=SC2086
	if ! "$bin/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=1048576 \
		-print_final_stats=1 -artifact_prefix="$art/" -jobs="$jobs" -workers="$jobs" \
		${FUZZ_SEED:+-seed=$FUZZ_SEED} ${FUZZ_ARGS:-} "$work" "${seeds[@]}" 2>"$bdir/fuzz_$t.log"; then
		status=1
		echo "fuzz_$t: FOUND A PROBLEM (see $bdir/fuzz_$t.log and $art/)"
		grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$bdir/fuzz_$t.log" | head -20 || true
	else
		grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$bdir/fuzz_$t.log" | tail -3 || true
		echo "fuzz_$t: ok"
	fi
done
exit $status
