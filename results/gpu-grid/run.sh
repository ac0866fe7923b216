#!/usr/bin/env bash
# The GPU runs (issues 5 and 11) on a `device` machine, in steps that resume: every call runs
#   bash results/gpu-grid/run.sh BUDGET_S [BUNDLE]
# which copies the carried wheel bundle, installs once all bundles are there, then runs the next
# steps not yet done (analysis per batch size, benchmarks per stress level x batch size, learning,
# CUPTI, export) until BUDGET_S seconds have passed. Results land in $OUT.
# Settings (environment): PROFILE (gpu), BATCHES ("16 64 128"), LEVELS ("0.0 0.5 1.0"), CLOCK_EVERY
# (8: every Nth kernel checked against CUPTI, gpu profile only), BUNDLES (5: how many wheel bundles
# the wheelhouse has), BENCHMARK_S and ANALYSIS_S (override the per-batch estimates below), SKIP_LEARNING=1
# (leave learning to `hase evaluate-tables` on the exports), HASE_DATA_DIR (/tmp/hd: one per profile
# run on the same machine; its steps/ folder is what resumes), EXPORT_NAME (gpu-grid: $OUT/NAME.tar.gz).
set -uo pipefail
budget=${1:?budget in seconds}
bundle=${2:-}
started=$SECONDS
export PYTHONPATH=/tmp/site:$PWD HASE_DATA_DIR=${HASE_DATA_DIR:-/tmp/hd} DAGSTER_HOME=/tmp/dh PYTHONUNBUFFERED=1
hd=$HASE_DATA_DIR
steps=$hd/steps
mkdir -p /tmp/gh $steps
# PY=.venv/bin/python (and no bundle) rehearses the steps on a machine that has the stack.
export PY=${PY:-python3}
if [ "$PY" = python3 ]; then
  [ -n "$bundle" ] && cp -r ".gpuhost/$bundle" /tmp/gh/
  if [ "$(ls /tmp/gh | wc -l)" -lt "${BUNDLES:-5}" ]; then echo "bundles so far: $(ls /tmp/gh)"; exit 0; fi
  [ -e /tmp/site/.installed ] || { /tmp/gh/bundle1/offline-install /tmp/gh /tmp/site >/tmp/install.log 2>&1 && touch /tmp/site/.installed; } || { tail /tmp/install.log; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

hase() { "$PY" -m hase_dagster.orchestration.cli "$@"; }
export -f hase  # for steps that run in `bash -c`
# step NAME ESTIMATE_S COMMAND...: run unless done; skip (and every later step) when fewer than
# ESTIMATE_S seconds are left. A failed step is reported and retried by the next call.
out_of_time=0
step() {
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
    echo "$name: FAILED after $((SECONDS - t0)) s"; tail -40 "$steps/$name.log"
  fi
}

# Batch sizes in the order they are run (BATCHES="16" first: a complete small grid before a bigger
# one); each step's estimate is what it took on the H100 (analysis, then one benchmark partition).
batches=${BATCHES:-16 64 128}
levels=${LEVELS:-0.0 0.5 1.0}
declare -A analysis_s=([1]=150 [4]=150 [16]=150 [64]=140 [128]=240) benchmark_s=([1]=240 [4]=240 [16]=240 [64]=300 [128]=480)
# The device clock checked against CUPTI on every 8th kernel of the first batch size before any
# benchmark uses it.
clocks() {
  ls $hd/kernels/cuda/*__${1}x*.onnx | awk "NR % ${CLOCK_EVERY:-8} == 1" > $hd/clock_sample.txt
  hase cupti $(cat $hd/clock_sample.txt) --runs 30 --max-clock-error 0.15 > $hd/cupti_kernels.json
}
for batch in $batches; do
  step "analysis-b$batch" "${ANALYSIS_S:-${analysis_s[$batch]}}" hase materialize --profile ${PROFILE:-gpu} --stage analysis --batch-size "$batch"
  if [ "$batch" = "${batches%% *}" ] && [ "${PROFILE:-gpu}" = gpu ]; then
    step clocks 90 clocks "$batch"
    [ -e "$steps/clocks" ] || { (( out_of_time )) || echo "the device clock failed its check: no benchmarks"; break; }
  fi
  for level in $levels; do
    step "benchmark-$level-b$batch" "${BENCHMARK_S:-${benchmark_s[$batch]}}" hase materialize --profile ${PROFILE:-gpu} --stage benchmark --stress-level "$level" --batch-size "$batch"
  done
done
if [ -z "${SKIP_LEARNING:-}" ]; then
  step "learning-${batches// /-}" 150 hase materialize --profile ${PROFILE:-gpu} --stage learning
  first_batch_models=($hd/models/*_b${batches%% *}.onnx)
  step cupti 90 bash -c "hase cupti ${first_batch_models[*]} --runs 20 --optimization all > $hd/cupti_models.json"
fi

# Every call brings back what exists so far: a machine can be taken back between calls.
rm -rf /tmp/export && mkdir -p /tmp/export/tables
hase report --export /tmp/export/tables > /tmp/export/benchmark_report.md
cp $hd/reports/*/* $hd/regressors/*/predictor.schema.json $hd/cupti_*.json /tmp/export/ 2>/dev/null
cat $steps/*.log > /tmp/export/steps.log
tar -C /tmp/export -czf "$OUT/${EXPORT_NAME:-gpu-grid}.tar.gz" .
ls /tmp/export /tmp/export/tables
echo "steps done: $(ls $steps | grep -vc log) after $((SECONDS - started)) s"
