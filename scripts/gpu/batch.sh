#!/usr/bin/env bash
# One device session's checks in priority order under one deadline (device time is scarce):
#   scripts/gpu/batch.sh OUT SECONDS CHECK...
# CHECK is NAME=COMMAND (run from the repository root, OUT/NAME as its output directory in $D);
# a check starts only while more than 30 s are left and gets what remains. Writes
# OUT/NAME/log.txt per check and OUT/batch.txt (name, exit status, seconds).
set -u
out=$1 deadline=$(( $(date +%s) + $2 )); shift 2
mkdir -p "$out"
for check in "$@"; do
  name=${check%%=*} cmd=${check#*=}
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -le 30 ]; then echo "$name skipped (time)" | tee -a "$out/batch.txt"; continue; fi
  mkdir -p "$out/$name"
  start=$(date +%s)
  D="$out/$name" timeout -k 5 "$left" bash -c "$cmd" >"$out/$name/log.txt" 2>&1
  rc=$?
  echo "$name rc=$rc $(( $(date +%s) - start ))s" | tee -a "$out/batch.txt"
  tail -5 "$out/$name/log.txt"
done
