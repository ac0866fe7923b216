#!/usr/bin/env bash
# Held-out check of the downsampling rows (issue 11): the grid's 40 configurations in 5 folds (every 5th in draw
# order); each fold's h100 kernel regressor is trained on the H100 tables, the shipped projection rows, the
# projection and patch rows of batch 1/16 and 64 and the other 32 configurations' rows (H100 equivalents), keeping the
# shipped composition, and predicts the 8 held-out configurations' rows. Writes WORK/fold-N/ and WORK/held-out.csv.
#   bash results/gpu-general/downsample-rows/folds.sh [WORK]      # about 100 s a fold on the 2-core VM
# GRID names another grid's folder (its export_grid.py and h100-equivalent/), EXTRA tables trained on in every fold:
#   GRID=results/gpu-general/dense-conv-rows EXTRA=results/gpu-general/downsample-rows/h100-equivalent \
#     bash results/gpu-general/downsample-rows/folds.sh /tmp/dc-folds
set -euo pipefail
D=results/gpu-general/downsample-rows P=results/gpu-general/projection-rows
G=${GRID:-$D}
work=${1:-/tmp/ds-folds}
py=.venv/bin/python hase=.venv/bin/hase
mkdir -p "$work"
$py results/gpu-general/bundle_provenance.py results/bundles/h100 "$work/provenance.json"
mapfile -t configs < <($py $G/export_grid.py --list)
for fold in 0 1 2 3 4; do
  f=$work/fold-$fold
  [ -e "$f/held-out.csv" ] && continue
  held=$(for i in "${!configs[@]}"; do if (( i % 5 == fold )); then printf '%s_i|' "${configs[$i]}"; fi; done)
  held="^(?:${held%|})"
  $py $D/subset_tables.py $G/h100-equivalent "$f/train-rows" --drop "$held"
  $py $D/subset_tables.py $G/h100-equivalent "$f/held-rows" --keep "$held"
  $hase merge-tables "$f/merged" results/gpu-general/tables $P/h100-equivalent $P/h100-equivalent-b1-b16 \
    $P/h100-equivalent-patch-b64 ${EXTRA:-} "$f/train-rows" > /dev/null
  $hase predictor export "fold$fold" --tables "$f/merged" --composition-of results/bundles/h100 \
    --kind xgboost_recurrent_base --rules results/static-detection/h100-cuda-ort1.31.1.fusion_rules.json \
    --provenance "$work/provenance.json" --device-profile results/device/h100/gpu --out "$f/bundle" > "$f/export.log"
  $py $D/score_rows.py "$f/held-rows" "$f/bundle" --csv "$f/held-out.csv" > "$f/score.md"
  rm -rf "$f/merged"
  echo "fold $fold: $(tail -1 "$f/score.md")"
done
$py -c "
import glob, pandas as pd
rows = pd.concat(pd.read_csv(p) for p in sorted(glob.glob('$work/fold-*/held-out.csv')))
rows.to_csv('$work/held-out.csv', index=False)
print(len(rows), 'held-out rows: MAPE', round(rows.error_pct.abs().mean(), 1), '%, within 10%:', round((rows.error_pct.abs() <= 10).mean() * 100, 1), '%')"
