#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7: hand-written networks (hand_ops_set.py seeds
# HAND_OPS) and generator networks (checker_nets.py seeds CHECKER, "none" for none) at BATCHES, timed in PASSES passes
# with the host loop read beside every run (time_with_readings.py), into $OUT/host-speed-$TAG/readings.json.
#   bash results/gpu-general/host-speed/run.sh      # the fit: set AL's seeds 957-960 and 961-964, batch 1/4/16, 3 passes
#   TAG=ak HAND_OPS=949-956 CHECKER=none BATCHES=1,4 PASSES=2 bash results/gpu-general/host-speed/run.sh  # set AK, held out
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
tag=${TAG:-al} w=/tmp/host-speed-${TAG:-al}
mkdir -p "$w/files" "${OUT:?}/host-speed-$tag"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; python3 --version; date -u; } \
  > "$OUT/host-speed-$tag/host.txt" 2>&1
if [ ! -e "$w/files/.done" ]; then
  python3 results/cpu-general/hand_ops_set.py "$w/files" --seeds "${HAND_OPS:-957-960}" --batch-sizes "${BATCHES:-1,4,16}" \
    > "$w/export.log" 2>&1
  [ "${CHECKER:-961-964}" = none ] || python3 results/cpu-general/checker_nets.py "$w/files" --seeds "${CHECKER:-961-964}" \
    --batch-sizes "${BATCHES:-1,4,16}" --jobs 8 2>> "$w/export.log"
  touch "$w/files/.done"
fi
python3 results/gpu-general/host-speed/time_with_readings.py "$OUT/host-speed-$tag/readings.json" "$w"/files/*.onnx \
  --passes "${PASSES:-3}" --seconds 1.5 --budget-s "${BUDGET_S:-420}"
date -u >> "$OUT/host-speed-$tag/host.txt"
