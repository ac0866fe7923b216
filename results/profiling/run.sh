#!/usr/bin/env bash
# Operator profiling (issue 14 A) on a GPU host, in steps that resume. Every call
#   bash results/profiling/run.sh BUDGET_S [BUNDLE]
# copies the carried wheel bundle (.gpuhost/BUNDLE) to /tmp/gh, installs once what it needs is there,
# then materializes the next steps of the gpu grid not yet done (operator_profile per configuration
# through the Dagster instance, then profiling_comparison) until BUDGET_S seconds have passed.
# Every call copies what exists so far into $OUT/profiling.
#
# What it needs beyond the host image (torch, onnx, numpy, pandas, matplotlib, networkx, ...):
#   - onnxruntime-gpu and the Dagster stack: .gpuhost/bundle1..bundle7 (and bundle8, simpy), unless
#     /tmp/site already has them (a machine that ran another run.sh of the project keeps them);
#   - transformers and holistictraceanalysis with their dependencies: .gpuhost/profiling (29 MB,
#     built by results/profiling/build-wheelhouse.sh from results/profiling/gpuhost-requirements.txt).
# Settings (environment): PROFILE (gpu), PY (python3; PY=.venv/bin/python PROFILE=cpu rehearses the
# steps on the VM, no bundles), OUT (/tmp/out), WORK (/tmp/hase-profiling), STEPS (the step names to
# run, default all in the order below).
set -uo pipefail
budget=${1:-}
if ! [[ "$budget" =~ ^[0-9]+$ ]] || (( budget <= 0 )); then
  echo "run.sh: the budget must be a positive whole number of seconds, got '$budget'" >&2; exit 2
fi
bundle=${2:-}
started=$SECONDS
work=${WORK:-/tmp/hase-profiling}
steps=$work/steps
mkdir -p "$steps"
export PYTHONPATH=/tmp/site:$PWD HASE_DATA_DIR=$work/hd DAGSTER_HOME=$work/dh PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export PY=${PY:-python3}
profile=${PROFILE:-gpu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

if [ "$PY" = python3 ]; then
  mkdir -p /tmp/gh
  [ -n "$bundle" ] && cp -r ".gpuhost/$bundle" /tmp/gh/
  if ! python3 -c "import onnxruntime, dagster, simpy" 2>/dev/null; then
    missing=()
    for b in bundle1 bundle2 bundle3 bundle4 bundle5 bundle6 bundle7 bundle8; do [ -d "/tmp/gh/$b" ] || missing+=("$b"); done
    if (( ${#missing[@]} )); then echo "ORT + Dagster not installed; bundles still to carry: ${missing[*]}"; exit 0; fi
    /tmp/gh/bundle1/offline-install /tmp/gh /tmp/site > /tmp/install.log 2>&1 || { tail /tmp/install.log; exit 1; }
  fi
  if ! python3 -c "import transformers, hta" 2>/dev/null; then
    [ -d /tmp/gh/profiling ] || { echo "transformers/HTA not installed: carry .gpuhost/profiling (bash results/profiling/run.sh 30 profiling)"; exit 0; }
    /tmp/gh/profiling/offline-install /tmp/gh/profiling /tmp/site > /tmp/install-profiling.log 2>&1 \
      || { tail /tmp/install-profiling.log; exit 1; }
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
"$PY" -c "import torch, transformers, onnxruntime; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', onnxruntime.__version__, 'cuda', torch.cuda.is_available())" | tee "$work/versions.txt"

out_of_time=0
step() {  # step NAME ESTIMATE_S COMMAND...: as in results/gpu-grid/run.sh
  local name=$1 estimate=$2; shift 2
  [ -e "$steps/$name" ] && return 0
  (( out_of_time )) && return 0
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return 0; fi
  if (( SECONDS - started + estimate > budget )); then
    out_of_time=1; echo "stop before $name: $((SECONDS - started)) s used of $budget"; return 0
  fi
  local t0=$SECONDS
  if "$@" > "$steps/$name.log" 2>&1; then
    touch "$steps/$name"; echo "$name: done in $((SECONDS - t0)) s"
  else
    echo "$name: FAILED after $((SECONDS - t0)) s"; tail -20 "$steps/$name.log"
  fi
}
grid() { "$PY" results/profiling/profile_grid.py --profile "$profile" "$@"; }

# The grid in steps: one model x batch size per step (BERT: sequence 128, 256, 512), ordered so that
# a partial run already covers both axes. Estimates (s) allow for the first step's CUDA start-up and
# the BERT fusion map fingerprinted once on batch 1 x 128 (cached for every later configuration).
keys=$("$PY" results/profiling/profile_grid.py --profile "$profile" --list)
declare -A estimate=([bert_base-b1]=150 [bert_base-b4]=80 [bert_base-b8]=90 [bert_base-b16]=110 [bert_l2-b1]=90)
for group in bert_base-b1 bert_l2-b1 resnet50 mobilenet_v2 resnet18 bert_base-b4 bert_base-b16 bert_base-b8; do
  members=$(echo "$keys" | grep -E "^${group}(-|$)" | tr '\n' ' ')
  [ -n "$members" ] || continue
  # shellcheck disable=SC2086
  step "$group" "${estimate[$group]:-70}" grid $members
done
step comparison 30 grid --compare

# Every call brings back what exists so far: a machine can be taken back between calls.
device=$([ "$profile" = cpu ] && echo cpu || echo cuda)
src=$HASE_DATA_DIR/profiling/$device
rm -rf "$OUT/profiling" && mkdir -p "$OUT/profiling"
if [ -d "$src" ]; then
  for dir in "$src"/*/; do
    name=$(basename "$dir"); [ "$name" = work ] && continue
    mkdir -p "$OUT/profiling/$name" && cp "$dir"/* "$OUT/profiling/$name/" 2>/dev/null
  done
fi
cp "$work/versions.txt" "$OUT/profiling/" 2>/dev/null
cat "$steps"/*.log > "$OUT/profiling/steps.log" 2>/dev/null
# Reports and summaries without the traces, in case the traces are too large to come back.
(cd "$OUT" && tar --exclude='*.json.gz' -czf profiling-reports.tar.gz profiling)
[ -e "$OUT/profiling/comparison/comparison.md" ] && sed -n '1,40p' "$OUT/profiling/comparison/comparison.md"
echo "steps done: $(ls "$steps" | grep -vc '\.log$') after $((SECONDS - started)) s"
