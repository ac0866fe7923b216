#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl23: export three sets at batch 1, 4, 16
# and 64 and run gpu_time_study.py on them (settled wall time, CUPTI kernel time per run), anchors first:
#   anchors: training networks of the h100 bundle (resnet18, resnet50, mobilenet_v2, nas_s101-s104);
#   checker: the independent generator's 24 networks (results/cpu-general/checker_nets.py, seeds 701-724);
#   ns2:     the second never-seen set (hase.yaml profile gpu_never_seen_2).
# Resumable: call again until it prints "all ... files done"; every call leaves OUT/gpu_time.jsonl.
#   BUDGET_S=480 bash results/gpu-general/gpu_time_study.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
work=${WORK:-/tmp/gpu-time}
mkdir -p "$work" "${OUT:?}"
start=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } >> "$work/host.txt" 2>&1
if [ ! -e "$work/exported" ]; then
  python3 - "$work" <<'PY' 2> "$work/export.log"
import sys
from concurrent.futures import ProcessPoolExecutor
from hase_dagster.analysis.zoo import ModelVariant, export_variant, variants
from hase_dagster.core.config import ZooModel, load_config

work = sys.argv[1]
anchors = [ZooModel(name=n) for n in ("resnet18", "resnet50", "mobilenet_v2")]
anchors += [ZooModel(name=f"nas_s{s}", kind="random_nas", seed=s) for s in (101, 102, 103, 104)]
ns2 = load_config().profiles["gpu_never_seen_2"]
jobs = [(ModelVariant(m, 224, b), f"{work}/anchors") for b in (1, 4, 16, 64) for m in anchors]
jobs += [(v, f"{work}/ns2") for b in (1, 4, 16, 64) for v in variants(ns2, b) if v.precision == "fp32"]

def one(job):
    return export_variant(job[0], job[1], 17, "cpu").variant_id

with ProcessPoolExecutor(8) as pool:
    for name in pool.map(one, jobs):
        print(name, flush=True)
PY
  python3 results/cpu-general/checker_nets.py "$work/checker" --seeds 701-724 --batch-sizes 1,4,16,64 2>> "$work/export.log" >/dev/null
  ls "$work"/anchors/*.onnx "$work"/checker/*.onnx "$work"/ns2/*.onnx | wc -l && touch "$work/exported"
fi
left=$(( ${BUDGET_S:-480} - ($(date +%s) - start) ))
python3 results/gpu-general/gpu_time_study.py "$work/out" "$work/anchors" "$work/checker" "$work/ns2" --budget-s "$left" ${STUDY_ARGS:-}
cp "$work/out/gpu_time.jsonl" "$work/host.txt" "$work/export.log" "$OUT/"
wc -l "$OUT/gpu_time.jsonl"
