from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from hase_dagster.analysis.analyze import ModelAnalysis, analyze_model
from hase_dagster.analysis.kernel_models import build_kernel_model, load_inputs, write_kernel_model
from hase_dagster.core.ort_runtime import make_session


@pytest.fixture(scope="module")
def transformer(transformer_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelAnalysis:
    return analyze_model(transformer_onnx, "cpu", tmp_path_factory.mktemp("tr") / "opt.onnx")


def _extract_all(analysis: ModelAnalysis, out_dir: Path) -> dict[str, Path]:
    optimized = onnx.load(str(analysis.optimized.optimized_path))
    return {k.node_name: write_kernel_model(optimized, k, out_dir, "cpu") for k in analysis.kernels}


def test_every_resnet18_kernel_runs_standalone_and_instances_are_shared(resnet18_onnx: Path, tmp_path: Path) -> None:
    analysis = analyze_model(resnet18_onnx, "cpu", tmp_path / "opt.onnx")
    paths = _extract_all(analysis, tmp_path / "kernels")
    files = set(paths.values())
    # layer1's four 64-channel 3x3 convolutions are two identical instances: built once each.
    assert len(files) < len(analysis.kernels)
    assert len(files) == len({k.instance_id for k in analysis.kernels})
    for path in files:
        session = make_session(path, "cpu", level="disable")
        feeds = load_inputs(path)
        assert feeds is not None and set(feeds) == {i.name for i in session.get_inputs()}
        outputs = session.run(None, feeds)
        assert all(np.isfinite(o).all() for o in outputs if o.dtype.kind == "f")


def test_contrib_op_kernel_keeps_its_domain_opset_and_weights(transformer: ModelAnalysis, tmp_path: Path) -> None:
    optimized = onnx.load(str(transformer.optimized.optimized_path))
    skip_ln = next(k for k in transformer.kernels if k.op_type == "SkipLayerNormalization")
    model = build_kernel_model(optimized, skip_ln)
    assert {o.domain for o in model.opset_import} == {"", "com.microsoft"}
    assert model.ir_version <= 10
    assert {i.name for i in model.graph.initializer} == set(skip_ln.weight_names) != set()
    paths = _extract_all(transformer, tmp_path)
    ops = Counter(onnx.load(str(p)).graph.node[0].op_type for p in set(paths.values()))
    assert {"SkipLayerNormalization", "Gelu", "FusedMatMul"} <= set(ops)


def test_file_names_are_safe_and_readable(transformer: ModelAnalysis) -> None:
    for kernel in transformer.kernels:
        stem = kernel.file_stem
        assert stem.startswith(kernel.family[:20]) and stem.endswith(kernel.instance_id)
        assert all(c.isalnum() or c in "_.+-" for c in stem)


def test_failing_kernel_leaves_no_file(transformer: ModelAnalysis, tmp_path: Path) -> None:
    optimized = onnx.load(str(transformer.optimized.optimized_path))
    kernel = next(k for k in transformer.kernels if k.op_type == "Gelu")
    broken = type(kernel)(**{**vars(kernel), "node_name": "no-such-node"})
    with pytest.raises(Exception, match="no-such-node"):
        write_kernel_model(optimized, broken, tmp_path, "cpu")
    assert list(tmp_path.iterdir()) == []


def _sign_changes(values: np.ndarray) -> float:
    return float(np.mean(np.sign(values[..., 1:]) != np.sign(values[..., :-1])))


def test_prelu_kernels_are_fed_sign_runs_and_other_kernels_noise(tmp_path: Path) -> None:
    """ORT's CPU PRelu branches per element: its kernel gets a feature map's sign runs, not uniform noise."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 8, 3, 3], rng.standard_normal(576).tolist())
    slope = helper.make_tensor("slope", TensorProto.FLOAT, [8, 1, 1], [0.25] * 8)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("PRelu", ["c", "slope"], ["p"]),
            helper.make_node("Sigmoid", ["p"], ["y"]),
        ],
        "prelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])],
        initializer=[weight, slope],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "prelu.onnx"))
    analysis = analyze_model(tmp_path / "prelu.onnx", "cpu", tmp_path / "opt.onnx")
    paths = _extract_all(analysis, tmp_path / "kernels")
    by_op = {k.op_type: paths[k.node_name] for k in analysis.kernels}
    prelu_feeds, sigmoid_feeds = load_inputs(by_op["PRelu"]), load_inputs(by_op["Sigmoid"])
    assert prelu_feeds is not None and sigmoid_feeds is not None
    (prelu_input,) = prelu_feeds.values()
    (sigmoid_input,) = sigmoid_feeds.values()
    assert _sign_changes(prelu_input) < 0.35 < 0.45 < _sign_changes(sigmoid_input)
    assert 0.35 < float(np.mean(prelu_input < 0)) < 0.65  # both branches still taken
