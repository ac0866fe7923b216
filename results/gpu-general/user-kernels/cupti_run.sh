#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7 (the timm wheel carried in .gpuhost/timm): export
# timm networks at batch 16 and 64 and measure, per file, CUPTI's GPU kernel time per run and then, in processes
# that never ran a profiler, the settled wall time (results/gpu-general/gpu_time_study.py), into $OUT/cupti/.
# With the user-kernels tables of the same networks this splits a whole-model miss into the kernels' (standalone
# sum against the GPU's time) and the composition's (GPU time against wall time). Resumable.
#   UK_MODELS="nest_tiny_jx tnt_s_patch16_224 swinv2_tiny_window8_256" BUDGET_S=400 \
#     bash results/gpu-general/user-kernels/cupti_run.sh
set -uo pipefail
UK_DIR=${UK_DIR:-/tmp/uk-cupti}
UK_MODELS=${UK_MODELS:-nest_tiny_jx tnt_s_patch16_224 swinv2_tiny_window8_256}
mkdir -p "$UK_DIR/files" "${OUT:?}/cupti"
[ -e "$UK_DIR/cupti" ] && cp -r "$UK_DIR/cupti/." "$OUT/cupti/"
if [ ! -e "$UK_DIR/files/.exported" ]; then
  if [ -n "${UK_SEEDS:-}" ]; then  # networks written by hand (results/cpu-general/hand_ops_set.py), not timm's
    PYTHONPATH=/tmp/site:$PWD python3 results/cpu-general/hand_ops_set.py "$UK_DIR/files" --seeds "$UK_SEEDS" \
      --batch-sizes 16,64 > "$UK_DIR/export.log" 2>&1 || { tail "$UK_DIR/export.log"; exit 1; }
  else
    [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site .gpuhost/timm/timm-*.whl
    # shellcheck disable=SC2086  # UK_MODELS is a list of names
    PYTHONPATH=/tmp/site:$PWD:/tmp/timm-site python3 results/cpu-general/timm_set.py "$UK_DIR/files" --batch-sizes 16,64 \
      --jobs 6 --ep cuda $UK_MODELS > "$UK_DIR/export.log" 2>&1 || { tail "$UK_DIR/export.log"; exit 1; }
  fi
  touch "$UK_DIR/files/.exported"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/cupti/host.txt"
left=$((${BUDGET_S:-400} - SECONDS))
PYTHONPATH=/tmp/site:$PWD python3 results/gpu-general/gpu_time_study.py "$OUT/cupti" "$UK_DIR"/files/*.onnx --no-wall \
  --budget-s $((left / 2))
PYTHONPATH=/tmp/site:$PWD python3 results/gpu-general/gpu_time_study.py "$OUT/cupti" "$UK_DIR"/files/*.onnx --wall-only \
  --log wall.jsonl --budget-s $((${BUDGET_S:-400} - SECONDS - 20))
mkdir -p "$UK_DIR/cupti" && cp -r "$OUT/cupti/." "$UK_DIR/cupti/"
