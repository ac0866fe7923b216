# Sourced by loso.sh and ../group-conv-rows/candidates.sh: the h200 composition fitted on the H200's whole-model
# timings of the named sets (the calibration run's zoo cases and each set's timings-h200 against FILES/X), the
# regressor taken from REGRESSOR (--regressor-of). HASE names another hase command.
#   fit_composition OUT REGRESSOR PROVENANCE FILES SET...
fit_composition() {
  local out=$1 regressor=$2 provenance=$3 files=$4; shift 4
  local timings=()
  for s in "$@"; do timings+=(--timings "results/cpu-general/gpu-set$s/timings-h200/timings:$files/$s"); done
  ${HASE:-.venv/bin/hase} predictor export h200 --tables results/gpu-general/device-calibration/h200/run/tables \
    --regressor-of "$regressor" --rules results/static-detection/h100-cuda-ort1.31.1.fusion_rules.json \
    --provenance "$provenance" --device-profile results/device/h200/gpu "${timings[@]}" --out "$out"
}
