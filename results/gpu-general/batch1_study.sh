#!/usr/bin/env bash
# Where does a batch-1 model's time go? For models that ran slower at batch 1 than their kernels add up
# to (results/gpu-general/README.md), compare per run: the runner's wall time, the device clock and
# CUPTI's GPU kernel time, at batch 1 and 4. One call per wheel bundle, as run.sh:
#   bash results/gpu-general/batch1_study.sh [BUNDLE]
set -uo pipefail
bundle=${1:-}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/gh /tmp/study
[ -n "$bundle" ] && cp -r ".gpuhost/$bundle" /tmp/gh/
if [ "$(ls /tmp/gh | wc -l)" -lt "${BUNDLES:-5}" ]; then echo "bundles so far: $(ls /tmp/gh)"; exit 0; fi
[ -e /tmp/site/.installed ] || { /tmp/gh/bundle1/offline-install /tmp/gh /tmp/site >/tmp/install.log 2>&1 && touch /tmp/site/.installed; } || { tail /tmp/install.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 - <<'PY'
from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel
models = [ZooModel(name="densenet121"), ZooModel(name="squeezenet1_1"), ZooModel(name="vit_b_16"),
          ZooModel(name="nas_s106", kind="random_nas", seed=106), ZooModel(name="nas_s102", kind="random_nas", seed=102),
          ZooModel(name="nas_s103", kind="random_nas", seed=103)]
for model in models:
    for batch in (1, 4):
        print(export_variant(ModelVariant(model, 224, batch), "/tmp/study", 17, "cuda").variant_id, flush=True)
PY
python3 -m hase_dagster.orchestration.cli cupti /tmp/study/*.onnx --runs 50 --optimization all > "${OUT:-/tmp}/batch1_study.json"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
python3 - <<'PY'
import json, os
rows = json.load(open(os.path.join(os.environ.get("OUT", "/tmp"), "batch1_study.json")))["comparisons"]
for r in rows:
    print(f"{os.path.basename(r['path']):28s} wall {r['runner_mean_ms']:.3f}  device clock {r['device_clock_median_ms']:.3f}"
          f"  CUPTI kernels {r['device_ms']:.3f}  kernels/run {r['gpu_kernels_per_run']}")
PY
