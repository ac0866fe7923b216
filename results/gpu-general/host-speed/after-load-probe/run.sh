#!/usr/bin/env bash
# Does the GPU host's loop run slow after heavy host work, and for how long? A fresh lease's first call: the host
# loop read every second (../lease-start-probe/host_probe.py) for IDLE_S before any work, then through LOAD_S of
# heavy work like what precedes a blind set's first timing (every core busy in Python, as the payload's unpacking and
# the export's 8 processes are, and gigabytes written to /tmp), then for the rest of TOTAL_S.
#   IDLE_S=90 LOAD_S=90 TOTAL_S=510 bash results/gpu-general/host-speed/after-load-probe/run.sh > $OUT/probe.txt
set -uo pipefail
idle=${IDLE_S:-90} load=${LOAD_S:-90} total=${TOTAL_S:-510}
PYTHONPATH=. python3 results/gpu-general/host-speed/lease-start-probe/host_probe.py "$total" &
probe=$!
trap 'kill $probe $(jobs -p) 2>/dev/null' EXIT INT TERM
sleep "$idle"
echo "# load starts: $(nproc) busy processes and 4 GiB written to /tmp for ${load} s" >&2
for _ in $(seq "$(nproc)"); do timeout "$load" python3 -c "while True: pass" & done
timeout "$load" bash -c 'for i in 1 2 3 4; do dd if=/dev/urandom of=/tmp/after-load-$i bs=1M count=1024 status=none; done' &
sleep "$load"
rm -f /tmp/after-load-*
echo "# load ends" >&2
wait $probe
