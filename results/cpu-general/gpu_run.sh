#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh pl0 .. pl23: export the independent
# generator's networks (both sets, seeds 701-724) at batch 16 and 64 and time them whole on the gpu
# profile at each stress level (time_files.py; it resumes: call again until every level is done).
# Predictions are made elsewhere, device-free, from the same seeds: hase predict --predictor h100.
#   bash results/cpu-general/gpu_run.sh [LEVELS=0.0,1.0,0.5]
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
work=/tmp/checker-gpu
mkdir -p "$work" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } > "$work/host.txt" 2>&1
[ -e "$work/files/traits.json" ] || python3 results/cpu-general/checker_nets.py "$work/files" --seeds 701-724 \
  --batch-sizes 16,64 2> "$work/export.log"
python3 results/cpu-general/time_files.py "$work/files" "$work/timings" --profile gpu --levels "${1:-0.0,1.0,0.5}"
date -u >> "$work/host.txt"
tar -C "$work" --exclude=files -czf "$OUT/checker-gpu.tar.gz" . && tar -tzf "$OUT/checker-gpu.tar.gz"
