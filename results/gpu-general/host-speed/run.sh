#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7: set AL's hand-written and generator networks
# (hand_ops seeds 957-960, checker seeds 961-964) at batch 1, 4 and 16, timed in three passes with the host loop
# read beside every run (time_with_readings.py), into $OUT/host-speed/readings.json. About 5 minutes.
#   bash results/gpu-general/host-speed/run.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
w=/tmp/host-speed
mkdir -p "$w/files" "${OUT:?}/host-speed"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } > "$OUT/host-speed/host.txt" 2>&1
if [ ! -e "$w/files/.done" ]; then
  python3 results/cpu-general/hand_ops_set.py "$w/files" --seeds 957-960 --batch-sizes 1,4,16 > "$w/export.log" 2>&1
  python3 results/cpu-general/checker_nets.py "$w/files" --seeds 961-964 --batch-sizes 1,4,16 --jobs 8 2>> "$w/export.log"
  touch "$w/files/.done"
fi
python3 results/gpu-general/host-speed/time_with_readings.py "$OUT/host-speed/readings.json" "$w"/files/*.onnx \
  --passes 3 --seconds 1.5 --budget-s "${BUDGET_S:-420}"
date -u >> "$OUT/host-speed/host.txt"
