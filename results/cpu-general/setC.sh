#!/usr/bin/env bash
# Set C (fixed 2026-11-24 09:20 UTC, before anything of it was timed or predicted): the independent
# generator's seeds 725-736 and six torchvision models no CPU profile or earlier set holds, each at batch 1
# and 4, into DIR (default /tmp/chkC). Then, quietly (nothing else running), from the data directory of a
# `make run`:
#   .venv/bin/hase evaluate DIR --profile cpu --json > results/cpu-general/setC-....json
set -euo pipefail
dir=${1:-/tmp/chkC}
py=${PY:-.venv/bin/python}
$py results/cpu-general/checker_nets.py "$dir" --seeds 725-736 --batch-sizes 1,4
$py - "$dir" <<'PY'
import sys
from pathlib import Path

import torch
import torchvision

from hase_dagster.analysis.zoo import trace_to_onnx

out = Path(sys.argv[1])
for name in ("regnet_x_400mf", "regnet_y_800mf", "resnext50_32x4d", "mnasnet1_0", "mobilenet_v3_large",
             "shufflenet_v2_x0_5"):
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    for batch in (1, 4):
        trace_to_onnx(model, torch.randn(batch, 3, 224, 224), out / f"{name}_i224_b{batch}.onnx", 17)
PY
ls "$dir" | wc -l
