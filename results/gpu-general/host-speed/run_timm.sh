#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7 (the timm wheel carried in .gpuhost/timm): set
# AL's timm models at batch 1 and 4, timed in two passes with the host loop read beside every run, into
# $OUT/host-speed-timm/readings.json: the held-out check of the correction fitted on run.sh's networks.
#   BUDGET_S=200 bash results/gpu-general/host-speed/run_timm.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
w=/tmp/host-speed-timm
mkdir -p "$w/files" "${OUT:?}/host-speed-timm"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; python3 --version; date -u; } \
  > "$OUT/host-speed-timm/host.txt" 2>&1
if [ ! -e "$w/files/.done" ]; then
  [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site .gpuhost/timm/timm-*.whl
  PYTHONPATH=$PYTHONPATH:/tmp/timm-site python3 results/cpu-general/timm_set.py "$w/files" --batch-sizes 1,4 --jobs 8 \
    --ep cuda $(cat results/cpu-general/setAL-models.txt) > "$w/export.log" 2>&1
  touch "$w/files/.done"
fi
python3 results/gpu-general/host-speed/time_with_readings.py "$OUT/host-speed-timm/readings.json" "$w"/files/*.onnx \
  --passes 2 --seconds 1.5 --budget-s "${BUDGET_S:-200}"
date -u >> "$OUT/host-speed-timm/host.txt"
