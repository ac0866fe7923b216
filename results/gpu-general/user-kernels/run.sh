#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7 (the timm wheel carried in .gpuhost/timm):
# export a user-kernels profile's timm networks (hase.yaml) to $UK_DIR/files at batch 1, 16 and 64, then run that
# profile's analysis and benchmarks (held out: kernels at idle, whole models at every level) with
# results/gpu-grid/run.sh; $OUT/$UK_NAME.tar.gz holds the tables. Resumes: call again until every step is done.
#   BUDGET_S=480 bash results/gpu-general/user-kernels/run.sh          # gpu_user_kernels (VisFormer, RegNetZ, ConvNeXtV2)
#   UK_PROFILE=gpu_user_kernels_b UK_DIR=/tmp/uk2 UK_NAME=user-kernels-b \
#     UK_MODELS="regnetv_040 resnetv2_50 cpubone_b1_bfrobust" BUDGET_S=480 bash results/gpu-general/user-kernels/run.sh
#   UK_PROFILE=gpu_user_kernels_c UK_DIR=/tmp/uk3 UK_NAME=user-kernels-c \
#     UK_MODELS="nest_tiny_jx tnt_s_patch16_224 swinv2_tiny_window8_256" BUDGET_S=480 bash results/gpu-general/user-kernels/run.sh
#   UK_PROFILE=gpu_user_kernels_ah UK_DIR=/tmp/uk4 UK_NAME=user-kernels-ah UK_SEEDS=914,920,921,923 \
#     BUDGET_S=480 bash results/gpu-general/user-kernels/run.sh      # set AH's networks written by hand
set -uo pipefail
UK_PROFILE=${UK_PROFILE:-gpu_user_kernels}
UK_DIR=${UK_DIR:-/tmp/uk}
UK_NAME=${UK_NAME:-user-kernels}
UK_MODELS=${UK_MODELS:-visformer_tiny regnetz_b16 convnextv2_atto}
mkdir -p "$UK_DIR/files"
if [ ! -e "$UK_DIR/files/.exported" ]; then  # batch 1 too: the catalog fingerprints a batch-1 twin
  if [ -n "${UK_SEEDS:-}" ]; then  # networks written by hand (results/cpu-general/hand_ops_set.py), not timm's
    PYTHONPATH=/tmp/site:$PWD python3 results/cpu-general/hand_ops_set.py "$UK_DIR/files" --seeds "$UK_SEEDS" \
      --batch-sizes 1,16,64 > "$UK_DIR/export.log" 2>&1 || { tail "$UK_DIR/export.log"; exit 1; }
  else
    [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site .gpuhost/timm/timm-*.whl
    # shellcheck disable=SC2086  # UK_MODELS is a list of names
    PYTHONPATH=/tmp/site:$PWD:/tmp/timm-site python3 results/cpu-general/timm_set.py "$UK_DIR/files" --batch-sizes 1,16,64 \
      --jobs 6 --ep cuda $UK_MODELS > "$UK_DIR/export.log" 2>&1 || { tail "$UK_DIR/export.log"; exit 1; }
  fi
  touch "$UK_DIR/files/.exported"
  ls "$UK_DIR/files"
fi
HASE_DATA_DIR=/tmp/h$UK_NAME EXPORT_NAME=$UK_NAME PROFILE=$UK_PROFILE BATCHES="64 16" LEVELS="0.0 1.0 0.5" \
  SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=100 BENCHMARK_S=120 bash results/gpu-grid/run.sh "$((${BUDGET_S:-480} - SECONDS))"
