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
export UK_MODELS  # export_networks.sh reads it and UK_SEEDS from the environment
bash results/gpu-general/user-kernels/export_networks.sh "$UK_DIR" 16,64 || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/cupti/host.txt"
left=$((${BUDGET_S:-400} - SECONDS))
PYTHONPATH=/tmp/site:$PWD python3 results/gpu-general/gpu_time_study.py "$OUT/cupti" "$UK_DIR"/files/*.onnx --no-wall \
  --budget-s $((left / 2))
PYTHONPATH=/tmp/site:$PWD python3 results/gpu-general/gpu_time_study.py "$OUT/cupti" "$UK_DIR"/files/*.onnx --wall-only \
  --log wall.jsonl --budget-s $((${BUDGET_S:-400} - SECONDS - 20))
mkdir -p "$UK_DIR/cupti" && cp -r "$OUT/cupti/." "$UK_DIR/cupti/"
