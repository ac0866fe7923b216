"""Export the downsampling-convolution probe grid (issue 11): one ``Conv(C, m*C, k x k, stride k)`` with a bias per
ONNX file, on ``[B, C, P, P]`` maps, the patchify and stage-downsampling layers of ConvNeXt, Swin, PoolFormer and
hand-written conv stems. Hase's GPU tables time such convolutions almost only over 3 input channels (the design-space
networks' stems); over many channels they hold three ConvNeXt shapes, and set AJ's 8 x 8 ones over 96-128 channels
were predicted 2.5-3.7x too slow (results/gpu-general/projection-rows/README.md).

The configurations are sampled with a fixed seed over the ranges real networks use, not chosen by hand:
k in {2, 4, 8} (2 twice as likely), C in 32-768, m in {1, 2, 4}, an output map of 7-56 px, the input map at most
256 px and at most 96 x 224 x 224 values (a stem's), the weight at most 16 M parameters. Built with onnx.helper
(no torch: a file takes milliseconds), random weights.

    python3 export_grid.py OUT_DIR [BATCHES]     # BATCHES comma-separated, default 1,16,64
    python3 export_grid.py --list                # the configurations, one name per line

Files: ``OUT_DIR/ds_k{k}_c{C}_m{m}_o{P/k}_b{B}.onnx``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # results/gpu-general: grid_export.py
from grid_export import grid_main, write_conv_model  # noqa: E402

SEED = 20261129
COUNT = 40
KERNELS = (2, 2, 4, 8)
CHANNELS = (32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768)
MULTIPLIERS = (1, 2, 4)
OUTPUT_MAPS = (7, 8, 12, 14, 16, 28, 32, 56)
MAX_INPUT_MAP = 256
MAX_INPUT_VALUES = 96 * 224 * 224
MAX_WEIGHTS = 16 * 1024 * 1024


def configurations(count: int = COUNT, seed: int = SEED) -> list[tuple[int, int, int, int]]:
    """``count`` distinct (k, C, m, output map) drawn with ``seed`` under the grid's limits, in draw order."""
    import random

    rng = random.Random(seed)
    chosen: list[tuple[int, int, int, int]] = []
    while len(chosen) < count:
        k, c, m, o = rng.choice(KERNELS), rng.choice(CHANNELS), rng.choice(MULTIPLIERS), rng.choice(OUTPUT_MAPS)
        p = k * o
        if p > MAX_INPUT_MAP or c * p * p > MAX_INPUT_VALUES or c * c * m * k * k > MAX_WEIGHTS:
            continue
        if (k, c, m, o) not in chosen:
            chosen.append((k, c, m, o))
    return chosen


def name(k: int, c: int, m: int, o: int) -> str:
    return f"ds_k{k}_c{c}_m{m}_o{o}"


def write(path: Path, k: int, c: int, m: int, o: int, batch: int, seed: int) -> None:
    write_conv_model(path, name(k, c, m, o), batch, (c, m * c), (k * o, o), k, k, seed)


def main() -> int:
    configs = configurations()
    return grid_main(
        sys.argv[1:], [name(*cfg) for cfg in configs], lambda path, i, batch: write(path, *configs[i], batch, SEED + i)
    )


if __name__ == "__main__":
    raise SystemExit(main())
