#!/usr/bin/env bash
# On a GPU host with the payload in /tmp/site (results/gpu-payload/install.sh pl0 .. pl7): export a probe grid
# (FOLDER/export_grid.py, which needs ../grid_export.py) into GRID_DIR at batch 1, 16 and 64, then run PROFILE (hase.yaml:
# the grid's files as kernel carriers) through results/gpu-grid/run.sh: kernels at stress 0, 1.0 and 0.5, batch 16
# first, then 1 and 64 (BATCHES overrides; export the grid at other batch sizes first). $OUT/NAME.tar.gz holds the
# tables. Resumable: call again until every step is done. Called by each grid folder's run.sh:
#   bash results/gpu-general/grid_run.sh FOLDER PROFILE GRID_DIR      # NAME: FOLDER's last part
set -uo pipefail
folder=${1:?FOLDER} profile=${2:?PROFILE} grid=${3:?GRID_DIR}
if [ ! -e "$grid/.exported" ]; then
  python3 "$folder/export_grid.py" "$grid" 1,16,64 && touch "$grid/.exported"
  echo "grid exported after $SECONDS s"
fi
HASE_DATA_DIR=/tmp/h$(basename "$folder") EXPORT_NAME=$(basename "$folder") PROFILE=$profile \
  BATCHES="${BATCHES:-16 1 64}" LEVELS="0.0 1.0 0.5" SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=${ANALYSIS_S:-80} \
  BENCHMARK_S=${BENCHMARK_S:-90} bash results/gpu-grid/run.sh "$((${BUDGET_S:-480} - SECONDS))"
