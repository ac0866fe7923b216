"""What the probe-grid exporters share (``downsample-rows``, ``dense-conv-rows`` and ``group-conv-rows``'
``export_grid.py``): a convolution's configuration and its limits (:class:`ConvConfig`), distinct draws in draw order
(:func:`draw_distinct`), one ``Conv`` (and ``Relu``) written as an ONNX file (:func:`write_conv_model`), and the command
line (:func:`grid_main`): ``--list`` prints the grid's configuration names, one a line; ``OUT_DIR [BATCHES]`` writes
each configuration at each batch size (comma-separated, default 1,16,64) as ``OUT_DIR/NAME_bB.onnx``, skipping files
already there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple


class ConvConfig(NamedTuple):
    """One convolution of a grid: square kernel and maps, padding ``kernel // 2``."""

    kernel: int
    stride: int
    in_channels: int
    out_channels: int
    output_map: int
    groups: int = 1
    relu: bool = False

    @property
    def input_map(self) -> int:
        return self.output_map * self.stride

    @property
    def weights(self) -> int:
        return self.out_channels * self.in_channels // self.groups * self.kernel**2

    @property
    def flops_per_sample(self) -> float:
        return 2.0 * self.weights * self.output_map**2

    def within(
        self, max_input_map: int, max_input_values: int, max_weights: int | None = None, max_flops: float | None = None
    ) -> bool:
        """Whether the input map, the input's values a sample, the weights and the FLOPs a sample are within limits."""
        return (
            self.input_map <= max_input_map
            and self.in_channels * self.input_map**2 <= max_input_values
            and (max_weights is None or self.weights <= max_weights)
            and (max_flops is None or self.flops_per_sample <= max_flops)
        )


def draw_distinct(count: int, draw: Callable[[], ConvConfig | None]) -> list[ConvConfig]:
    """``count`` distinct configurations from ``draw`` (None: a draw outside the grid's limits), in draw order."""
    chosen: list[ConvConfig] = []
    while len(chosen) < count:
        cfg = draw()
        if cfg is not None and cfg not in chosen:
            chosen.append(cfg)
    return chosen


def conv_grid_main(
    argv: Sequence[str], configs: Sequence[ConvConfig], name: Callable[[ConvConfig], str], seed: int
) -> int:
    """:func:`grid_main` for a grid of :class:`ConvConfig`: configuration ``i`` written with weights of seed
    ``seed + i``."""
    names = [name(cfg) for cfg in configs]
    return grid_main(argv, names, lambda path, i, batch: write_conv_config(path, names[i], configs[i], batch, seed + i))


def write_conv_config(path: Path, name: str, cfg: ConvConfig, batch: int, seed: int) -> None:
    """:func:`write_conv_model` of a :class:`ConvConfig` (padding ``kernel // 2``; no group attribute at one group)."""
    write_conv_model(
        path,
        name,
        batch,
        (cfg.in_channels, cfg.out_channels),
        (cfg.input_map, cfg.output_map),
        cfg.kernel,
        cfg.stride,
        seed,
        cfg.kernel // 2,
        cfg.groups if cfg.groups > 1 else None,
        cfg.relu,
    )


def grid_main(argv: Sequence[str], names: Sequence[str], write: Callable[[Path, int, int], None]) -> int:
    """Run the command line.

    Args:
        argv: the arguments after the program name.
        names: each configuration's name, in draw order.
        write: ``write(path, index, batch)`` writes configuration ``index`` at ``batch`` to ``path``.

    Returns:
        The exit status (0).
    """
    if list(argv) == ["--list"]:
        print("\n".join(names))
        return 0
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    batches = [int(x) for x in argv[1].split(",")] if len(argv) > 1 else [1, 16, 64]
    written = 0
    for index, name in enumerate(names):
        for batch in batches:
            path = out / f"{name}_b{batch}.onnx"
            if not path.exists():
                write(path, index, batch)
                written += 1
    print(written, "files written,", len(names) * len(batches), "of the grid in", out)
    return 0


def write_conv_model(
    path: Path,
    name: str,
    batch: int,
    channels: tuple[int, int],
    maps: tuple[int, int],
    kernel: int,
    stride: int,
    seed: int,
    pads: int | None = None,
    group: int | None = None,
    relu: bool = False,
) -> None:
    """Write one ``Conv`` with a bias (and a ``Relu`` after it when ``relu``) as an ONNX file: opset 17, random weights
    scaled by the fan-in, input ``[batch, C_in, map_in, map_in]``.

    Args:
        path: the file to write.
        name: the graph's name.
        batch: the batch size.
        channels: (C_in, C_out).
        maps: (input map, output map) in pixels, square.
        kernel: the square kernel's size.
        stride: the stride in both dims.
        seed: the weights' random seed.
        pads: the padding on every side; None leaves the attribute out.
        group: the convolution's groups; None leaves the attribute out (one group).
        relu: whether a ``Relu`` follows.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    (c_in, c_out), (map_in, map_out), k = channels, maps, kernel
    fan_in = c_in // (group or 1) * k * k
    weight = (rng.standard_normal((c_out, c_in // (group or 1), k, k), dtype=np.float32) / np.sqrt(fan_in)).astype(
        np.float32
    )
    bias = (rng.standard_normal(c_out, dtype=np.float32) * 0.01).astype(np.float32)
    attributes: dict[str, object] = {"kernel_shape": [k, k], "strides": [stride, stride]}
    if pads is not None:
        attributes["pads"] = [pads] * 4
    if group is not None:
        attributes["group"] = group
    conv_out = "conv" if relu else "output"
    nodes = [helper.make_node("Conv", ["input", "weight", "bias"], [conv_out], **attributes)]
    if relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["output"]))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, c_in, map_in, map_in])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, c_out, map_out, map_out])],
        [numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
