#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh: export the load-sensitive timm models of sets S
# and T (coat_lite_tiny, xcit_nano, rexnet_100, crossvit_tiny: 2-4x slower at stress 1.0) and insensitive ones
# beside them at batch 1 and 64, then trace them with CUPTI idle and under load (cupti_load_study.py; it resumes).
# Environment: WORK (/tmp/cupti), LEVELS (0.0,1.0), BUDGET_S (420), TIMM_WHEEL, MODELS (timm models), BATCHES (1,64).
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
work=${WORK:-/tmp/cupti}
mkdir -p "$work" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } >> "$work/host.txt" 2>&1
if [ ! -e "$work/files/.done" ]; then
  [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site "${TIMM_WHEEL:?a timm wheel}" >> "$work/export.log" 2>&1
  PYTHONPATH=$PYTHONPATH:/tmp/timm-site python3 results/cpu-general/timm_set.py "$work/files" --batch-sizes ${BATCHES:-1,64} --jobs 8 \
    --ep cuda ${MODELS:-coat_lite_tiny xcit_nano_12_p16_224 rexnet_100 crossvit_tiny_240 botnet26t_256 ghostnet_100 gcvit_xxtiny tiny_vit_5m_224} \
    >> "$work/export.log" 2>&1
  touch "$work/files/.done"
fi
timeout --signal=INT "${BUDGET_S:-420}" python3 results/gpu-general/cupti_load_study.py run "$work/files" "$work/traces" \
  --profile gpu --levels "${LEVELS:-0.0,1.0}"
python3 results/gpu-general/cupti_load_study.py report "$work/traces" > "$work/report.md"
date -u >> "$work/host.txt"
tar -C "$work" --exclude=files -czf "$OUT/$(basename "$work").tar.gz" . && cat "$work/report.md"
