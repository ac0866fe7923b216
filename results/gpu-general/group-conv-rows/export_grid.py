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
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # results/gpu-general: grid_export.py
from grid_export import grid_main  # noqa: E402

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


class GroupConv(NamedTuple):
    kernel: int
    stride: int
    groups: int
    group_width: int
    output_map: int

    @property
    def channels(self) -> int:
        return self.groups * self.group_width

    @property
    def name(self) -> str:
        return f"gc_k{self.kernel}_s{self.stride}_g{self.groups}_w{self.group_width}_p{self.output_map}"

    @property
    def input_map(self) -> int:
        return self.output_map * self.stride

    @property
    def flops_per_sample(self) -> float:
        return 2.0 * self.channels * self.group_width * self.kernel**2 * self.output_map**2


def configurations(count: int = COUNT, seed: int = SEED) -> list[GroupConv]:
    """``count`` distinct configurations drawn with ``seed`` under the grid's limits, in draw order."""
    import random

    rng = random.Random(seed)
    low, high = (math.log(w) for w in GROUP_WIDTH_RANGE)
    chosen: list[GroupConv] = []
    while len(chosen) < count:
        width = max(GROUP_WIDTH_RANGE[0], round(math.exp(rng.uniform(low, high)) / 8) * 8)
        cfg = GroupConv(rng.choice(KERNELS), rng.choice(STRIDES), rng.choice(GROUPS), width, rng.choice(OUTPUT_MAPS))
        if (
            cfg.channels > MAX_CHANNELS
            or cfg.input_map > MAX_INPUT_MAP
            or cfg.channels * cfg.input_map**2 > MAX_INPUT_VALUES
            or cfg.flops_per_sample > MAX_FLOPS_PER_SAMPLE
        ):
            continue
        if cfg not in chosen:
            chosen.append(cfg)
    return chosen


def write(path: Path, cfg: GroupConv, batch: int, seed: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    k, c, w = cfg.kernel, cfg.channels, cfg.group_width
    weight = (rng.standard_normal((c, w, k, k), dtype=np.float32) / np.sqrt(w * k * k)).astype(np.float32)
    bias = (rng.standard_normal(c, dtype=np.float32) * 0.01).astype(np.float32)
    node = helper.make_node(
        "Conv",
        ["input", "weight", "bias"],
        ["output"],
        kernel_shape=[k, k],
        strides=[cfg.stride] * 2,
        pads=[k // 2] * 4,
        group=cfg.groups,
    )
    graph = helper.make_graph(
        [node],
        cfg.name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, c, cfg.input_map, cfg.input_map])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, c, cfg.output_map, cfg.output_map])],
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
