#!/usr/bin/env bash
# On the GPU host, after the payload: set L's 12 generator networks at batch 1, timed idle three ways a pass
# (idle_spread_study.py: fresh EXHAUSTIVE session, pass 1's session kept, fresh HEURISTIC), three passes, with
# NVML clocks; about 5 minutes.   bash results/cpu-general/idle_spread_study.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
w=/tmp/idle-spread
mkdir -p "$w/files" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,persistence_mode,power.limit --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)|MHz"; date -u; } > "$w/host.txt" 2>&1
[ -e "$w/files/traits.json" ] || python3 results/cpu-general/checker_nets.py "$w/files" --seeds 836-847 \
  --batch-sizes 1 --jobs 8 2> "$w/export.log"
timeout --signal=INT "${BUDGET_S:-420}" python3 results/cpu-general/idle_spread_study.py "$w/files" "$w/spread.json" \
  --passes "${PASSES:-3}"
date -u >> "$w/host.txt"
tar -C "$w" --exclude=files -czf "$OUT/idle-spread.tar.gz" . && tar -tzf "$OUT/idle-spread.tar.gz"
