#!/usr/bin/env bash
# Whether two analyzers print the same thing: every golden and GPU-recorded trace through the
# commands a change to the analyzer can move, text and JSON, compared byte for byte. For a
# change meant to keep output as it was (a speed-up, a refactor):
#   scripts/same-output.sh OLD_VRAMTRACE NEW_VRAMTRACE [TRACE...]
# Prints each pair that differs (with the first lines of the diff) and a count; exit 1 if any.
set -u
old=$1 new=$2; shift 2
traces=("$@")
[ ${#traces[@]} -gt 0 ] || traces=(tests/golden/*.vrt tests/golden/h200/*.vrt)
commands=("report" "report --json" "leaks" "leaks --json" "oom" "oom --json" "timeline" "info --json"
	  "whatif" "dump" "export --format folded")
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
same=0 differ=0
for trace in "${traces[@]}"; do
	for cmd in "${commands[@]}"; do
		# shellcheck disable=SC2086
		"$old" $cmd "$trace" >"$work/old" 2>&1; o=$?
		# shellcheck disable=SC2086
		"$new" $cmd "$trace" >"$work/new" 2>&1; n=$?
		if [ $o -eq $n ] && cmp -s "$work/old" "$work/new"; then
			same=$((same + 1))
		else
			differ=$((differ + 1))
			echo "differs: $cmd $trace (exit $o, $n)"
			diff "$work/old" "$work/new" | head -6 | cut -c1-160
		fi
	done
done
echo "$same the same, $differ different"
[ $differ -eq 0 ]
