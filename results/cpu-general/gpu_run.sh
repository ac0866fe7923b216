#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh pl0 .. pl23: export the independent
# generator's networks (both sets, seeds 701-724) at batch 16 and 64 and time them whole on the gpu
# profile at each stress level (time_files.py; it resumes: call again until every level is done).
# Predictions are made elsewhere, device-free, from the same seeds: hase predict --predictor h100.
# Environment: WORK (/tmp/checker-gpu), BATCHES (16,64), BUDGET_S (480).
#   BUDGET_S=480 bash results/cpu-general/gpu_run.sh [LEVELS=0.0,1.0,0.5]   # a level cut short is timed again
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
work=${WORK:-/tmp/checker-gpu}
mkdir -p "$work" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } >> "$work/host.txt" 2>&1
[ -e "$work/files/traits.json" ] || python3 results/cpu-general/checker_nets.py "$work/files" --seeds 701-724 \
  --batch-sizes "${BATCHES:-16,64}" 2> "$work/export.log"
timeout --signal=INT "${BUDGET_S:-480}" python3 results/cpu-general/time_files.py "$work/files" "$work/timings" \
  --profile gpu --levels "${1:-0.0,1.0,0.5}"
date -u >> "$work/host.txt"
tar -C "$work" --exclude=files -czf "$OUT/$(basename "$work").tar.gz" . && tar -tzf "$OUT/$(basename "$work").tar.gz"
