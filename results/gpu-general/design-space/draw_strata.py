"""Draw design-space probes at random within strata of cell kind (issue 11, round 3).

The committee (`select_probes.py`) picks where the current regressors disagree; it did not see where a
family held out is wrong (`family_out_kernels.md`: grouped and depthwise convolutions, large dense
kernels at batch 1, the text encoder's attention and LayerNorm), and in two rounds it chose one
attention probe. This draws COUNT probes per stratum uniformly at random (numpy seed SEED) among the
probes of seeds START..START+POOL-1 that fall in it, and prints them as `hase.yaml` model entries.
Which probes fall in a stratum is a property of the probe spec alone; no measured network is read.

    .venv/bin/python results/gpu-general/design-space/draw_strata.py --start 2600 --pool 1000 --seed 2600 \
        attention=12 grouped_conv=12 inverted_residual=6 large_dense=6
    # the CPU profile's probes (hase.yaml, cpu): every cell kind, cells of at most 0.2 GMAC
    .venv/bin/python results/gpu-general/design-space/draw_strata.py --start 5000 --pool 1000 --seed 5000 \
        --max-macs 2e8 dense_conv=3 grouped_conv=2 inverted_residual=2 concat=2 convnext=2 attention=3 mlp=2 pool=2
    # grouped convolutions by channels per group (design_space's grouped_conv space; issue 11, 2026-11-24):
    # the CPU profile's (cells of at most 0.2 GMAC) and the H100's
    .venv/bin/python results/gpu-general/design-space/draw_strata.py --space grouped_conv --start 6000 --pool 1000 \
        --seed 6000 --max-macs 2e8 narrow_grouped=4 grouped_conv=2
    .venv/bin/python results/gpu-general/design-space/draw_strata.py --space grouped_conv --start 7000 --pool 1000 \
        --seed 7000 narrow_grouped=8 grouped_conv=8
    # depthwise kernels of 5/7 at 28-112 px (design_space's depthwise space), beside the committee's 10 of
    # select_probes.py --space depthwise (selection-depthwise.json)
    .venv/bin/python results/gpu-general/design-space/draw_strata.py --space depthwise --start 8300 --pool 1000 \
        --seed 8300 large_depthwise=10
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from hase_dagster.analysis.design_space import PROBE_SPACES, ProbeSpec, draw_probe

STRATA: dict[str, Callable[[ProbeSpec], bool]] = {
    # transformer encoder layers over the feature map's tokens (49, 196 or 784)
    "attention": lambda p: p.cell == "attention",
    # a plain convolution cell with 1 < groups (grouped or depthwise)
    "grouped_conv": lambda p: p.cell == "conv" and p.groups > 1,
    # grouped, not depthwise, at most 16 channels per group (ResNeXt's 4-16, RegNet's 8-16)
    "narrow_grouped": lambda p: p.cell == "conv" and 1 < p.groups < p.width and p.width // p.groups <= 16,
    # expand 1x1, depthwise k x k (3/5/7), optional squeeze-excitation, project 1x1
    "inverted_residual": lambda p: p.cell == "inverted_residual",
    # dense convolutions of kernel 5 or 7, alone or as concat branches
    "large_dense": lambda p: (
        (p.cell == "conv" and p.groups == 1 and p.kernel >= 5) or (p.cell == "concat" and max(p.branches) >= 5)
    ),
    # depthwise kernels of 5 or 7 on maps of 28 px and more, alone or in an inverted residual
    "large_depthwise": lambda p: (
        p.kernel >= 5
        and p.resolution >= 28
        and (p.cell == "inverted_residual" or (p.cell == "conv" and p.groups == p.width == p.out_width))
    ),
    # every cell kind on its own (the CPU profile draws across all of them)
    "dense_conv": lambda p: p.cell == "conv" and p.groups == 1,
    "concat": lambda p: p.cell == "concat",
    "convnext": lambda p: p.cell == "convnext",
    "mlp": lambda p: p.cell == "mlp",
    "pool": lambda p: p.cell == "pool",
}


def draw(
    start: int, pool: int, seed: int, counts: dict[str, int], max_macs: float = float("inf"), space: str = "cells"
) -> dict[str, list[int]]:
    """Probe seeds per stratum, ``counts[stratum]`` of them drawn without replacement.

    Args:
        start: first probe seed of the pool.
        pool: how many consecutive probe seeds the pool holds.
        seed: numpy seed of the draw.
        counts: stratum name -> how many probes to draw from it.
        max_macs: only probes whose cell has at most this many multiply-adds per sample (a CPU profile
            times every kernel on one core).
        space: the probe space (``design_space.PROBE_SPACES``) the seeds are drawn in.

    Returns:
        Stratum name -> sorted probe seeds; a probe is drawn for one stratum at most.

    Raises:
        ValueError: a stratum has fewer probes in the pool than asked.
    """
    specs = [p for p in (draw_probe(s, space) for s in range(start, start + pool)) if p.cell_macs() <= max_macs]
    rng = np.random.default_rng(seed)
    taken: set[int] = set()
    chosen: dict[str, list[int]] = {}
    for name, count in counts.items():
        members = [p.seed for p in specs if STRATA[name](p) and p.seed not in taken]
        if len(members) < count:
            raise ValueError(f"stratum {name} has {len(members)} probes in the pool, {count} asked")
        picked = sorted(int(s) for s in rng.choice(members, count, replace=False))
        taken.update(picked)
        chosen[name] = picked
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--pool", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--space", choices=PROBE_SPACES, default="cells", help="the probe space drawn in")
    parser.add_argument("--max-macs", type=float, default=float("inf"), help="cap on a cell's multiply-adds")
    parser.add_argument("counts", nargs="+", help=f"STRATUM=COUNT; strata: {', '.join(STRATA)}")
    args = parser.parse_args()
    counts = {}
    for item in args.counts:
        name, _, count = item.partition("=")
        if name not in STRATA or not count.isdigit():
            parser.exit(2, f"hase: error: {item!r} is not STRATUM=COUNT with a stratum of {', '.join(STRATA)}\n")
        counts[name] = int(count)
    try:
        chosen = draw(args.start, args.pool, args.seed, counts, args.max_macs, args.space)
    except ValueError as error:
        parser.exit(2, f"hase: error: {error}\n")
    prefix = {"cells": "dsp", "grouped_conv": "dsg", "depthwise": "dsw"}[args.space]
    option = "" if args.space == "cells" else f", probe_space: {args.space}"
    for name, seeds in chosen.items():
        print(f"      # {name}")
        for s in seeds:
            print(
                f"      - {{name: {prefix}_s{s}, kind: design_probe, seed: {s}{option}}}  # {draw_probe(s, args.space)}"
            )


if __name__ == "__main__":
    main()
