"""Fusion naming against what ORT 1.31 really produces on the CPU EP (resnet18: 9 Conv_Relu, 8 Conv_Add_Relu)."""

from collections import Counter
from pathlib import Path

import pytest

from hase_dagster.analysis.analyze import ModelAnalysis, analyze_model
from hase_dagster.analysis.fusion import family_name


def _analyze(model: Path, tmp_path: Path) -> ModelAnalysis:
    return analyze_model(model, "cpu", tmp_path / f"{model.stem}.opt.onnx")


@pytest.fixture(scope="module")
def resnet18(resnet18_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelAnalysis:
    return _analyze(resnet18_onnx, tmp_path_factory.mktemp("r18"))


def test_resnet18_cpu_fusions_match_ort(resnet18: ModelAnalysis) -> None:
    families = Counter(k.family for k in resnet18.kernels)
    assert families["Conv_Relu"] == 9
    assert families["Conv_Add_Relu"] == 8
    assert families["Conv"] == 3
    # NCHWc: every convolution is the com.microsoft.nchwc Conv, and ORT's reorder is a kernel too.
    convs = [k for k in resnet18.kernels if k.family.startswith("Conv")]
    assert {(k.domain, k.op_type) for k in convs} == {("com.microsoft.nchwc", "Conv")}
    assert families["ReorderOutput"] == 1
    assert resnet18.fusion.unmapped == []


def test_conv_add_relu_takes_the_skip_input(resnet18: ModelAnalysis) -> None:
    fused = [k for k in resnet18.kernels if k.family == "Conv_Add_Relu"]
    assert all(len(k.activations) == 2 and k.attributes.get("activation") == "Relu" for k in fused)
    assert all(k.absorbed_op_types == ["Conv", "Add", "Relu"] for k in fused)


def test_every_original_compute_op_is_absorbed_once(resnet18: ModelAnalysis) -> None:
    absorbed = [op.name for ops in resnet18.fusion.absorbed.values() for op in ops]
    assert len(absorbed) == len(set(absorbed))
    # 20 Conv + 17 Relu + 8 Add + MaxPool + GlobalAveragePool + Flatten + Gemm
    assert Counter(op.op_type for ops in resnet18.fusion.absorbed.values() for op in ops) == Counter(
        {"Conv": 20, "Relu": 17, "Add": 8, "MaxPool": 1, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    )


def test_transformer_fusions(transformer_onnx: Path, tmp_path: Path) -> None:
    analysis = _analyze(transformer_onnx, tmp_path)
    by_op = {(k.domain, k.op_type): k.family for k in analysis.kernels}
    assert by_op[("com.microsoft", "SkipLayerNormalization")] == "Add_LayerNormalization"
    assert by_op[("com.microsoft", "Gelu")] == "Gelu"
    fused_matmuls = {k.family for k in analysis.kernels if k.op_type == "FusedMatMul"}
    assert fused_matmuls and all(f.endswith("MatMul") and "Transpose" in f for f in fused_matmuls)
    assert Counter(k.family for k in analysis.kernels)["Add_LayerNormalization"] == 2
    assert analysis.fusion.unmapped == []


def test_same_fusion_same_family_across_cnns(resnet18: ModelAnalysis, squeezenet_onnx: Path, tmp_path: Path) -> None:
    squeezenet = _analyze(squeezenet_onnx, tmp_path)
    resnet_families = {k.family for k in resnet18.kernels}
    squeezenet_families = {k.family for k in squeezenet.kernels}
    assert {"Conv_Relu", "MaxPool", "GlobalAveragePool", "Flatten"} <= resnet_families & squeezenet_families
    assert Counter(k.family for k in squeezenet.kernels)["Conv_Relu"] == 26


def test_family_name_rules() -> None:
    assert family_name(["Conv", "Add", "Relu"], "Conv") == "Conv_Add_Relu"
    assert family_name(["Div", "Erf", "Add", "Mul", "Mul"], "Gelu") == "Gelu"
    assert family_name(["MatMul", "Add", "Div", "Erf", "Add", "Mul", "Mul"], "X") == "MatMul_Add_Gelu"
    assert family_name(["Reshape", "Transpose", "MatMul"], "FusedMatMul") == "Transpose_MatMul"
    assert family_name(["Reshape", "Unsqueeze"], "Reshape") == "Reshape"
    assert family_name([], "ReorderInput") == "ReorderInput"


def test_a_fused_sigmoid_conv_with_padded_channels_maps_to_its_ops(tmp_path: Path) -> None:
    """ORT's NCHWc Conv pads 4 output channels to its block and its fused Sigmoid fills the padding with 0.5, which
    moves every power sum of the blocked tensor: the map still finds the Conv and the Sigmoid it absorbed."""
    import torch

    from hase_dagster.analysis.zoo import trace_to_onnx

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.Conv2d(32, 4, 3, padding=1))
    model = torch.nn.Sequential(*model, torch.nn.Sigmoid()).eval()
    path = tmp_path / "sigmoid_out.onnx"
    trace_to_onnx(model, torch.randn(1, 3, 32, 32), path, 17)
    analysis = _analyze(path, tmp_path)
    assert analysis.fusion.unmapped == []
    fused = [k for k in analysis.kernels if k.attributes.get("activation") == "Sigmoid"]
    assert [k.family for k in fused] == ["Conv_Sigmoid"]
    assert fused[0].absorbed_op_types == ["Conv", "Sigmoid"]
