#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7 (the timm wheel carried in .gpuhost/timm): what a
# view op costs a host-bound run (results/gpu-general/view_cost_study.py), then where whole timm networks' GPU idles
# (gap_study.py) at batch 1, 16 and 64, into $OUT/view-cost and $OUT/gaps. Resumable.
#   GAP_MODELS="nest_tiny_jx tnt_s_patch16_224 ..." BUDGET_S=400 bash results/gpu-general/user-kernels/gap_run.sh
set -uo pipefail
GAP_DIR=${GAP_DIR:-/tmp/gaps}
GAP_MODELS=${GAP_MODELS:-nest_tiny_jx tnt_s_patch16_224 swinv2_tiny_window8_256 deit_small_patch16_224 resnet50}
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "$GAP_DIR/files" "${OUT:?}/gaps" "$OUT/view-cost"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/host.txt"
[ -e "$GAP_DIR/gaps.jsonl" ] && cp "$GAP_DIR/gaps.jsonl" "$OUT/gaps/"
if [ ! -e "$GAP_DIR/view_cost.json" ]; then
  python3 results/gpu-general/view_cost_study.py "$GAP_DIR/view-cost" --rounds 3 2>&1 | tail -12
  cp "$GAP_DIR/view-cost/view_cost.json" "$GAP_DIR/view_cost.json"
fi
cp "$GAP_DIR/view_cost.json" "$OUT/view-cost/"
if [ ! -e "$GAP_DIR/files/.exported" ]; then
  [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site .gpuhost/timm/timm-*.whl
  # shellcheck disable=SC2086  # GAP_MODELS is a list of names
  PYTHONPATH=$PYTHONPATH:/tmp/timm-site python3 results/cpu-general/timm_set.py "$GAP_DIR/files" --batch-sizes 1,16,64 \
    --jobs 6 --ep cuda $GAP_MODELS > "$GAP_DIR/export.log" 2>&1 || { tail "$GAP_DIR/export.log"; exit 1; }
  touch "$GAP_DIR/files/.exported"
fi
python3 results/gpu-general/user-kernels/gap_study.py "$GAP_DIR" "$GAP_DIR"/files/*.onnx --runs 5 \
  --budget-s $((${BUDGET_S:-400} - SECONDS - 30))
cp "$GAP_DIR/gaps.jsonl" "$OUT/gaps/"
