#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh pl0 .. pl15: time the second never-seen
# set (profile gpu_never_seen_2 in hase.yaml) at batch 1/16/4/64, idle and at stress 1.0 first, then 0.5,
# with results/gpu-general/remeasure_models.py (it resumes: run again until every partition is done),
# and predict every exported file device-free with the H100 bundle (kernels by static detection, as a
# user without the GPU would). Everything done so far goes to $OUT.
#   bash results/gpu-general/never-seen-2/run.sh [BUDGET_S=540]
set -uo pipefail
budget=${1:-540}
export PYTHONPATH=$PWD:/tmp/site
work=/tmp/never-seen-2
mkdir -p "$work" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; } > "$work/host.txt" 2>&1
timeout --signal=INT $((budget + 20)) python3 results/gpu-general/remeasure_models.py "$work" \
  --profiles gpu_never_seen_2 --batches 1 16 4 64 --levels 0.0 1.0 0.5 --budget-s "$budget"
for batch in 1 4 16 64; do
  files=$(ls /tmp/remeasure-models-cuda/*_b"$batch".onnx 2>/dev/null) || continue
  [ -s "$work/predictions_b$batch.json" ] && continue
  python3 -m hase_dagster.orchestration.cli predict --predictor results/bundles/h100 --batch-size "$batch" \
      --load idle,level=0.5,level=1.0 --top 0 --json $files \
    | python3 -c "
import json, sys
answer = json.load(sys.stdin)
for row in answer.get('predictions', [answer]):
    row.pop('kernels', None)
json.dump(answer, sys.stdout, indent=1)" > "$work/predictions_b$batch.partial" \
    && mv "$work/predictions_b$batch.partial" "$work/predictions_b$batch.json"
done
cp -r "$work/." "$OUT/"
ls -la "$OUT" "$OUT/remeasure" 2>/dev/null | tail -20
