#!/usr/bin/env bash
# The batch-size change stall study (issue 16) on a GPU host, in steps that resume. Every call
#   bash results/serving/stall_study.sh BUDGET_S [BUNDLE...]
# copies the carried wheel bundles (.gpuhost/bundleN: onnxruntime-gpu 1.31.1 split in 11 parts,
# bundle1 bundle1b ... bundle5 bundle5b bundle6) to /tmp/gh; once all are there it installs them into
# /tmp/site, exports resnet18 with a dynamic batch (the serving proof's export) and measures one
# configuration per step (results/serving/stall_study.py --config ...) until BUDGET_S seconds have
# passed. A step already done is skipped, so calls resume; every call copies what exists into
# $OUT/stall (one <config>.json each with every run, summary.json, summary.md, steps.log, device.txt).
# Needs on the host: python3 with torch, torchvision, onnx, numpy (the GPU image has them).
# Settings (environment): CONFIGS (the order below), BATCHES (1,4,8,16,32), WARM (20), ALTERNATE (80),
# BUNDLES (11: bundle folders expected in /tmp/gh before installing), STATE (/tmp/stall-study),
# OUT (/tmp/out), PY (python3; PY=.venv/bin/python with EP=cpu rehearses on a machine without a GPU).
set -uo pipefail
budget=${1:?budget in seconds}
shift
started=$SECONDS
state=${STATE:-/tmp/stall-study}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
mkdir -p "$state/steps" "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "$PY" = python3 ]; then
  mkdir -p /tmp/gh
  for bundle in "$@"; do cp -r ".gpuhost/$bundle" /tmp/gh/ || { echo "no .gpuhost/$bundle: carry it"; exit 1; }; done
  if [ "$(ls /tmp/gh | wc -l)" -lt "${BUNDLES:-11}" ]; then echo "bundles so far: $(ls /tmp/gh | tr '\n' ' ')"; exit 0; fi
  [ -e /tmp/site/.installed ] || { /tmp/gh/bundle1/offline-install /tmp/gh /tmp/site >/tmp/install.log 2>&1 && touch /tmp/site/.installed; } || { tail /tmp/install.log; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$state/device.txt"
  "$PY" -c "import onnxruntime as o, torch; print('onnxruntime', o.__version__, o.get_available_providers(), 'torch', torch.__version__)" | tee -a "$state/device.txt"
fi

out_of_time=0
step() {  # step NAME ESTIMATE_S COMMAND...: as in results/serving/run.sh
  local name=$1 estimate=$2; shift 2
  [ -e "$state/steps/$name" ] && return 0
  (( out_of_time )) && return 0
  if (( SECONDS - started + estimate > budget )); then
    out_of_time=1; echo "stop before $name: $((SECONDS - started)) s used"; return 0
  fi
  local t0=$SECONDS
  if "$@" > "$state/steps/$name.log" 2>&1; then
    touch "$state/steps/$name"; echo "$name: done in $((SECONDS - t0)) s"; tail -1 "$state/steps/$name.log"
  else
    echo "$name: FAILED after $((SECONDS - t0)) s"; tail -5 "$state/steps/$name.log"
    # A configuration that fails (e.g. CUDA graph capture) is recorded and not retried.
    [ "$name" != export ] && touch "$state/steps/$name"
  fi
}

model=$state/resnet18.onnx
study() { "$PY" results/serving/stall_study.py "$@"; }
step export 90 study --export "${MODEL:-resnet18}" --model "$model" --out "$state/results"
if [ -e "$state/steps/export" ]; then
  for config in ${CONFIGS:-exhaustive heuristic per-batch default per-batch-cuda-graph exhaustive-same-as-requested exhaustive-no-max-workspace}; do
    step "$config" 45 study --config "$config" --model "$model" --out "$state/results" --batches "${BATCHES:-1,4,8,16,32}" \
      --warm "${WARM:-20}" --alternate "${ALTERNATE:-80}"
  done
fi

# Every call brings back what exists so far: a machine can be taken back between calls.
rm -rf "$OUT/stall" && mkdir -p "$OUT/stall"
if ls "$state/results"/*.json > /dev/null 2>&1; then
  study --summarize --out "$state/results" > /dev/null
  cp "$state/results"/*.json "$state/results"/summary.md "$OUT/stall/"
  cp "$state/results"/*.error.txt "$OUT/stall/" 2>/dev/null
fi
cat "$state/steps"/*.log > "$OUT/stall/steps.log" 2>/dev/null
cp "$state/device.txt" "$OUT/stall/" 2>/dev/null
echo "steps done: $(ls "$state/steps" | grep -vc log) after $((SECONDS - started)) s"
