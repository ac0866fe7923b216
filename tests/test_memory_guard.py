"""A model too large for the machine is refused before analysis, with the estimate, not OOM-killed."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from hase_dagster.analysis.memory import check_fits_in_memory, tensor_bytes
from hase_dagster.core.errors import HaseError
from hase_dagster.orchestration.cli import main


def _matmul_model(batch: int | str) -> onnx.ModelProto:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], [0.0] * 256 * 256)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 256])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 256])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_tensor_bytes_count_weights_inputs_activations_and_outputs() -> None:
    # weights 256x256, and x, y, z of 4 x 256 floats each
    assert tensor_bytes(_matmul_model(4)) == 4 * (256 * 256 + 3 * 4 * 256)


def test_the_estimate_refuses_what_does_not_fit() -> None:
    assert check_fits_in_memory(_matmul_model(4), "m", available=10**10) > 0
    with pytest.raises(HaseError, match=r"needs about .* GB .* available"):
        check_fits_in_memory(_matmul_model(4), "m", available=1000)


def test_predict_at_a_huge_batch_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dynamic.onnx"
    onnx.save(_matmul_model("batch"), str(path))
    from hase_dagster.learn.sweep import AnalysisCache

    with pytest.raises(HaseError, match="needs about"):
        AnalysisCache(tmp_path / "cache").kernels(path, 10**9, "cpu")
    assert main(["analyze", str(path)]) == 0  # the symbolic batch counts as unknown: analysed
