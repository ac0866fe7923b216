#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh has unpacked the payload into /tmp/site:
# the host-bound reproducibility study (host_study.py), stopped at BUDGET seconds (default 480).
#   bash results/gpu-general/host_study.sh [BUDGET]
set -uo pipefail
budget=${1:-480}
out=${OUT:-/tmp/out}/${HOST_STUDY_NAME:-host-study}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,persistence_mode --format=csv > "$out/gpu.csv" 2>&1
PYTHONPATH=.:/tmp/site timeout --kill-after=10 $((budget + 60)) \
  python3 results/gpu-general/host_study.py "$out" --budget-s "$budget" ${HOST_STUDY_ARGS:-} 2>&1 | tail -n 400 > "$out/log.txt"
echo "host study: rc ${PIPESTATUS[0]}, $(wc -l < "$out/host_study.jsonl" 2>/dev/null || echo 0) timings"
