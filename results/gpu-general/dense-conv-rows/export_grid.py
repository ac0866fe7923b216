"""Export the dense-convolution probe grid (issue 11): one ``Conv(C_in, C_out, k x k, stride s, pad k // 2)`` with a
bias per ONNX file, half of them followed by a ``Relu`` (ORT 1.31's CUDA EP runs it as a kernel of its own, as in the
zoo's tables). Set AM's xception41 ran 26 pointwise convolutions 728 -> 728 at 19 x 19 on the H200 at 73 TFLOPS
where the calibrated `h200` bundle read 130 TFLOPS (-44%), while seresnextaa's 1024 -> 1024 ran at 181
(results/gpu-general/user-kernels-am/README.md): the calibration was learned from the zoo's kernels and the
H100's design-space probes, and the H200 has timed few dense convolutions over channel counts that are not powers of
two. This grid samples them on the device itself.

The configurations are drawn with a fixed seed over the ranges real networks use, not chosen by hand: k in
{1, 1, 1, 3, 3, 5, 7}, stride 1 three times in four and 2 otherwise, C_in log-uniform over 32-2048 and
C_out = C_in x 2^u with u uniform in [-2, 2] (real networks keep, expand or reduce by up to 4x), both rounded to a
multiple of 8 within 16-2048, an output map from 7 to 56 px (odd sizes included: 17, 19, 35 are Inception's and
Xception's), the input map at most 112 px and 96 x 224 x 224 values, the weight at most 16 M parameters and at most
4 GFLOP a sample. Built with onnx.helper (no torch), random weights.

    python3 export_grid.py OUT_DIR [BATCHES]     # BATCHES comma-separated, default 1,16,64
    python3 export_grid.py --list                # the configurations, one name per line

Files: ``OUT_DIR/dc_k{k}_s{s}_i{C_in}_o{C_out}_p{map}[_r]_b{B}.onnx``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # results/gpu-general: grid_export.py
from grid_export import ConvConfig, conv_grid_main, draw_distinct  # noqa: E402

SEED = 20261130
COUNT = 40
KERNELS = (1, 1, 1, 3, 3, 5, 7)
STRIDES = (1, 1, 1, 2)
CHANNEL_RANGE = (16, 2048)
IN_CHANNEL_LOW = 32
MAX_CHANNEL_RATIO_LOG2 = 2.0
OUTPUT_MAPS = (7, 10, 12, 14, 17, 19, 24, 28, 35, 38, 56)
MAX_INPUT_MAP = 112
MAX_INPUT_VALUES = 96 * 224 * 224
MAX_WEIGHTS = 16 * 1024 * 1024
MAX_FLOPS_PER_SAMPLE = 4e9


def name(cfg: ConvConfig) -> str:
    return f"dc_k{cfg.kernel}_s{cfg.stride}_i{cfg.in_channels}_o{cfg.out_channels}_p{cfg.output_map}" + (
        "_r" if cfg.relu else ""
    )


def configurations(count: int = COUNT, seed: int = SEED) -> list[ConvConfig]:
    """``count`` distinct configurations drawn with ``seed`` under the grid's limits, in draw order."""
    import random

    rng = random.Random(seed)
    low, high = math.log(IN_CHANNEL_LOW), math.log(CHANNEL_RANGE[1])

    def rounded(value: float) -> int:
        return min(CHANNEL_RANGE[1], max(CHANNEL_RANGE[0], round(value / 8) * 8))

    def draw() -> ConvConfig | None:
        kernel, stride = rng.choice(KERNELS), rng.choice(STRIDES)
        c_in = math.exp(rng.uniform(low, high))
        c_out = c_in * 2 ** rng.uniform(-MAX_CHANNEL_RATIO_LOG2, MAX_CHANNEL_RATIO_LOG2)
        channels = rounded(c_in), rounded(c_out)
        cfg = ConvConfig(kernel, stride, *channels, rng.choice(OUTPUT_MAPS), relu=rng.random() < 0.5)
        if not cfg.within(MAX_INPUT_MAP, MAX_INPUT_VALUES, MAX_WEIGHTS, MAX_FLOPS_PER_SAMPLE):
            return None
        return cfg

    return draw_distinct(count, draw)


def main() -> int:
    return conv_grid_main(sys.argv[1:], configurations(), name, SEED)


if __name__ == "__main__":
    raise SystemExit(main())
