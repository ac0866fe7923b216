"""Convolutions no table has (transposed, 1-D, 3-D), predicted as the 2-D convolutions they equal (learn.proxies),
and the FLOPs of the operators the ``operators`` probes brought in (analysis.costs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.costs import estimate_flops
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.zoo import trace_to_onnx
from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.predict import predict_kernels_under
from hase_dagster.learn.proxies import proxy_kernels


def conv_kernel(op: str, x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], **attributes: Any) -> Kernel:
    inputs = [TensorInfo("x", "float", x), TensorInfo("w", "float", w)]
    outputs = [TensorInfo("y", "float", out)]
    return Kernel(
        variant_id="v", ep="cuda", order=0, node_name="n", family=op, op_type=op, domain="", absorbed_ops=["n"],
        absorbed_op_types=[op], attributes=attributes, inputs=inputs, outputs=outputs, weight_names=["w"],
        flops=estimate_flops(op, attributes, inputs, outputs),
    )  # fmt: skip


def knows_conv(family: str) -> bool:
    return family == "Conv"


def test_a_transposed_convolutions_flops_count_each_input_element_against_its_weight_slice() -> None:
    # 64 -> 32 channels, 2x2 kernel, stride 2, on an 8x8 map: each input element meets 32 x 4 weights
    kernel = conv_kernel("ConvTranspose", (2, 64, 8, 8), (64, 32, 2, 2), (2, 32, 16, 16), strides=[2, 2])
    assert kernel.flops == 2 * (2 * 64 * 8 * 8) * 32 * 4


def test_a_recurrent_layers_flops_grow_with_its_steps_and_directions() -> None:
    def lstm(steps: int, directions: int) -> int:
        x, w, r = (steps, 4, 80), (directions, 4 * 96, 80), (directions, 4 * 96, 96)
        inputs = [TensorInfo(n, "float", s) for n, s in (("x", x), ("w", w), ("r", r))]
        return estimate_flops("LSTM", {}, inputs, [TensorInfo("y", "float", (steps, directions, 4, 96))])

    assert lstm(100, 1) > 2 * 100 * 4 * (4 * 96) * (80 + 96)  # the products, and the gates beside them
    assert lstm(200, 1) == 2 * lstm(100, 1) and lstm(100, 2) == 2 * lstm(100, 1)


def test_a_transposed_convolution_is_predicted_as_its_adjoint_convolution() -> None:
    kernel = conv_kernel(
        "ConvTranspose", (2, 64, 8, 8), (64, 32, 4, 4), (2, 32, 16, 16), strides=[2, 2], pads=[1, 1, 1, 1]
    )
    how, (proxy,) = proxy_kernels(kernel, knows_conv) or ("", [])
    assert "adjoint" in how and proxy.family == "Conv" and proxy.op_type == "Conv"
    # input and output swapped, the weight (C_in, C_out / group, k, k) read as a convolution's from 32 to 64
    assert proxy.inputs[0].shape == (2, 32, 16, 16) and proxy.outputs[0].shape == (2, 64, 8, 8)
    assert proxy.flops == kernel.flops and proxy.attributes["strides"] == [2, 2]


def test_a_1d_and_a_3d_convolution_become_2d_ones_with_the_same_gemm() -> None:
    one_d = conv_kernel("Conv", (4, 80, 1000), (128, 80, 5), (4, 128, 498), strides=[2], pads=[1, 1], dilations=[1])
    how, (row,) = proxy_kernels(one_d, knows_conv) or ("", [])
    assert how == "Conv 1-D as 2-D" and row.inputs[0].shape == (4, 80, 1, 1000)
    assert row.attributes["kernel_shape"] == [1, 5] and row.attributes["pads"] == [0, 1, 0, 1]
    assert row.flops == one_d.flops
    three_d = conv_kernel(
        "Conv", (2, 64, 16, 56, 56), (128, 64, 3, 3, 3), (2, 128, 8, 28, 28),
        strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
    )  # fmt: skip
    _, (frames,) = proxy_kernels(three_d, knows_conv) or ("", [])
    # (batch x output frames) samples of (channels x frame kernel) channels: M, N and K of the 3-D GEMM
    assert frames.inputs[0].shape == (2 * 8, 64 * 3, 56, 56) and frames.outputs[0].shape == (2 * 8, 128, 28, 28)
    assert frames.inputs[1].shape == (128, 64 * 3, 3, 3) and frames.flops == three_d.flops


def test_a_2d_convolution_an_nchwc_one_and_an_unknown_family_get_no_proxy() -> None:
    assert proxy_kernels(conv_kernel("Conv", (1, 8, 7, 7), (8, 8, 3, 3), (1, 8, 7, 7)), knows_conv) is None
    blocked = conv_kernel("Conv", (1, 1, 7, 7, 8), (8, 8, 3, 3), (1, 1, 7, 7, 8))
    blocked.domain = "com.microsoft.nchwc"
    assert proxy_kernels(blocked, knows_conv) is None
    transposed = conv_kernel("ConvTranspose", (1, 8, 7, 7), (8, 8, 2, 2), (1, 8, 14, 14), strides=[2, 2])
    assert proxy_kernels(transposed, lambda family: False) is None  # no convolution family to stand in


class RecordingRegressor:
    """Answers 1 ms for every kernel, and keeps what it was asked about."""

    graph_factors = None

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def knows(self, family: str) -> bool:
        return family == "Conv"

    def predict_kernels(self, records: list[dict[str, Any]], loads: list[dict[str, float]]) -> list[dict[str, Any]]:
        self.asked += records
        return [{t: np.ones(len(records)) for t in ("median_ms", "mean_ms", "p90_ms")} for _ in loads]


def test_predictions_ask_the_regressor_about_the_stand_in_and_name_it() -> None:
    regressor = RecordingRegressor()
    kernels = [
        conv_kernel("Conv", (2, 64, 16, 56, 56), (128, 64, 3, 3, 3), (2, 128, 16, 56, 56)),
        conv_kernel("Conv", (2, 64, 56, 56), (64, 64, 3, 3), (2, 64, 56, 56)),
    ]
    (predictions,) = predict_kernels_under(regressor, kernels, [{"util": 0.0}])  # type: ignore[arg-type]
    assert [len(r["inputs"][0]["shape"]) for r in regressor.asked] == [4, 4]  # never the 5-D tensor
    assert predictions[0].proxy == "Conv 3-D as 2-D" and not predictions[0].fallback
    assert predictions[1].proxy == "" and predictions[0].instance_id == kernels[0].instance_id


@pytest.mark.parametrize("bundle", ["h100", "cpu"])
def test_a_shipped_bundle_predicts_a_decoders_transposed_convolutions_through_proxies(
    bundle: str, tmp_path: Path
) -> None:
    decoder = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.ConvTranspose2d(32, 16, 2, 2), nn.ReLU()).eval()
    path = tmp_path / "decoder.onnx"
    trace_to_onnx(decoder, torch.randn(1, 3, 64, 64), path, 17, dynamic_batch=True)
    assert "ConvTranspose" in {n.op_type for n in onnx.load(path).graph.node}
    (prediction,) = load_bundle(bundle).predict([path], batch_sizes=[4], loads=["idle"])
    transposed = [k for k in prediction.kernels if "ConvTranspose" in k.family]
    assert transposed and all(k.proxy and not k.fallback for k in transposed)
    assert prediction.coverage["proxied"] == len(transposed) and prediction.predicted_ms > 0
    assert any("never measured" in w for w in prediction.warnings)
