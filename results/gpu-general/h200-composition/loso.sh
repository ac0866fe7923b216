#!/usr/bin/env bash
# Leave one set out: the h200 bundle's composition refitted on the H200's own whole-model timings (the calibration
# run's zoo cases and all but one of SETS), the regressor kept (--regressor-of), predicting the one left out; then,
# for each set in EXTRA, one fit on all of SETS predicting it. FILES/AX holds each set's files (its README's command),
# WORK the output; BATCHES the batch sizes predicted (a set's missing ones are skipped).
#   FILES=/tmp/h200sets WORK=/tmp/h200-loso bash results/gpu-general/h200-composition/loso.sh            # AF-AJ, then AK
#   SETS="AF AG AH AI AJ AK AL" EXTRA= FILES=/tmp/h200sets WORK=/tmp/h200-loso7 bash results/gpu-general/h200-composition/loso.sh
set -euo pipefail
files=${FILES:-/tmp/h200sets} work=${WORK:-/tmp/h200-loso}
read -r -a sets <<< "${SETS:-AF AG AH AI AJ}"
read -r -a extra <<< "${EXTRA-AK}"
mkdir -p "$work"
.venv/bin/python -c "
import json; p = json.load(open('results/bundles/h200/bundle.json'))['provenance']
drop = ('training', 'composition_of', 'compute_floor', 'calibrated_from', 'host_reference')
json.dump({k: v for k, v in p.items() if k not in drop}, open('$work/provenance.json', 'w'))"
fit() {  # fit OUT SET...: the composition on the named sets' timings
  local out=$1; shift
  local timings=()
  for s in "$@"; do timings+=(--timings "results/cpu-general/gpu-set$s/timings-h200/timings:$files/$s"); done
  .venv/bin/hase predictor export h200 --tables results/gpu-general/device-calibration/h200/run/tables \
    --regressor-of results/bundles/h200 --rules results/static-detection/h100-cuda-ort1.31.1.fusion_rules.json \
    --provenance "$work/provenance.json" --device-profile results/device/h200/gpu "${timings[@]}" --out "$out" > /dev/null
}
for held in "${sets[@]}" "${extra[@]}"; do
  [ -e "$work/$held/predictions-refit" ] && continue
  others=(); for s in "${sets[@]}"; do [ "$s" = "$held" ] || others+=("$s"); done
  fit "$work/bundle-without-$held" "${others[@]}"
  held_files=$files/$held; [ "$held" = AK ] && [ ! -d "$held_files" ] && held_files=${AK_FILES:-/tmp/setAK/gpu-files}
  for pair in results/bundles/h200:shipped "$work/bundle-without-$held:refit"; do
    bash results/cpu-general/predict_sets.sh "${pair%%:*}" "${pair#*:}" "${BATCHES:-1,4,16,64,128}" "$held_files" \
      "$work/$held" > /dev/null 2>&1 || true
  done
  echo "$held done"
done
