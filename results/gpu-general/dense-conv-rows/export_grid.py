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
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # results/gpu-general: grid_export.py
from grid_export import grid_main  # noqa: E402

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


class DenseConv(NamedTuple):
    kernel: int
    stride: int
    in_channels: int
    out_channels: int
    output_map: int
    relu: bool

    @property
    def name(self) -> str:
        return f"dc_k{self.kernel}_s{self.stride}_i{self.in_channels}_o{self.out_channels}_p{self.output_map}" + (
            "_r" if self.relu else ""
        )

    @property
    def input_map(self) -> int:
        return self.output_map * self.stride

    @property
    def flops_per_sample(self) -> float:
        return 2.0 * self.in_channels * self.out_channels * self.kernel**2 * self.output_map**2


def configurations(count: int = COUNT, seed: int = SEED) -> list[DenseConv]:
    """``count`` distinct configurations drawn with ``seed`` under the grid's limits, in draw order."""
    import random

    rng = random.Random(seed)
    low, high = math.log(IN_CHANNEL_LOW), math.log(CHANNEL_RANGE[1])

    def rounded(value: float) -> int:
        return min(CHANNEL_RANGE[1], max(CHANNEL_RANGE[0], round(value / 8) * 8))

    chosen: list[DenseConv] = []
    while len(chosen) < count:
        kernel, stride = rng.choice(KERNELS), rng.choice(STRIDES)
        c_in = math.exp(rng.uniform(low, high))
        c_out = c_in * 2 ** rng.uniform(-MAX_CHANNEL_RATIO_LOG2, MAX_CHANNEL_RATIO_LOG2)
        cfg = DenseConv(kernel, stride, rounded(c_in), rounded(c_out), rng.choice(OUTPUT_MAPS), rng.random() < 0.5)
        if (
            cfg.input_map > MAX_INPUT_MAP
            or cfg.in_channels * cfg.input_map**2 > MAX_INPUT_VALUES
            or cfg.in_channels * cfg.out_channels * cfg.kernel**2 > MAX_WEIGHTS
            or cfg.flops_per_sample > MAX_FLOPS_PER_SAMPLE
        ):
            continue
        if cfg not in chosen:
            chosen.append(cfg)
    return chosen


def write(path: Path, cfg: DenseConv, batch: int, seed: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    k, c_in, c_out = cfg.kernel, cfg.in_channels, cfg.out_channels
    weight = (rng.standard_normal((c_out, c_in, k, k), dtype=np.float32) / np.sqrt(c_in * k * k)).astype(np.float32)
    bias = (rng.standard_normal(c_out, dtype=np.float32) * 0.01).astype(np.float32)
    pad = k // 2
    conv_out = "conv" if cfg.relu else "output"
    nodes = [
        helper.make_node(
            "Conv",
            ["input", "weight", "bias"],
            [conv_out],
            kernel_shape=[k, k],
            strides=[cfg.stride] * 2,
            pads=[pad] * 4,
        )
    ]
    if cfg.relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["output"]))
    graph = helper.make_graph(
        nodes,
        cfg.name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, c_in, cfg.input_map, cfg.input_map])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, c_out, cfg.output_map, cfg.output_map])],
        [numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def main() -> int:
    configs = configurations()
    return grid_main(
        sys.argv[1:], [cfg.name for cfg in configs], lambda path, i, batch: write(path, configs[i], batch, SEED + i)
    )


if __name__ == "__main__":
    raise SystemExit(main())
