#!/usr/bin/env bash
# Is an idle host-bound run's "slow state" the timing order's? (issue 11, 2026-11-25.) Sets D-K timed every batch
# size of a network one after another (time_files.py sorts by name: _b1, _b16, _b4, _b64); the tables, M5, the
# generator's batch-1/4 set and set L timed small batches alone. One machine, idle, set L's 12 generator networks:
# batch 1 alone, interleaved with batch 64 (the sets' order), alone, interleaved, alone (five passes).
#   bash results/gpu-general/interleave_study.sh      # on the GPU host, after the payload; about 5 minutes
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
w=/tmp/interleave
mkdir -p "$w/files" "$w/b1" "$w/mixed" "${OUT:?}"
[ -e "$w/files/traits.json" ] || python3 results/cpu-general/checker_nets.py "$w/files" --seeds 836-847 \
  --batch-sizes 1,64 --jobs 8 2> "$w/export.log"
ln -sf "$w"/files/*_b1.onnx "$w/b1/"
ln -sf "$w"/files/*.onnx "$w/mixed/"
for pass in 1-b1-alone:b1 2-mixed:mixed 3-b1-alone-again:b1 4-mixed:mixed 5-b1-alone:b1; do
  date -u +"%T $pass" >> "$w/passes.log"
  timeout 200 python3 results/cpu-general/time_files.py "$w/${pass#*:}" "$w/${pass%%:*}" --profile gpu --levels 0.0
done
date -u +"%T end" >> "$w/passes.log"
tar -C "$w" --exclude=files --exclude=b1 --exclude=mixed -czf "$OUT/interleave.tar.gz" . && tar -tzf "$OUT/interleave.tar.gz"
