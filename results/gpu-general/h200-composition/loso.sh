#!/usr/bin/env bash
# Leave one set out: the h200 bundle's composition refitted on the H200's own whole-model timings (the calibration
# run's zoo cases and four of the five H200 sets AF-AJ), the regressor kept (--regressor-of), predicting the fifth;
# then one fit on all five predicting set AK. FILES/AX holds each set's files (its README's command), WORK the output.
#   FILES=/tmp/h200sets WORK=/tmp/h200-loso bash results/gpu-general/h200-composition/loso.sh
set -euo pipefail
files=${FILES:-/tmp/h200sets} work=${WORK:-/tmp/h200-loso}
sets=(AF AG AH AI AJ)
mkdir -p "$work"
.venv/bin/python -c "
import json; p = json.load(open('results/bundles/h200/bundle.json'))['provenance']
json.dump({k: v for k, v in p.items() if k not in ('training', 'composition_of', 'compute_floor', 'calibrated_from')},
          open('$work/provenance.json', 'w'))"
fit() {  # fit OUT SET...: the composition on the named sets' timings
  local out=$1; shift
  local timings=()
  for s in "$@"; do timings+=(--timings "results/cpu-general/gpu-set$s/timings-h200/timings:$files/$s"); done
  .venv/bin/hase predictor export h200 --tables results/gpu-general/device-calibration/h200/run/tables \
    --regressor-of results/bundles/h200 --rules results/static-detection/h100-cuda-ort1.31.1.fusion_rules.json \
    --provenance "$work/provenance.json" --device-profile results/device/h200/gpu "${timings[@]}" --out "$out" > /dev/null
}
for held in "${sets[@]}" AK; do
  [ -e "$work/$held/predictions-refit" ] && continue
  others=(); for s in "${sets[@]}"; do [ "$s" = "$held" ] || others+=("$s"); done
  fit "$work/bundle-without-$held" "${others[@]}"
  held_files=$files/$held; [ "$held" = AK ] && held_files=${AK_FILES:-/tmp/setAK/gpu-files}
  for pair in results/bundles/h200:shipped "$work/bundle-without-$held:refit"; do
    bash results/cpu-general/predict_sets.sh "${pair%%:*}" "${pair#*:}" 1,16,64 "$held_files" "$work/$held" > /dev/null 2>&1 || true
  done
  echo "$held done"
done
