#!/usr/bin/env bash
# On a GPU host, after results/gpu-payload/install.sh pl0 .. pl7: time the kernels of profile gpu_device_calibration
# (zoo networks and grouped-expand probes the H100 tables hold) on this device, batch 16 then 64, kernels and whole
# models at stress 0, 1.0 and 0.5, and export the tables to $OUT/device-calibration.tar.gz. Resumes: call again until
# every step is done. Then, here: hase predictor calibrate (results/gpu-general/device-calibration/README.md).
#   BUDGET_S=540 bash results/gpu-general/device-calibration/run.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
HASE_DATA_DIR=/tmp/hcal EXPORT_NAME=device-calibration PROFILE=gpu_device_calibration BATCHES="${BATCHES:-16 64}" \
  LEVELS="0.0 1.0 0.5" SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=200 BENCHMARK_S=90 \
  bash results/gpu-grid/run.sh "$((${BUDGET_S:-540} - SECONDS))"
