#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh pl0 .. pl29 and after gpu_run.sh has
# exported set F (/tmp/setF-gpu/files): CUPTI's GPU kernel time per run of every file of set E and set F
# (gpu_time_study.py --no-wall), set E exported first as gpu_run.sh exported it (seeds 749-750, 752-761 and
# six torchvision models, batch 1/4/16/64). Resumable: call again until it prints "all ... files done";
# every call leaves OUT/gpu_time_sets.jsonl. The files' wall times are gpu_run.sh's, not this script's.
#   BUDGET_S=480 bash results/cpu-general/gpu_cupti_sets.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
start=$(date +%s)
sete=/tmp/setE-gpu/files
mkdir -p "${OUT:?}" /tmp/cupti-sets
if [ ! -e "$sete/traits.json" ]; then
  python3 results/cpu-general/export_torchvision.py "$sete" --batch-sizes 1,4,16,64 \
    vit_b_32 densenet169 efficientnet_b2 regnet_x_3_2gf mnasnet1_3 shufflenet_v2_x2_0 2> /tmp/cupti-sets/export.log
  python3 results/cpu-general/checker_nets.py "$sete" --seeds 749-750,752-761 --batch-sizes 1,4,16,64 \
    2>> /tmp/cupti-sets/export.log > /dev/null
fi
left=$(( ${BUDGET_S:-480} - ($(date +%s) - start) ))
python3 results/gpu-general/gpu_time_study.py /tmp/cupti-sets/out "$sete" /tmp/setF-gpu/files --no-wall \
  --budget-s "$left" --log gpu_time_sets.jsonl
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u; } >> /tmp/cupti-sets/out/host.txt
cp /tmp/cupti-sets/out/gpu_time_sets.jsonl /tmp/cupti-sets/out/host.txt "$OUT"/
