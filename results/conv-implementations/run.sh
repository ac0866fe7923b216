#!/usr/bin/env bash
# Issue 14 B on a GPU host: convolution implementations compared over the full grid (27 cases x
# fp32/fp16/bf16, then tf32), in steps that resume. Every call
#   bash results/conv-implementations/run.sh BUDGET_S [BUNDLE ...]
# copies the carried wheel bundles (.gpuhost/BUNDLE) into /tmp/gh, installs onnxruntime-gpu and
# pydantic (bundles 1-6 with 1b-5b, and bundle19) once they are all there, runs the steps not yet done until BUDGET_S seconds
# have passed, writes the report of every row so far and copies it to $OUT/conv-implementations/.
# A step that runs out of time mid-grid stops between cases; the next call resumes at the next case
# (rows in $STATE/out/rows.jsonl).
# Steps, each its own process (torch and JAX need nothing carried: the host image has torch, triton
# and jax with the CUDA 13 plugin):
#   torch-P   im2col_torch, im2col_torch_compile, conv2d_torch in precision P (fp32, fp16, bf16)
#   jax-P     conv_jax, im2col_jax in P
#   ort-P     conv_ort in fp32 and fp16 (ORT's Conv has no bf16), once onnxruntime-gpu runs CUDA
#   tf32      every implementation with TF32 allowed (last; TF32=0 skips it)
# Settings (environment): PY (python3; .venv/bin/python rehearses on a dev machine with DEVICE=cpu),
# OUT (/tmp/out), STATE (/tmp/hase-conv), DEVICE (cuda), GRID (full), TF32 (1), ORT_PARTS (11: the
# pieces of the onnxruntime-gpu wheel in bundles 1-5, 1b-5b, 6), JAX_BUNDLES (optional: install the
# jax 0.12.0.1 CUDA 13 wheels of bundles 10-17 into /tmp/site-jax when the host's JAX sees no GPU).
set -uo pipefail
budget=${1:-}
if ! [[ "$budget" =~ ^[0-9]+$ ]] || (( budget <= 0 )); then
  echo "run.sh: the budget must be a positive whole number of seconds, got '$budget'" >&2; exit 2
fi
shift
started=$SECONDS
PY=${PY:-python3}
OUT=${OUT:-/tmp/out}
STATE=${STATE:-/tmp/hase-conv}
DEVICE=${DEVICE:-cuda}
GRID=${GRID:-full}
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p "$OUT" "$STATE/steps" /tmp/gh /tmp/gh-jax

# Carried bundles: the JAX ones (their wheels start with jax) apart from the rest.
for bundle in "$@"; do
  if [ ! -d ".gpuhost/$bundle" ]; then echo "no .gpuhost/$bundle in this call's tree (carry it)"; continue; fi
  if ls ".gpuhost/$bundle" | grep -q '^jax'; then cp -r ".gpuhost/$bundle" /tmp/gh-jax/; else cp -r ".gpuhost/$bundle" /tmp/gh/; fi
done
ort_cuda() { "$PY" -c "import onnxruntime as o, sys; sys.exit(0 if 'CUDAExecutionProvider' in o.get_available_providers() else 1)" 2>/dev/null; }
if [ "$DEVICE" = cuda ] && ! ort_cuda; then
  # The ORT wheel's 11 pieces (bundles 1-5, 1b-5b, 6) and pydantic for Hase's runner: bundle19 (2.7 MB,
  # pydantic's four wheels out of bundle7) or bundle7 itself.
  parts=$(find /tmp/gh -name 'onnxruntime_gpu-*.whl.part.*' 2>/dev/null | wc -l)
  deps=$(find /tmp/gh -name 'pydantic_core-*.whl' 2>/dev/null | wc -l)
  if [ "$parts" -ge "${ORT_PARTS:-11}" ] && [ "$deps" -ge 1 ]; then
    "$(find /tmp/gh -name offline-install | head -1)" /tmp/gh /tmp/site > "$STATE/install.log" 2>&1 \
      && touch /tmp/site/.installed || { echo "installing the ORT wheels FAILED:"; tail -5 "$STATE/install.log"; }
  else
    echo "onnxruntime-gpu: $parts of ${ORT_PARTS:-11} wheel pieces, pydantic wheels: $deps (bundle19); the ort step waits"
  fi
