#!/usr/bin/env bash
# Issue 15 A: the device profile on a GPU host, in steps that resume. Every call
#   bash results/device/run.sh BUDGET_S
# runs the steps not yet done, each in its own process, until BUDGET_S seconds have passed, then
# merges what exists into one profile (JSON + report.md + PNG plots) and copies it to $OUT.
# Steps (state in $STATE, default /tmp/hase-device, so a second call on the same machine resumes):
#   cpu        the host's CPU counterpart (torch/numpy GEMM, bandwidth, ORT CPU overhead), quick
#   core       cuBLAS GEMM per precision, the event timer against CUPTI, HBM bandwidth vs the NVML
#              peak, launch latency, ORT's per-run overhead on the CUDA EP
#   triton     Hase's autotuned Triton GEMM against cuBLAS (autotuning and compiles included)
#   timeslice  the probe's timeline alone, beside a spinning second process, beside the stressor
#   memory     issue 15 B: `hase memory --ep cuda` (predicted vs measured peak) on resnet50,
#              mobilenet_v2 and efficientnet_b0 at batch 1 and 32 (exported here; needs torchvision)
#   precision  issue 15 C: `hase precision --ep cuda` (fp16/int8 speed-up, agreement, INT8 kernels)
#              on resnet50, mobilenet_v2 and efficientnet_b0 at batch 32
#   arena      issue 15 B check: ORT's arena regions/reservations per model and CUDA EP setting
#              (arena_cuda.json rewritten after each of its 24 sessions: a cut-short run keeps them)
# Settings (environment): PY (python3; .venv/bin/python rehearses on a dev machine), OUT (/tmp/out),
# STATE (/tmp/hase-device), QUICK=1 (--quick sizes everywhere), STEPS (names, space- or
# comma-separated: run only these, e.g. STEPS="precision arena"; default every step). No step runs
# past the budget: one still running then is stopped (FAILED, retried by the next call) so that what
# exists is still copied to $OUT. This script's own lines are kept in $OUT/device/run.log. Needs
# torch (with triton), numpy, pandas, matplotlib, nvidia-ml-py, onnx and onnxruntime-gpu (the
# lead's wheels at /tmp/site).
set -uo pipefail
budget=${1:-}
if ! [[ "$budget" =~ ^[0-9]+$ ]] || (( budget <= 0 )); then
  echo "run.sh: the budget must be a positive whole number of seconds, got '$budget'" >&2; exit 2
fi
started=$SECONDS
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PY:-python3}
OUT=${OUT:-/tmp/out}
STATE=${STATE:-/tmp/hase-device}
quick=()
[ -n "${QUICK:-}" ] && quick=(--quick)
known=" cpu core triton timeslice memory precision arena "
only=${STEPS:-}
only=" ${only//,/ } "
for name in $only; do
  [[ "$known" == *" $name "* ]] || { echo "run.sh: unknown step '$name' in STEPS; the steps:$known" >&2; exit 2; }
done
[ -n "${only// /}" ] || only=$known
mkdir -p "$OUT" "$STATE/steps"
# say LINE: print it and keep it for $OUT/device/run.log (steps.log has only the steps' own output).
say() { echo "$@"; echo "$@" >> "$STATE/run.log"; }
say "run.sh $budget at $(date -u +%FT%TZ), steps:$only"

hase() { "$PY" -m hase_dagster.orchestration.cli "$@"; }
export PY
export -f hase  # for the step that runs in `bash -c`
# step NAME ESTIMATE_S COMMAND...: run unless done or not in STEPS; skip it (and every later step)
# when fewer than ESTIMATE_S seconds are left; stop it when the budget is spent (timeout signals the
# step's whole process group). A failed step is reported and retried by the next call.
out_of_time=0
step() {
  local name=$1 estimate=$2; shift 2
  [[ "$only" == *" $name "* ]] || { say "$name: not in STEPS"; return 0; }
  [ -e "$STATE/steps/$name" ] && { say "$name: done before"; return 0; }
  (( out_of_time )) && return 0
  if (( SECONDS - started + estimate > budget )); then
    out_of_time=1; say "stop before $name: $((SECONDS - started)) s used of $budget"; return 0
  fi
  local t0=$SECONDS
  if timeout -k 5 $((budget - (SECONDS - started))) bash -c '"$@"' _ "$@" > "$STATE/steps/$name.log" 2>&1; then
    touch "$STATE/steps/$name"; say "$name: done in $((SECONDS - t0)) s"
  else
    say "$name: FAILED after $((SECONDS - t0)) s (rc $?; 124: stopped at the budget)"; tail -20 "$STATE/steps/$name.log"
  fi
}

