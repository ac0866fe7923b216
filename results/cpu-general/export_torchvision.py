"""Export torchvision classifiers (random weights, nothing downloaded) at 224 px and each batch size into a
folder, named as the checker sets name them (``NAME_i224_bB.onnx``).

    .venv/bin/python results/cpu-general/export_torchvision.py DIR --batch-sizes 1,4 regnet_x_800mf ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torchvision

from hase_dagster.analysis.zoo import trace_to_onnx


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch-sizes", default="1,4")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None).eval()
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            trace_to_onnx(model, torch.randn(batch, 3, 224, 224), args.out / f"{name}_i224_b{batch}.onnx", 17)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
