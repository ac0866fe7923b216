#!/usr/bin/env bash
# Pack every folder under $OUT into one $OUT/<folder>.tar.gz (a device call brings back at most 8 files,
# 16 MiB each), traces (*.json.gz) apart in <folder>-traces.tar.gz when that stays under 15 MiB.
#   bash results/gpu-payload/pack.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
cd "$OUT" || exit 1
for dir in */; do
  dir=${dir%/}
  tar --exclude='*.json.gz' -czf "$dir.tar.gz" "$dir"
  if find "$dir" -name '*.json.gz' | grep -q .; then
    find "$dir" -name '*.json.gz' -print0 | tar --null -czf "$dir-traces.tar.gz" -T -
    (( $(stat -c %s "$dir-traces.tar.gz") < 15728640 )) || { echo "pack: $dir's traces are over 15 MiB, left on the host"; rm -f "$dir-traces.tar.gz"; }
  fi
  rm -rf "$dir"
done
rm -f ./*-reports.tar.gz  # the studies' own partial archives: the folder archives hold the same files
ls -la "$OUT"
