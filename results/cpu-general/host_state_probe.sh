#!/usr/bin/env bash
# On the GPU host, after the payload (not yet run: written 2026-11-25 for the next device session): two of set
# L's generator networks that the idle spread study saw in both host states (seeds 844 and 846, batch 1), each run
# back to back for 30 s unpinned, pinned to core 2 and pinned to core 9, with the host readings (host_state_probe.py); about 4 minutes.
#   bash results/cpu-general/host_state_probe.sh
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
w=/tmp/host-state
mkdir -p "$w/files" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|MHz|Thread"; date -u; } \
  > "$w/host.txt" 2>&1
[ -e "$w/files/traits.json" ] || python3 results/cpu-general/checker_nets.py "$w/files" --seeds 844,846 \
  --batch-sizes 1 --jobs 2 2> "$w/export.log"
for f in "$w"/files/*_b1.onnx; do
  for pin in none 2 9; do
    name=$(basename "$f" .onnx)-pin-$pin
    args=(); [ "$pin" = none ] || args=(--pin "$pin")
    timeout 50 python3 results/cpu-general/host_state_probe.py "$f" "$w/$name.json" --seconds 30 "${args[@]}"
  done
done
date -u >> "$w/host.txt"
tar -C "$w" --exclude=files -czf "$OUT/host-state.tar.gz" . && tar -tzf "$OUT/host-state.tar.gz"
