#!/usr/bin/env bash
# On a GPU host with the payload in /tmp/site (results/gpu-payload/install.sh pl0 .. pl7): export the probe grid of
# ../gemm-patch-probe at batch 1 (the catalog's fingerprint twins), 16 and 64, then run the profile
# gpu_projection_probes (hase.yaml: its bias-free projections and patch convolutions as kernel carriers) through
# results/gpu-grid/run.sh: kernels at stress 0, 1.0 and 0.5, batch 64, then 16 and 1. $OUT/projection-rows.tar.gz holds the
# tables. Resumable: call again until every step is done.
#   BUDGET_S=500 bash results/gpu-general/projection-rows/run.sh
set -uo pipefail
grid=results/gpu-general/gemm-patch-probe
if [ ! -e /tmp/gpgrid/.exported ]; then
  python3 $grid/export_grid.py /tmp/gpgrid 1,16,64 2>&1 | grep -v -i warn | tail -1
  touch /tmp/gpgrid/.exported
  echo "grid exported after $SECONDS s"
fi
HASE_DATA_DIR=/tmp/hproj EXPORT_NAME=projection-rows PROFILE=gpu_projection_probes BATCHES="${BATCHES:-64 16 1}" \
  LEVELS="0.0 1.0 0.5" SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=60 BENCHMARK_S=60 \
  bash results/gpu-grid/run.sh "$((${BUDGET_S:-480} - SECONDS))"
