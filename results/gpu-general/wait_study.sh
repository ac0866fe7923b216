#!/usr/bin/env bash
# The wait study (wait_study.py) on the GPU host: one call per wheel bundle, as run.sh, then the study:
#   BUNDLES=7 bash results/gpu-general/wait_study.sh [BUNDLE] [SECONDS_PER_CELL]
set -uo pipefail
bundle=${1:-}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/gh
[ -n "$bundle" ] && cp -r ".gpuhost/$bundle" /tmp/gh/
if [ "$(ls /tmp/gh | wc -l)" -lt "${BUNDLES:-7}" ]; then echo "bundles so far: $(ls /tmp/gh)"; exit 0; fi
[ -e /tmp/site/.installed ] || { /tmp/gh/bundle1/offline-install /tmp/gh /tmp/site >/tmp/install.log 2>&1 && touch /tmp/site/.installed; } || { tail /tmp/install.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 results/gpu-general/wait_study.py "${OUT:-/tmp}/wait_study.json" "${2:-1.5}"
