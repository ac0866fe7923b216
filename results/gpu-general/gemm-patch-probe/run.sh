#!/usr/bin/env bash
# On an H200/H100 host with the payload in /tmp/site: export the grid, time it, copy the timings to $OUT.
#   bash results/gpu-general/gemm-patch-probe/run.sh     (resumable: a second call times what is left)
set -uo pipefail
here=results/gpu-general/gemm-patch-probe
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/gemm-patch-probe"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gemm-patch-probe/device.txt"
python3 $here/export_grid.py /tmp/gpgrid 2>&1 | grep -v -i warn | tail -1
PYTHONPATH=/tmp/site:$PWD timeout ${BUDGET_S:-420} python3 $here/time_grid.py /tmp/gpgrid /tmp/gpgrid-timings.jsonl 2>&1 | tail -5
cp /tmp/gpgrid-timings.jsonl "$OUT/gemm-patch-probe/timings.jsonl"
wc -l "$OUT/gemm-patch-probe/timings.jsonl"
