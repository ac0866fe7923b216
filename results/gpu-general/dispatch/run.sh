#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7: export the networks (once), then
# dispatch_study.py over them into $OUT/dispatch.jsonl. Resumable: call again until every file is done.
#   - train: networks on the training side (hand_ops_set.py seeds 1001-1006 and the generator's 1000-1005, which went
#     to probes and the fusion rules; eight torchvision classifiers of the zoo's kinds), batch 1: the per-op table;
#   - setAR: set AR's twelve networks at batch 1 and 4, kept apart to check the table blind and to find why
#     hops_s1029 / hops_s1032 ran slower at batch 1 than at batch 4 at every stress level.
#   BUDGET_S=400 bash results/gpu-general/dispatch/run.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
work=${WORK:-/tmp/dispatch}
mkdir -p "$work/train" "$work/setAR" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } >> "$work/host.txt" 2>&1
if [ ! -e "$work/train/.exported" ]; then
  { python3 results/cpu-general/hand_ops_set.py "$work/train" --seeds 1001-1006 --batch-sizes 1
    python3 results/cpu-general/checker_nets.py "$work/train" --seeds 1000-1005 --batch-sizes 1 --jobs 6
    python3 results/cpu-general/export_torchvision.py "$work/train" --batch-sizes 1 --jobs 8 resnet50 mobilenet_v3_large \
      efficientnet_b0 convnext_tiny densenet121 vit_b_16 swin_t regnet_y_800mf; } >> "$work/export.log" 2>&1
  touch "$work/train/.exported"
fi
if [ ! -e "$work/setAR/.exported" ]; then
  { python3 results/cpu-general/hand_ops_set.py "$work/setAR" --seeds 1029-1034 --batch-sizes 1,4
    python3 results/cpu-general/checker_nets.py "$work/setAR" --seeds 4012-4017 --batch-sizes 1,4 --jobs 6; } >> "$work/export.log" 2>&1
  touch "$work/setAR/.exported"
fi
echo "exported at $SECONDS s: $(ls "$work"/train/*.onnx | wc -l) train, $(ls "$work"/setAR/*.onnx | wc -l) setAR"
python3 results/gpu-general/dispatch/dispatch_study.py "$work/out" "$work"/train/*.onnx "$work"/setAR/*_b1.onnx \
  "$work"/setAR/*_b4.onnx --budget-s $((${BUDGET_S:-400} - SECONDS))
date -u >> "$work/host.txt"
cp "$work/out/dispatch.jsonl" "$work/host.txt" "$work/export.log" "$OUT/"
