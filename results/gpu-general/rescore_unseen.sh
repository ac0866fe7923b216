#!/usr/bin/env bash
# The three unseen H100 sets predicted device-free by one bundle and scored against their committed
# timings: the independent generator's 24 networks (results/cpu-general/gpu, gpu-small), set D
# (results/cpu-general/gpu-setD) and the second never-seen set (never-seen-2, pooled labels).
#   bash results/gpu-general/rescore_unseen.sh BUNDLE OUT    # BUNDLE: a bundle folder or name
# The ONNX files as the READMEs export them: CKG (/tmp/ckg: checker_nets.py --seeds 701-724), SETD
# (/tmp/gpuD: export_torchvision.py + checker_nets.py --seeds 737-748), NS2 (/tmp/ns2). Writes
# OUT/{gen,setD}/predictions_b*.json and OUT/{gen,setD,ns2}.md.
set -euo pipefail
bundle=${1:?bundle}; out=${2:?output folder}
ckg=${CKG:-/tmp/ckg}; setd=${SETD:-/tmp/gpuD}; ns2=${NS2:-/tmp/ns2}
here=$(cd "$(dirname "$0")/../.." && pwd)
py=$here/.venv/bin/python
mkdir -p "$out/gen" "$out/setD"
for b in 1 4 16 64; do
  for pair in "gen:$ckg" "setD:$setd"; do
    "$here/.venv/bin/hase" predict --predictor "$bundle" --batch-size $b --load idle,level=0.5,level=1.0 \
      --top 0 --json "${pair#*:}"/*_b$b.onnx > "$out/${pair%%:*}/predictions_b$b.json"
  done
done
ln -sfn "$here/results/cpu-general/gpu/timings" "$out/gen/timings"
ln -sfn "$here/results/cpu-general/gpu-setD/timings" "$out/setD/timings"
"$py" "$here/results/cpu-general/score_gpu.py" "$out/gen" "$here/results/cpu-general/gpu-small" > "$out/gen.md"
"$py" "$here/results/cpu-general/score_gpu.py" "$out/setD" > "$out/setD.md"
"$py" "$here/results/gpu-general/never-seen-2/evaluate.py" --bundle "$bundle" --files "$ns2" > "$out/ns2.md"
for f in gen setD; do echo "== $f"; sed -n 3p "$out/$f.md"; done; echo "== ns2"; sed -n 3,4p "$out/ns2.md"
