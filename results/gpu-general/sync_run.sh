#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh: export the batch-1 files of sets S and T (timm,
# from the wheel carried in .gpuhost/timm) and a few torchvision references, then profile each one's nodes idle and
# under load (sync_study.py; it resumes: call again until every level is done). Tarball of everything but the
# files under $OUT.
# Environment: WORK (/tmp/sync), LEVELS (0.0,1.0), BUDGET_S (420), TIMM_WHEEL, REFERENCES (torchvision models).
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
work=${WORK:-/tmp/sync}
mkdir -p "$work" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } >> "$work/host.txt" 2>&1
if [ ! -e "$work/files/.done" ]; then
  [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site "${TIMM_WHEEL:?a timm wheel}" >> "$work/export.log" 2>&1
  PYTHONPATH=$PYTHONPATH:/tmp/timm-site python3 results/cpu-general/timm_set.py "$work/files" --batch-sizes 1 --jobs 8 \
    --ep cuda $(cat results/cpu-general/setS-models.txt results/cpu-general/setT-models.txt) >> "$work/export.log" 2>&1
  python3 results/cpu-general/export_torchvision.py "$work/files" --batch-sizes 1 --jobs 8 \
    ${REFERENCES:-resnet34 efficientnet_b0 densenet121 mobilenet_v3_small squeezenet1_1 vit_b_16 shufflenet_v2_x1_0 convnext_tiny} \
    >> "$work/export.log" 2>&1
  touch "$work/files/.done"
fi
timeout --signal=INT "${BUDGET_S:-420}" python3 results/gpu-general/sync_study.py run "$work/files" "$work/profiles" \
  --profile gpu --levels "${LEVELS:-0.0,1.0}"
date -u >> "$work/host.txt"
tar -C "$work" --exclude=files -czf "$OUT/$(basename "$work").tar.gz" . && tar -tzf "$OUT/$(basename "$work").tar.gz"
