#!/usr/bin/env bash
# On the GPU host: export the networks a user-kernels run studies into DIR/files at BATCHES (comma-separated), once
# (DIR/files/.exported marks it done): UK_CHK_SEEDS' networks of the independent generator (results/cpu-general/
# checker_nets.py) when set, else UK_SEEDS' networks written by hand (results/cpu-general/hand_ops_set.py) when set,
# else UK_MODELS' timm models (the timm wheel carried in .gpuhost/timm). Called by run.sh and cupti_run.sh.
#   bash results/gpu-general/user-kernels/export_networks.sh DIR BATCHES
set -uo pipefail
dir=${1:?DIR} batches=${2:?BATCHES}
[ -e "$dir/files/.exported" ] && exit 0
mkdir -p "$dir/files"
if [ -n "${UK_CHK_SEEDS:-}" ]; then
  PYTHONPATH=/tmp/site:$PWD python3 results/cpu-general/checker_nets.py "$dir/files" --seeds "$UK_CHK_SEEDS" \
    --batch-sizes "$batches" > "$dir/export.log" 2>&1 || { tail "$dir/export.log"; exit 1; }
elif [ -n "${UK_SEEDS:-}" ]; then
  PYTHONPATH=/tmp/site:$PWD python3 results/cpu-general/hand_ops_set.py "$dir/files" --seeds "$UK_SEEDS" \
    --batch-sizes "$batches" > "$dir/export.log" 2>&1 || { tail "$dir/export.log"; exit 1; }
else
  [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site .gpuhost/timm/timm-*.whl
  # shellcheck disable=SC2086  # UK_MODELS is a list of names
  PYTHONPATH=/tmp/site:$PWD:/tmp/timm-site python3 results/cpu-general/timm_set.py "$dir/files" --batch-sizes "$batches" \
    --jobs 6 --ep cuda ${UK_MODELS:?UK_MODELS or UK_SEEDS} > "$dir/export.log" 2>&1 || { tail "$dir/export.log"; exit 1; }
fi
touch "$dir/files/.exported"
ls "$dir/files"
