#!/usr/bin/env bash
# Predict a timed set's files with a bundle, device-free, into DEST/predictions-NAME (kernel lists dropped: the
# committed files keep each case's totals) and score it against DEST/timings-h100 (GPU) or DEST/timings (CPU):
#   bash results/cpu-general/predict_sets.sh BUNDLE NAME BATCHES FILES DEST
# e.g. set S on the H100 with the shipped bundle (FILES made by timm_set.py, see gpu_run.sh):
#   bash results/cpu-general/predict_sets.sh h100 norms 1,4,16,64 /tmp/setS/files results/cpu-general/gpu-setS
# HASE names another hase command (a wrapper), KERNELS=ort takes the kernels this machine's ORT runs (`hase predict --kernels ort`; a CPU bundle on its CPU), KERNELS=auto what `hase predict` takes by default.
set -euo pipefail
bundle=${1:?BUNDLE} name=${2:?NAME} batches=${3:?BATCHES} files=${4:?FILES} dest=${5:?DEST}
out=$dest/predictions-$name
mkdir -p "$out"
for b in ${batches//,/ }; do
  ls "$files"/*_b"$b".onnx > /dev/null 2>&1 || continue
  ${HASE:-.venv/bin/hase} predict --predictor "$bundle" --batch-size "$b" --load idle,level=0.5,level=1.0 --top 0 --json \
    --kernels "${KERNELS:-static}" "$files"/*_b"$b".onnx | .venv/bin/python -c "
import json, sys
document = json.load(sys.stdin)
for row in document['predictions']:
    row['kernel_count'] = len(row.pop('kernels'))
json.dump(document, sys.stdout, indent=1)" > "$out/predictions_b$b.json"
done
timings=$dest/timings-h100
[ -d "$timings" ] || timings=$dest
.venv/bin/python results/cpu-general/score_gpu.py "$out" "$timings" > "$dest/score-$name.md"
sed -n 3p "$dest/score-$name.md"
