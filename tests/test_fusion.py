"""Fusion naming against what ORT 1.31 really produces on the CPU EP (resnet18: 9 Conv_Relu, 8 Conv_Add_Relu)."""

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from hase_dagster.analysis.analyze import ModelAnalysis, analyze_model
from hase_dagster.analysis.fusion import family_name, fold_constant_nodes, run_fingerprints
from hase_dagster.core import ort_runtime
from hase_dagster.core.errors import ModelLoadError
from hase_dagster.core.ort_runtime import make_session


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


def _standardised_conv(path: Path) -> onnx.ModelProto:
    """A convolution whose weight is standardised at run time by training-mode BatchNormalization over the constant
    weight, as timm's NFNets export: ORT folds the BatchNormalization away, the CUDA EP refuses it unfolded."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal((1, 8, 27)).astype(np.float32)
    weight = numpy_helper.from_array(values, "weight")
    # as torch exports it: the batch statistics also given as the running ones (momentum 1), so either reading of
    # training_mode gives the same standardised weight
    mean = numpy_helper.from_array(values.mean(axis=(0, 2)), "mean")
    var = numpy_helper.from_array(values.var(axis=(0, 2)), "var")
    ones = numpy_helper.from_array(np.ones(8, np.float32), "ones")
    zero = numpy_helper.from_array(np.zeros(8, np.float32), "zero")
    shape = numpy_helper.from_array(np.array([8, 3, 3, 3], np.int64), "shape")
    nodes = [
        helper.make_node(
            "BatchNormalization",
            ["weight", "ones", "zero", "mean", "var"],
            ["standardised", "mean_out", "var_out"],
            name="bn",
            training_mode=1,
            momentum=1.0,
        ),
        helper.make_node("Reshape", ["standardised", "shape"], ["conv_weight"], name="reshape"),
        helper.make_node("Conv", ["x", "conv_weight"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "standardised_conv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 16, 16])],
        [weight, ones, zero, mean, var, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return make_session(model.SerializeToString(), "cpu", level="disable").run(None, feeds)


def test_constant_nodes_fold_into_initializers_that_give_the_same_outputs(tmp_path: Path) -> None:
    model = _standardised_conv(tmp_path / "standardised.onnx")
    folded, values = fold_constant_nodes(model)
    assert [node.op_type for node in folded.graph.node] == ["Conv", "Relu"]
    assert {"standardised", "conv_weight"} <= set(values)
    assert values["conv_weight"].shape == (8, 3, 3, 3)
    # training-mode BatchNormalization standardises over every axis but the channel
    assert np.allclose(values["standardised"].mean(axis=(0, 2)), 0.0, atol=1e-5)
    assert np.allclose(values["standardised"].std(axis=(0, 2)), 1.0, atol=1e-3)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    # a constant weight is prepacked, a computed one is not: the sums may run in another order
    assert np.allclose(_run(folded, feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-5)
    assert fold_constant_nodes(folded)[1] == {}  # nothing left to fold: the model comes back as it is


def test_an_ep_that_refuses_the_unfolded_model_is_probed_on_its_folded_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CUDA EP refuses training-mode BatchNormalization unoptimized (NFNets on the H200, 2026-11-29); here the CPU
    EP stands in for it. The catalog still maps every original op, and the fingerprints are those of the real run."""
    path = tmp_path / "standardised.onnx"
    model = _standardised_conv(path)
    tensors = {"standardised": 8 * 27 * 4, "conv_weight": 8 * 27 * 4, "conv": 8 * 256 * 4, "y": 8 * 256 * 4}
    real = run_fingerprints(model, tensors, "cpu")
    real_make_session = ort_runtime.make_session

    def refusing(source: bytes | str | Path, ep: str, *args: object, level: str = "all", **kwargs: object) -> object:
        # the EP under study refuses the network unoptimized; the constants alone (no graph input) still run
        loaded = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(str(source))
        unfolded = any(node.op_type == "BatchNormalization" for node in loaded.graph.node)
        if level == "disable" and loaded.graph.input and unfolded:
            raise ModelLoadError("ONNX Runtime cannot load <in-memory model>: Training mode does not support BN")
        return real_make_session(source, ep, *args, level=level, **kwargs)

    monkeypatch.setattr(ort_runtime, "make_session", refusing)
    with pytest.raises(ModelLoadError):
        refusing(model.SerializeToString(), "cpu", level="disable")
    probed = run_fingerprints(model, tensors, "cpu")
    assert probed.keys() == real.keys() == tensors.keys()
    for name in tensors:
        assert np.allclose(probed[name], real[name], rtol=1e-6), name
    analysis = _analyze(path, tmp_path)
    assert analysis.fusion.unmapped == []
    assert [k.family for k in analysis.kernels if k.family.startswith("Conv")] == ["Conv_Relu"]
