#!/usr/bin/env bash
# The serving proof (issue 16) in steps that resume: every call runs
#   bash results/serving/run.sh BUDGET_S [BUNDLE]
# which copies the carried wheel bundle, installs once all bundles are there (and simpy from
# .gpuhost/serving/), then runs the next steps not yet done until BUDGET_S seconds have passed:
# the models (dynamic batch), one plan per stress level (config.pbtxt per model), then serve-bench
# per stress level (planner, batch1, triton-default at every rate scale; the brute-force grid at
# GRID_SCALES x GRID_LEVELS), then the report. Every call copies what exists so far into $OUT/serving.
# Settings (environment; GPU defaults): DEVICE (cuda), CNN (resnet18), ENC (encoder_base), CNN_SLO_MS (10),
# ENC_SLO_MS (20), CNN_RATE (300), ENC_RATE (150), BATCHES ("1 4 8 16 32"), LEVELS ("0 1 0.5"),
# SCALES (0.5,1,2.5), DURATION (2 s per run), DRAIN (1 s), GRID ("1,8,32"), GRID_DELAYS (0),
# GRID_SCALES (2.5), GRID_LEVELS (0,1), BURST_MS and SLICE_MS (0.95 and 1.75: the co-tenant's burst
# and the slice a run keeps, as hase_dagster.learn.timeslice measured them on the H100), THREADS (1),
# PREDICTOR (a predictor bundle, default h100: the shipped results/bundles/h100, no CUDA analysis
# needed; PREDICTOR= (empty) uses the data directory's predictor instead: from .gpuhost/serving/hd when
# carried, else trained here from results/gpu-general/tables), BUNDLES (7), WORK (/tmp/serving).
# SESSIONS (unset: the device's default, per-batch on cuda and shared on cpu; shared or per-batch: one ORT
# session for all batch sizes or one per batch size) and CUDNN_SEARCH (EXHAUSTIVE) set the plan's runtime:
# block (see results/serving/stall_study.sh and README for why).
# PY=.venv/bin/python (and no bundle) rehearses the steps on a machine that has the stack (the CPU run).
set -uo pipefail
budget=${1:?budget in seconds}
bundle=${2:-}
started=$SECONDS
work=${WORK:-/tmp/serving}
steps=$work/steps
mkdir -p "$steps"
export PYTHONPATH=/tmp/site:$PWD HASE_DATA_DIR=${HASE_DATA_DIR:-$work/hd} DAGSTER_HOME=$work/dh PYTHONUNBUFFERED=1
export PY=${PY:-python3}
if [ "$PY" = python3 ]; then
  mkdir -p /tmp/gh
  [ -n "$bundle" ] && cp -r ".gpuhost/$bundle" /tmp/gh/
  if [ "$(ls /tmp/gh | wc -l)" -lt "${BUNDLES:-7}" ]; then echo "bundles so far: $(ls /tmp/gh)"; exit 0; fi
  [ -e /tmp/site/.installed ] || { /tmp/gh/bundle1/offline-install /tmp/gh /tmp/site >/tmp/install.log 2>&1 && touch /tmp/site/.installed; } || { tail /tmp/install.log; exit 1; }
  python3 -c "import simpy" 2>/dev/null || python3 -m pip install -q --no-deps --no-index --target /tmp/site .gpuhost/serving/simpy-*.whl || { echo "simpy missing: carry .gpuhost/serving"; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
device=${DEVICE:-cuda}
predictor=${PREDICTOR-h100}
if [ -z "$predictor" ] && [ -d .gpuhost/serving/hd ] && [ ! -e "$HASE_DATA_DIR/hase.duckdb" ]; then
  mkdir -p "$HASE_DATA_DIR" && cp -r .gpuhost/serving/hd/. "$HASE_DATA_DIR/"
fi

hase() { "$PY" -m hase_dagster.orchestration.cli "$@"; }
export -f hase
out_of_time=0
step() {  # step NAME ESTIMATE_S COMMAND...: as in results/gpu-grid/run.sh
  local name=$1 estimate=$2; shift 2
  [ -e "$steps/$name" ] && return 0
  (( out_of_time )) && return 0
  if (( SECONDS - started + estimate > budget )); then
    out_of_time=1; echo "stop before $name: $((SECONDS - started)) s used"; return 0
  fi
  local t0=$SECONDS
  if "$@" > "$steps/$name.log" 2>&1; then
    touch "$steps/$name"; echo "$name: done in $((SECONDS - t0)) s"
  else
    echo "$name: FAILED after $((SECONDS - t0)) s"; tail -20 "$steps/$name.log"
  fi
}

cnn=${CNN:-resnet18} enc=${ENC:-encoder_base}
batches=$(echo ${BATCHES:-1 4 8 16 32} | tr ' ' ',')
cat > "$work/plan.yaml" <<EOF
# Written by results/serving/run.sh
device: $device
load: level=0.0
batch_sizes: [$batches]
cotenant: {burst_ms: ${BURST_MS:-0.95}, slice_ms: ${SLICE_MS:-1.75}}
runtime: {${SESSIONS:+sessions: $SESSIONS, }cudnn_conv_algo_search: ${CUDNN_SEARCH:-EXHAUSTIVE}}
${predictor:+predictor: $predictor}
models:
  - {name: cnn, path: models/$cnn.onnx, slo_ms: ${CNN_SLO_MS:-10}, percentile: 99, priority: 1, rate_per_s: ${CNN_RATE:-300}}
  - {name: encoder, path: models/$enc.onnx, slo_ms: ${ENC_SLO_MS:-20}, percentile: 90, priority: 2, rate_per_s: ${ENC_RATE:-150}}
EOF
[ -n "$predictor" ] || [ -e "$HASE_DATA_DIR/regressors/$device/predictor" ] || \
  step predictor 240 hase import-tables results/gpu-general/tables --kind xgboost
step models 60 hase serving-models "$work/models" "$cnn" "$enc"
levels=${LEVELS:-0 1 0.5}
first=1
for level in $levels; do
  # The first plan finds every model's kernels at every batch size (cached for the rest): static
  # detection with a bundle, a CUDA analysis without one.
  step "plan-$level" $(( first ? 120 : 30 )) hase plan "$work/plan.yaml" --load "level=$level" --out "$work/plans/level-$level"
  first=0
done
for level in $levels; do
  step "bench-$level" 150 hase serve-bench "$work/plan.yaml" --stress "$level" --rate-scale "${SCALES:-0.5,1,2.5}" \
    --config planner,batch1,triton-default,grid --grid-batches "${GRID:-1,8,32}" --grid-delays-ms "${GRID_DELAYS:-0}" \
    --grid-rate-scales "${GRID_SCALES:-2.5}" --grid-stress "${GRID_LEVELS:-0,1}" --duration "${DURATION:-2}" \
    --drain "${DRAIN:-1}" --threads "${THREADS:-1}" --out "$work/bench"
done
[ -e "$work/bench/runs.jsonl" ] && hase serving-report "$work/bench" --write > /dev/null

# Every call brings back what exists so far: a machine can be taken back between calls.
rm -rf "$OUT/serving" && mkdir -p "$OUT/serving"
cp -r "$work/plan.yaml" "$work/plans" "$OUT/serving/" 2>/dev/null
[ -d "$work/bench" ] && cp -r "$work/bench" "$OUT/serving/"
cat "$steps"/*.log > "$OUT/serving/steps.log" 2>/dev/null
[ "$PY" = python3 ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/serving/device.txt"
echo "steps done: $(ls "$steps" | grep -vc log) after $((SECONDS - started)) s"