step cpu 30 hase device-profile --device cpu --quick --out "$STATE/cpu"
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null)"
  step core 90 hase device-profile --device cuda "${quick[@]}" --steps gemm,timer_check,bandwidth,launch,ort --out "$STATE/core"
  step triton 150 hase device-profile --device cuda "${quick[@]}" --steps triton --out "$STATE/triton"
  step timeslice 60 hase device-profile --device cuda "${quick[@]}" --steps timeslice --out "$STATE/timeslice"
  # Issue 15 B on the GPU: predicted against measured peak memory (NVML per process, else
  # cudaMemGetInfo) of a few zoo models at batch 1 and 32 on the CUDA EP.
  step memory 100 bash -c '"$PY" results/device/export_models.py "$1/models" 1,32 resnet50,mobilenet_v2,efficientnet_b0 \
    && hase memory "$1"/models/*.onnx --ep cuda --json > "$1/memory_cuda.json"' _ "$STATE"
  # Issue 15 C on the GPU: fp16 and int8 (QDQ) variants on the CUDA EP: speed-up, top-1 agreement,
  # and which kernels really run in INT8 there and which fall back (float or the CPU EP).
  step precision 160 bash -c '"$PY" results/device/export_models.py "$1/models" 32 resnet50,mobilenet_v2,efficientnet_b0 \
    && hase precision "$1"/models/{resnet50,mobilenet_v2,efficientnet_b0}_i224_b32.onnx --ep cuda \
       --out "$1/precision" --json > "$1/precision_cuda.json"' _ "$STATE"
  # Issue 15 B, the measurement check: ORT's arena regions and reservations per model (verbose log)
  # beside NVML/cudaMemGetInfo, with the default settings, kSameAsRequested, no max cuDNN workspace,
  # and HEURISTIC search (24 sessions, one child process each).
  step arena 240 bash -c '"$PY" results/device/export_models.py "$1/models" 1,32 resnet50,mobilenet_v2,efficientnet_b0 \
    && "$PY" results/device/arena_log.py "$1/arena_cuda.json" "$1"/models/*_i224_b1.onnx "$1"/models/*_i224_b32.onnx' _ "$STATE"
  parts=()
  for part in core triton timeslice; do [ -e "$STATE/$part/device_profile.json" ] && parts+=("$STATE/$part"); done
  if (( ${#parts[@]} )); then
    hase device-profile --merge "${parts[@]}" --out "$STATE/gpu" > "$STATE/steps/merge.log" 2>&1 \
      || { echo "merge: FAILED"; tail -5 "$STATE/steps/merge.log"; }
  fi
else
  say "no CUDA GPU here (torch sees none): the GPU steps (core, triton, timeslice, memory, precision, arena) are skipped"
fi

# Every call brings back what exists so far: a machine can be taken back between calls.
rm -rf "$OUT/device" && mkdir -p "$OUT/device"
for part in cpu gpu; do
  [ -d "$STATE/$part" ] && cp -r "$STATE/$part" "$OUT/device/"
done
for result in memory_cuda.json precision_cuda.json arena_cuda.json; do
  [ -e "$STATE/$result" ] && cp "$STATE/$result" "$OUT/device/"
done
cat "$STATE"/steps/*.log > "$OUT/device/steps.log" 2>/dev/null
done_steps=$(ls "$STATE/steps" | grep -v '\.log$' | tr '\n' ' ')
say "steps done: $(wc -w <<< "$done_steps") ($done_steps) after $((SECONDS - started)) s"
cp "$STATE/run.log" "$OUT/device/"
tar -C "$OUT" -czf "$OUT/device-profile.tar.gz" device
for part in cpu gpu; do
  if [ -e "$OUT/device/$part/device_profile.json" ]; then sed -n '1,12p' "$OUT/device/$part/report.md"; fi
done
