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
