#!/usr/bin/env bash
# On a GPU host with the payload in /tmp/site (results/gpu-payload/install.sh pl0 .. pl7): export this folder's grid
# at batch 1, 16 and 64, then run the profile gpu_group_conv_probes (hase.yaml: the grid's convolutions as kernel
# carriers) through results/gpu-grid/run.sh: kernels at stress 0, 1.0 and 0.5, batch 16 first, then 1 and 64.
# $OUT/group-conv-rows.tar.gz holds the tables. Resumable: call again until every step is done.
#   BUDGET_S=500 bash results/gpu-general/group-conv-rows/run.sh
set -uo pipefail
if [ ! -e /tmp/gcgrid/.exported ]; then
  python3 results/gpu-general/group-conv-rows/export_grid.py /tmp/gcgrid 1,16,64 && touch /tmp/gcgrid/.exported
  echo "grid exported after $SECONDS s"
fi
HASE_DATA_DIR=/tmp/hds EXPORT_NAME=group-conv-rows PROFILE=gpu_group_conv_probes BATCHES="${BATCHES:-16 1 64}" \
  LEVELS="0.0 1.0 0.5" SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=${ANALYSIS_S:-80} BENCHMARK_S=${BENCHMARK_S:-90} \
  bash results/gpu-grid/run.sh "$((${BUDGET_S:-480} - SECONDS))"
