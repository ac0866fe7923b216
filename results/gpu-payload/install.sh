#!/usr/bin/env bash
# On the GPU host: copy the carried payload pieces (.gpuhost/plN, see build.sh) to /tmp/gh-payload and,
# once all are there (each piece's `pieces` file says how many build.sh made), unpack them into /tmp/site
# (put it first on PYTHONPATH). Idempotent: a machine that has the payload says so and does nothing.
#   bash results/gpu-payload/install.sh pl0 [pl1 ...]
# Exit 0 when installed, 3 while pieces are missing (it lists them), 1 when unpacking fails.
set -uo pipefail
mkdir -p /tmp/gh-payload /tmp/site
for d in "$@"; do cp -r ".gpuhost/$d" /tmp/gh-payload/ || echo "no .gpuhost/$d in this call's tree: carry it"; done
if [ -e /tmp/site/.payload-installed ]; then echo "payload: installed in /tmp/site"; exit 0; fi
pieces=$(cat /tmp/gh-payload/*/pieces 2>/dev/null | head -1)
[ -n "$pieces" ] || { echo "payload: no piece here yet (no .gpuhost/plN/pieces): carry one"; exit 3; }
have=$(ls /tmp/gh-payload/*/payload.part.* 2>/dev/null | wc -l)
if (( have < pieces )); then
  missing=$(for i in $(seq 0 $((pieces - 1))); do [ -e /tmp/gh-payload/pl$i/payload.part.$i ] || printf 'pl%s ' "$i"; done)
  echo "payload: $have of $pieces pieces here; still to carry: $missing"; exit 3
fi
cat $(ls /tmp/gh-payload/*/payload.part.* | sort -V) | python3 -c "
import sys, tarfile
tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site', filter='tar')" \
  || { echo "payload: unpacking FAILED"; exit 1; }
touch /tmp/site/.payload-installed /tmp/site/.installed
PYTHONPATH=/tmp/site python3 -c "
import onnxruntime as o, dagster, simpy, transformers, hta
print('payload: onnxruntime', o.__version__, o.get_available_providers(), 'dagster', dagster.__version__, 'transformers', transformers.__version__)"
