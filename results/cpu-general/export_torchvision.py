"""Export torchvision classifiers (random weights, nothing downloaded) at 224 px and each batch size into a
folder, named as the checker sets name them (``NAME_i224_bB.onnx``): the zoo's ``export_variant``, which
validates each file by one ORT run.

    .venv/bin/python results/cpu-general/export_torchvision.py DIR --batch-sizes 1,4 regnet_x_800mf ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch-sizes", default="1,4")
    args = parser.parse_args()
    for name in args.models:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            export_variant(ModelVariant(ZooModel(name=name), 224, batch), args.out, 17)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
