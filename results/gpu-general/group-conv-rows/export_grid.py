"""Export the wide grouped-convolution probe grid (issue 11): one ``Conv(C, C, k x k, stride s, group g, pad k // 2)``
with a bias per ONNX file. dm_nfnet_f0's group-6 3 x 3 convolutions of 128 channels a group ran on the H200 at 0.047
ms where the `h200` bundle read 0.087 (+84%, results/gpu-general/user-kernels-am/README.md): the GPU tables hold about
a hundred grouped-convolution rows with 96-256 channels a group, while NFNets, RegNets and wide ResNeXts use group
widths of 8-256.

The configurations are drawn with a fixed seed over the ranges real networks use, not chosen by hand: groups from
{2, 4, 6, 8, 16, 32}, channels a group log-uniform over 32-256 rounded to a multiple of 8 (the tables hold
hundreds of grouped rows under 32 channels a group and few above), C = groups x channels a
group at most 3072, k in {1, 3, 3, 3, 5}, stride 1 three times in four and 2 otherwise, an output map from 7 to 56 px,
the input map at most 112 px and 96 x 224 x 224 values, at most 4 GFLOP a sample. Built with onnx.helper (no torch),
random weights.

    python3 export_grid.py OUT_DIR [BATCHES]     # BATCHES comma-separated, default 1,16,64
    python3 export_grid.py --list                # the configurations, one name per line

Files: ``OUT_DIR/gc_k{k}_s{s}_g{groups}_w{channels a group}_p{map}_b{B}.onnx``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # results/gpu-general: grid_export.py
from grid_export import ConvConfig, conv_grid_main, draw_distinct  # noqa: E402

SEED = 20261201
COUNT = 40
GROUPS = (2, 4, 6, 8, 16, 32)
GROUP_WIDTH_RANGE = (32, 256)
MAX_CHANNELS = 3072
KERNELS = (1, 3, 3, 3, 5)
STRIDES = (1, 1, 1, 2)
OUTPUT_MAPS = (7, 10, 12, 14, 17, 19, 24, 28, 35, 38, 56)
MAX_INPUT_MAP = 112
MAX_INPUT_VALUES = 96 * 224 * 224
MAX_FLOPS_PER_SAMPLE = 4e9


def name(cfg: ConvConfig) -> str:
    return f"gc_k{cfg.kernel}_s{cfg.stride}_g{cfg.groups}_w{cfg.in_channels // cfg.groups}_p{cfg.output_map}"


def configurations(count: int = COUNT, seed: int = SEED) -> list[ConvConfig]:
    """``count`` distinct configurations drawn with ``seed`` under the grid's limits, in draw order."""
    import random

    rng = random.Random(seed)
    low, high = (math.log(w) for w in GROUP_WIDTH_RANGE)

    def draw() -> ConvConfig | None:
        width = max(GROUP_WIDTH_RANGE[0], round(math.exp(rng.uniform(low, high)) / 8) * 8)
        kernel, stride, groups = rng.choice(KERNELS), rng.choice(STRIDES), rng.choice(GROUPS)
        channels = groups * width
        cfg = ConvConfig(kernel, stride, channels, channels, rng.choice(OUTPUT_MAPS), groups)
        if channels > MAX_CHANNELS or not cfg.within(MAX_INPUT_MAP, MAX_INPUT_VALUES, max_flops=MAX_FLOPS_PER_SAMPLE):
            return None
        return cfg

    return draw_distinct(count, draw)


def main() -> int:
    return conv_grid_main(sys.argv[1:], configurations(), name, SEED)


if __name__ == "__main__":
    raise SystemExit(main())
