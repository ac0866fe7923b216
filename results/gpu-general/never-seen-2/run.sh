#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh pl0 .. pl23: time the second never-seen
# set (profile gpu_never_seen_2 in hase.yaml) at batch 1/16/4/64/128, idle and at stress 1.0 first, then
# 0.5, with results/gpu-general/remeasure_models.py (it resumes: run again until every partition is
# done), and predict every exported file device-free with the H100 bundle (kernels by static detection,
# as a user without the GPU would). The host's launch and ORT per-run overheads (`hase device-profile
# --steps launch,ort`) are measured before and after: batch-1 latency follows the host's speed.
# Everything done so far goes to $OUT/<work folder name>.tar.gz.
#   bash results/gpu-general/never-seen-2/run.sh [BUDGET_S=540]
# Environment: WORK (/tmp/never-seen-2), PROFILES (gpu_never_seen_2), ONLY (model names; default all),
# BATCHES ("1 16 4 64 128"), LEVELS ("0.0 1.0 0.5"), PREDICT (1; 0: no predictions).
set -uo pipefail
budget=${1:-540}
export PYTHONPATH=$PWD:/tmp/site
work=${WORK:-/tmp/never-seen-2}
batches=${BATCHES:-1 16 4 64 128}
mkdir -p "$work" "${OUT:?}"
hase() { python3 -m hase_dagster.orchestration.cli "$@"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; } > "$work/host.txt" 2>&1
host_overheads() {  # $1: before or after
  [ -s "$work/host-overheads-$1.json" ] && return
  hase device-profile --device cuda --steps launch,ort --out "$work/device-profile-$1" > /dev/null \
    && cp "$work/device-profile-$1/device_profile.json" "$work/host-overheads-$1.json"
}
host_overheads before
only=()
[ -n "${ONLY:-}" ] && only=(--only $ONLY)
timeout --signal=INT $((budget + 20)) python3 results/gpu-general/remeasure_models.py "$work" \
  --profiles ${PROFILES:-gpu_never_seen_2} --batches $batches --levels ${LEVELS:-0.0 1.0 0.5} \
  --budget-s "$budget" "${only[@]}"
host_overheads after
for batch in $batches; do
  [ "${PREDICT:-1}" = 1 ] || break
  files=$(ls /tmp/remeasure-models-cuda/*_b"$batch".onnx 2>/dev/null) || continue
  [ -s "$work/predictions_b$batch.json" ] && continue
  hase predict --predictor results/bundles/h100 --batch-size "$batch" --load idle,level=0.5,level=1.0 --top 0 \
      --json $files \
    | python3 -c "
import json, sys
answer = json.load(sys.stdin)
for row in answer.get('predictions', [answer]):
    row.pop('kernels', None)
json.dump(answer, sys.stdout, indent=1)" > "$work/predictions_b$batch.partial" \
    && mv "$work/predictions_b$batch.partial" "$work/predictions_b$batch.json"
done
# One file: the device tool brings back only a few files a call.
tar -C "$work" -czf "$OUT/$(basename "$work").tar.gz" . && tar -tzf "$OUT/$(basename "$work").tar.gz"
