#!/usr/bin/env bash
# A checker set: the independent generator's networks of SEEDS (checker_nets.py) and torchvision models,
# each at batch 1 and 4, exported into DIR. Then, quietly (nothing else running), from the data directory
# of a `make run`: .venv/bin/hase evaluate DIR --profile cpu --json > results/cpu-general/set....json
#   bash results/cpu-general/make_set.sh DIR SEEDS TORCHVISION_MODEL...
# The sets, each fixed before anything of it was timed or predicted (2026-11-24):
#   set C (09:20 UTC): make_set.sh /tmp/chkC 725-736 regnet_x_400mf regnet_y_800mf resnext50_32x4d mnasnet1_0 \
#                      mobilenet_v3_large shufflenet_v2_x0_5
#   set D (10:30 UTC, timed once after every change of that day): make_set.sh /tmp/chkD 737-748 regnet_x_800mf \
#                      regnet_y_1_6gf efficientnet_b1 shufflenet_v2_x1_5 squeezenet1_0 mnasnet0_75
set -euo pipefail
dir=${1:?DIR}
seeds=${2:?SEEDS, e.g. 725-736}
shift 2
py=${PY:-.venv/bin/python}
$py results/cpu-general/checker_nets.py "$dir" --seeds "$seeds" --batch-sizes 1,4
[ $# -eq 0 ] || $py results/cpu-general/export_torchvision.py "$dir" --batch-sizes 1,4 "$@"
ls "$dir" | wc -l