fi
jax_gpu() { "$PY" -c "import jax, sys; sys.exit(0 if jax.devices('gpu') else 1)" >/dev/null 2>&1; }
if [ "$DEVICE" = cuda ] && ! jax_gpu && [ -n "${JAX_BUNDLES:-}" ]; then
  # Only when the host's own JAX cannot reach the GPU: jax 0.12.0.1 with its CUDA 13 plugin, first on the path.
  [ -e /tmp/site-jax/.installed ] || { ls /tmp/gh-jax/*/offline-install >/dev/null 2>&1 \
    && "$(ls /tmp/gh-jax/*/offline-install | head -1)" /tmp/gh-jax /tmp/site-jax > "$STATE/install-jax.log" 2>&1 \
    && touch /tmp/site-jax/.installed; }
  export PYTHONPATH=/tmp/site-jax:$PYTHONPATH
fi

if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
  "$PY" -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())" 2>&1 | tail -1
  "$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1
  "$PY" -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" 2>&1 | tail -1
fi

measure() {  # measure PRECISIONS IMPLEMENTATIONS BUDGET_S
  "$PY" -m hase_dagster.learn.conv_report measure --device "$DEVICE" --grid "$GRID" --precisions "$1" \
    --implementations "$2" --budget-s "$3" --out "$STATE/out"
}
# step NAME COMMAND...: run unless done, when at least 40 s are left; the command gets the seconds
# left minus a margin for the case in flight. Exit 3 (budget ran out mid-grid) leaves it for the next call.
step() {
  local name=$1; shift
  [ -e "$STATE/steps/$name" ] && { echo "$name: done before"; return 0; }
  local left=$(( budget - (SECONDS - started) - 30 ))
  if (( left < 10 )); then echo "stop before $name: $((SECONDS - started)) s used of $budget"; return 0; fi
  local t0=$SECONDS rc
  "$@" "$left" > "$STATE/steps/$name.log" 2>&1; rc=$?
  if (( rc == 0 )); then
    touch "$STATE/steps/$name"; echo "$name: done in $((SECONDS - t0)) s"
  elif (( rc == 3 )); then
    echo "$name: out of time after $((SECONDS - t0)) s; the next call resumes it"
  else
    echo "$name: FAILED (exit $rc) after $((SECONDS - t0)) s"; grep -v '^USDT\|Warning' "$STATE/steps/$name.log" | tail -15
  fi
}

TORCH=im2col_torch,im2col_torch_compile,conv2d_torch
JAX=conv_jax,im2col_jax
for p in fp32 fp16 bf16; do
  step "torch-$p" measure "$p" "$TORCH"
  step "jax-$p" measure "$p" "$JAX"
done
if [ "$DEVICE" = cpu ] || ort_cuda; then
  step ort measure fp32,fp16 conv_ort
else
  echo "ort: waiting for onnxruntime-gpu (carry bundles 1-6, 1b-5b and 19)"
fi
if [ "${TF32:-1}" = 1 ] && [ "$DEVICE" = cuda ]; then
  step tf32 measure tf32 "$TORCH,$JAX,conv_ort"
fi

# Every call brings back what exists so far: a machine can be taken back between calls.
if [ -s "$STATE/out/rows.jsonl" ]; then
  "$PY" -m hase_dagster.learn.conv_report report "$STATE/out" > "$STATE/steps/report.log" 2>&1 \
    || { echo "report: FAILED"; tail -5 "$STATE/steps/report.log"; }
  rm -rf "$OUT/conv-implementations" && mkdir -p "$OUT/conv-implementations"
  cp "$STATE"/out/{rows.jsonl,rows.csv,report.md,conv_implementations.png,environment.json} "$OUT/conv-implementations/" 2>/dev/null
  cat "$STATE"/steps/*.log 2>/dev/null | grep -v '^USDT' > "$OUT/conv-implementations/steps.log"
  tar -C "$OUT" -czf "$OUT/conv-implementations.tar.gz" conv-implementations
  sed -n '/^## Findings/,/^## Correctness/p' "$OUT/conv-implementations/report.md" | head -20
fi
echo "steps done: $(ls "$STATE/steps" | grep -vc '\.log$') (of 7, 8 with tf32) after $((SECONDS - started)) s; rows: $(wc -l < "$STATE/out/rows.jsonl" 2>/dev/null || echo 0)"
