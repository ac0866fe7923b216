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
.venv/bin/python results/gpu-general/bundle_provenance.py results/bundles/h200 "$work/provenance.json"
source results/gpu-general/h200-composition/fit_composition.sh
for held in "${sets[@]}" "${extra[@]}"; do
  [ -e "$work/$held/predictions-refit" ] && continue
  others=(); for s in "${sets[@]}"; do [ "$s" = "$held" ] || others+=("$s"); done
  fit_composition "$work/bundle-without-$held" results/bundles/h200 "$work/provenance.json" "$files" "${others[@]}" \
    > /dev/null
  held_files=$files/$held; [ "$held" = AK ] && [ ! -d "$held_files" ] && held_files=${AK_FILES:-/tmp/setAK/gpu-files}
  for pair in results/bundles/h200:shipped "$work/bundle-without-$held:refit"; do
    bash results/cpu-general/predict_sets.sh "${pair%%:*}" "${pair#*:}" "${BATCHES:-1,4,16,64,128}" "$held_files" \
      "$work/$held" > /dev/null 2>&1 || true
  done
  echo "$held done"
done
