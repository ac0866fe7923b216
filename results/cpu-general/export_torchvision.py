"""Export torchvision classifiers (random weights, nothing downloaded) at 224 px and each batch size into a
folder, named as the checker sets name them (``NAME_i224_bB.onnx``): the zoo's ``export_variant``, which
validates each file by one ORT run.

    .venv/bin/python results/cpu-general/export_torchvision.py DIR --batch-sizes 1,4 [--jobs 6] regnet_x_800mf ...
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import TypeVar

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel

T = TypeVar("T")


def export_model(name: str, out: Path, batches: list[int]) -> None:
    """Export torchvision's ``name`` at each batch size into ``out``."""
    import torch

    torch.set_num_threads(1)  # one export per process when --jobs runs several
    for batch in batches:
        export_variant(ModelVariant(ZooModel(name=name), 224, batch), out, 17)


def export_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a script that exports named models at several batch sizes into a folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--jobs", type=int, default=1, help="models exported at once, each in its own process")
    return parser


def export_each(export: Callable[[str], T], models: list[str], jobs: int) -> list[T]:
    """``export(name)`` for each model, ``jobs`` processes at once (spawned: torch does not survive a fork)."""
    if jobs > 1:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            return list(pool.map(export, models))
    return [export(name) for name in models]


def main() -> int:
    args = export_parser(__doc__.splitlines()[0]).parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    export_each(partial(export_model, out=args.out, batches=batches), args.models, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
