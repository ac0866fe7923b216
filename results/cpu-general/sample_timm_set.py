"""Draw a blind set of timm image models at random, from families no earlier set, profile or zoo model has.

Where sets S-Z were picked by hand, this draws: every timm model name (timm 1.0.31) in a random order fixed by
``--seed``, kept when its family (the name's leading letters: ``efficientnet``, ``convnext``, ``mobilenetv``) is
in no ``set*-models.txt`` here and in no torchvision model that ``hase.yaml`` names, when no model already drawn
has its family, when its default input is at most ``--max-size`` px and it has at most ``--max-params`` million
parameters (counted on the meta device: nothing is built or downloaded). The first ``--count`` kept are printed,
one a line, ready for ``timm_set.py``; a model that then fails to export is left out there and named in
``timm-failed.json``, so draw a few more than needed.

    PYTHONPATH=/tmp/timm-site .venv/bin/python results/cpu-general/sample_timm_set.py --seed 20261128 --count 10
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def family(name: str) -> str:
    """A model name's family: its leading letters (``tf_`` and ``timm_`` prefixes dropped)."""
    name = re.sub(r"^(tf|timm|tv|gluon|legacy)_", "", name)
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else name


def taken_families() -> set[str]:
    """Families of every model in this folder's set lists and of the named models in hase.yaml."""
    names: list[str] = []
    for listing in sorted(HERE.glob("set*-models.txt")):
        names += listing.read_text().split()
    names += re.findall(r"\{name: ([a-z][a-z0-9_]*)", (ROOT / "hase.yaml").read_text())
    return {family(n) for n in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--max-size", type=int, default=256)
    parser.add_argument("--max-params", type=float, default=30.0, help="million parameters")
    args = parser.parse_args(argv)

    import timm
    import torch

    taken = taken_families()
    names = sorted(timm.list_models())
    random.Random(args.seed).shuffle(names)
    drawn: list[str] = []
    for name in names:
        if family(name) in taken:
            continue
        try:
            cfg = timm.get_pretrained_cfg(name)
            size = max((cfg.input_size if cfg is not None else (3, 224, 224))[1:])
            if size > args.max_size:
                continue
            with torch.device("meta"):
                model = timm.create_model(name, pretrained=False)
            params = sum(p.numel() for p in model.parameters()) / 1e6
        except Exception as error:  # noqa: BLE001 - a model timm cannot build here is skipped and named
            print(f"skipped {name}: {type(error).__name__}", file=sys.stderr)
            continue
        if params > args.max_params:
            continue
        print(f"{name}  # {params:.1f} M params, {size} px", file=sys.stderr)
        drawn.append(name)
        taken.add(family(name))
        if len(drawn) == args.count:
            break
    print("\n".join(drawn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
