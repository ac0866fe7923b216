#!/usr/bin/env bash
# Regenerate the ONNX files of the CPU blind sets whose timings are committed (results/cpu-general/cpu-set*/timings),
# one folder a set, ROOT/SET, holding only the batch sizes that set was timed at (batch 1; set AG batch 1 and 4):
#   bash results/cpu/cells-probes/make_cpu_sets.sh [ROOT]        # ROOT defaults to /tmp/cpusets
# Idempotent: a set whose folder already holds a file for every timed name is skipped. Each set's generator and
# arguments are the ones its README names (results/cpu-general/README.md for O/P/Q, gpu-set*/README.md for the rest);
# timm 1.0.31 from the wheel in .gpuhost/timm, installed beside the project into /tmp/timm-site (as gpu_run.sh does).
# Check a set afterwards (timings copied into DEST first, see predict_sets.sh):
#   bash results/cpu-general/predict_sets.sh cpu NAME 1 ROOT/SET DEST
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=${1:-/tmp/cpusets}
py=.venv/bin/python
gen=results/cpu-general
timm_site=${TIMM_SITE:-/tmp/timm-site}
timm_wheel=${TIMM_WHEEL:-.gpuhost/timm/timm-1.0.31-py3-none-any.whl}

timed() {  # the file names set $1's CPU timings hold
  $py -c "
import glob, json, sys
names = {r['model'] for f in glob.glob('$gen/cpu-set$1/timings/level-*.json') for r in json.load(open(f))}
print('\n'.join(sorted(names)))"
}

missing() {  # timed names of set $1 not in ROOT/$1
  local n c=0
  for n in $(timed "$1"); do [ -f "$root/$1/$n" ] || c=$((c + 1)); done
  echo $c
}

make_set() {  # set $1 into folder $2
  local s=$1 out=$2
  case $s in
    O | P | Q) $py $gen/other_kinds.py "$out" --batch-sizes 1 --only "$s" ;;
    S | T | U | V | X | Y | Z)
      [ -d "$timm_site/timm" ] || $py -m pip install -q --no-deps --target "$timm_site" "$timm_wheel"
      # shellcheck disable=SC2046  # the models, one word each
      PYTHONPATH=$timm_site${PYTHONPATH:+:$PYTHONPATH} $py $gen/timm_set.py "$out" --batch-sizes 1 --jobs 2 \
        $(cat $gen/set"$s"-models.txt) ;;
    W) $py $gen/checker_nets.py "$out" --seeds 872-883 --batch-sizes 1 --jobs 2 ;;
    AG) $py $gen/hand_ops_set.py "$out" --seeds 901-912 --batch-sizes 1,4 ;;
    *) echo "make_cpu_sets: no recipe for set $s" >&2; return 1 ;;
  esac
}

for s in O P Q S T U V W X Y Z AG; do
  out=$root/$s
  if [ -d "$out" ] && [ "$(missing "$s")" = 0 ]; then
    echo "set $s: complete in $out, skipped"
    continue
  fi
  mkdir -p "$out"
  start=$(date +%s)
  make_set "$s" "$out" > "$out/export.log" 2>&1 || echo "set $s: generator exited non-zero (see $out/export.log)" >&2
  # keep only the batch sizes this set was timed at
  keep=$(timed "$s" | sed -n 's/.*_b\([0-9]*\)\.onnx$/\1/p' | sort -u)
  for f in "$out"/*.onnx "$out"/*.onnx.partial; do
    [ -e "$f" ] || continue
    b=$(basename "$f" | sed -n 's/.*_b\([0-9]*\)\.onnx$/\1/p')
    grep -qx "${b:-none}" <<< "$keep" || rm -f "$f"
  done
  left=$(missing "$s")
  echo "set $s: $(ls "$out"/*.onnx 2>/dev/null | wc -l) files, $left timed name(s) missing, $(($(date +%s) - start)) s"
  if [ "$left" != 0 ]; then
    for n in $(timed "$s"); do [ -f "$out/$n" ] || echo "  missing: $n" >&2; done
  fi
done
