"""Export torchvision classifiers (random weights, nothing downloaded) at 224 px and each batch size into a
folder, named as the checker sets name them (``NAME_i224_bB.onnx``): the zoo's ``export_variant``, which
validates each file by one ORT run.

    .venv/bin/python results/cpu-general/export_torchvision.py DIR --batch-sizes 1,4 [--jobs 6] regnet_x_800mf ...
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel


def export_model(name: str, out: Path, batches: list[int]) -> None:
    """Export torchvision's ``name`` at each batch size into ``out``."""
    import torch

    torch.set_num_threads(1)  # one export per process when --jobs runs several
    for batch in batches:
        export_variant(ModelVariant(ZooModel(name=name), 224, batch), out, 17)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--jobs", type=int, default=1, help="models exported at once, each in its own process")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            list(pool.map(partial(export_model, out=args.out, batches=batches), args.models))
    else:
        for name in args.models:
            export_model(name, args.out, batches)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
