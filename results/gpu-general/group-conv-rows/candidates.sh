#!/usr/bin/env bash
# The candidate bundles judged on set AP (VM): the h100 regressor retrained with this grid's rows (H100 equivalents),
# h200 calibrated from it, and three h200 composition fits: the shipped regressor refitted over every H200 set timed
# before AP (h200-refit), the grouped-row regressor with the shipped fit's sets AF-AJ (h200-gc) and with AF-AO
# (h200-gc-refit); then set AP predicted by each into results/cpu-general/gpu-setAP/predictions-NAME.
# FILES/X holds set X's files (its README's command), AP_FILES set AP's, WORK the bundles. Skips bundles already built.
#   FILES=/tmp/h200sets AP_FILES=/tmp/setAP-files WORK=/tmp/gcand bash results/gpu-general/group-conv-rows/candidates.sh
set -euo pipefail
F=${FILES:-/tmp/h200sets} W=${WORK:-/tmp/gcand}
P=results/gpu-general/projection-rows S=results/gpu-general/downsample-rows G=results/gpu-general/group-conv-rows
rules=results/static-detection/h100-cuda-ort1.31.1.fusion_rules.json
mkdir -p "$W"
rows="40 grouped convolutions (groups 2-32, 32-256 channels a group, k 1/3/5, stride 1/2, 7-56 px out, seed 20261201)"
rows+=" at batch 1/4/16/64, stress 0/0.5/1.0, timed on an NVIDIA H200 2026-11-29 (profile gpu_group_conv_probes) and"
rows+=" divided by the h200 calibration's H200/H100 ratio (0.90-1.0): 480 rows (results/gpu-general/group-conv-rows)"
provenance() { .venv/bin/python results/gpu-general/bundle_provenance.py "$@"; }
provenance results/bundles/h100 "$W/H100_PROVENANCE.json" --add group_conv_rows "$rows"
provenance results/bundles/h200 "$W/H200_PROVENANCE.json"
provenance results/bundles/h200 "$W/H200_PROVENANCE_GC.json" --add group_conv_rows "$rows"
if [ ! -e "$W/h200-gc-cal/bundle.json" ]; then
  .venv/bin/hase merge-tables "$W/merged" results/gpu-general/tables $P/h100-equivalent $P/h100-equivalent-b1-b16 \
    $P/h100-equivalent-patch-b64 $S/h100-equivalent $G/h100-equivalent
  .venv/bin/hase predictor export h100 --tables "$W/merged" --composition-of results/bundles/h100 \
    --kind xgboost_recurrent_base --rules $rules --provenance "$W/H100_PROVENANCE.json" \
    --device-profile results/device/h100/gpu --out "$W/h100-gc"                                          # 5 min
  .venv/bin/hase predictor calibrate "$W/h100-gc" h200 --tables results/gpu-general/device-calibration/h200/run/tables \
    --reference-tables "$W/merged" --device-profile results/device/h200/gpu --out "$W/h200-gc-cal"
fi
source results/gpu-general/h200-composition/fit_composition.sh
fit() {  # fit NAME REGRESSOR PROVENANCE SET...: the composition on the named sets, host reference as shipped
  local name=$1 regressor=$2 provenance=$3; shift 3
  [ -e "$W/$name/bundle.json" ] && return 0
  fit_composition "$W/$name-comp" "$regressor" "$provenance" "$F" "$@" > "$W/$name.log"
  .venv/bin/hase predictor host-reference "$W/$name-comp" h200 --readings \
    results/gpu-general/host-speed/h200-2026-11-29/readings.json --python 3.12 --out "$W/$name" >> "$W/$name.log"
}
all="AF AG AH AI AJ AK AL AM AN AO"
fit h200-refit results/bundles/h200 "$W/H200_PROVENANCE.json" $all
fit h200-gc "$W/h200-gc-cal" "$W/H200_PROVENANCE_GC.json" AF AG AH AI AJ
fit h200-gc-refit "$W/h200-gc-cal" "$W/H200_PROVENANCE_GC.json" $all
for n in h200-refit h200-gc h200-gc-refit; do
  # predict_sets.sh's scoring step fails while the set's timings are sealed: the predictions are what is kept
  bash results/cpu-general/predict_sets.sh "$W/$n" "$n" 1,4,16,128 "${AP_FILES:-/tmp/setAP-files}" \
    results/cpu-general/gpu-setAP > /dev/null 2>&1 || true
done
