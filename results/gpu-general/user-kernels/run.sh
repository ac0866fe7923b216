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
# UK_BATCHES (batch sizes timed, "64 16"), UK_LEVELS (stress levels, "0.0 1.0 0.5") and UK_EXPORT_BATCHES (1,16,64;
# keep 1 in it) narrow a run:
#   UK_PROFILE=gpu_user_kernels_nf UK_DIR=/tmp/uk7 UK_NAME=user-kernels-nf UK_MODELS=dm_nfnet_f0 UK_BATCHES=16 \
#     UK_LEVELS=0.0 UK_EXPORT_BATCHES=1,16 BUDGET_S=300 bash results/gpu-general/user-kernels/run.sh
set -uo pipefail
UK_PROFILE=${UK_PROFILE:-gpu_user_kernels}
UK_DIR=${UK_DIR:-/tmp/uk}
UK_NAME=${UK_NAME:-user-kernels}
UK_MODELS=${UK_MODELS:-visformer_tiny regnetz_b16 convnextv2_atto}
UK_BATCHES=${UK_BATCHES:-64 16}
UK_LEVELS=${UK_LEVELS:-0.0 1.0 0.5}
mkdir -p "$UK_DIR/files"
export UK_MODELS  # export_networks.sh reads it, UK_SEEDS and UK_CHK_SEEDS from the environment
bash results/gpu-general/user-kernels/export_networks.sh "$UK_DIR" "${UK_EXPORT_BATCHES:-1,16,64}" || exit 1  # batch 1 too: the catalog fingerprints a batch-1 twin
HASE_DATA_DIR=/tmp/h$UK_NAME EXPORT_NAME=$UK_NAME PROFILE=$UK_PROFILE BATCHES="$UK_BATCHES" LEVELS="$UK_LEVELS" \
  SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=100 BENCHMARK_S=120 bash results/gpu-grid/run.sh "$((${BUDGET_S:-480} - SECONDS))"
