"""Precision variants (issue 15 C, measured part): fp16 and int8 of a real model built by ORT's
tools, run on the CPU EP, compared with fp32, and their kernels' precisions read from ORT's graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hase_dagster.analysis.graph import OptimizedNode
from hase_dagster.analysis.precision import kernel_precisions
from hase_dagster.orchestration.cli import main


def test_fp16_and_int8_variants_run_and_int8_kernels_are_counted(
    resnet18_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["precision", str(resnet18_onnx), "--out", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    fp32, fp16, int8 = json.loads(out[out.index("{\n") :])["variants"]
    assert [fp32["precision"], fp16["precision"], int8["precision"]] == ["fp32", "fp16", "int8"]
    assert fp32["speedup"] == 1.0 and fp32["top1_agreement"] == 1.0 and fp32["kernels"]["int8_nodes"] == 0
    # Half the bytes of weights in fp16, a quarter in int8.
    assert fp16["size_mb"] == pytest.approx(fp32["size_mb"] / 2, rel=0.05)
    assert int8["size_mb"] == pytest.approx(fp32["size_mb"] / 4, rel=0.1)
    # After ORT's pre-processing every convolution of resnet18 runs as QLinearConv on the CPU EP.
    assert int8["kernels"]["op_types"]["QLinearConv"] == 20 and int8["kernels"]["float_compute_nodes"] == 0
    for variant in (fp16, int8):
        assert 0.0 <= variant["top1_agreement"] <= 1.0 and variant["median_ms"] > 0 and variant["speedup"] > 0
    assert (tmp_path / resnet18_onnx.stem / f"{resnet18_onnx.stem}.int8.onnx").exists()


def test_kernel_precisions_separate_int8_float_and_fallback_nodes() -> None:
    node = lambda op, provider="CUDAExecutionProvider": OptimizedNode(  # noqa: E731
        index=0, name=op, op_type=op, domain="", inputs=[], outputs=[], attributes={}, provider=provider
    )
    nodes = [node("QLinearConv"), node("DequantizeLinear"), node("Conv"), node("QuantizeLinear"), node("Relu")]
    nodes.append(node("QLinearConv", "CPUExecutionProvider"))
    summary = kernel_precisions(nodes)
    assert (summary["int8_nodes"], summary["qdq_nodes"], summary["float_compute_nodes"]) == (2, 2, 1)
    assert summary["provider"] == "CUDAExecutionProvider"
    assert summary["other_provider_nodes"] == ["QLinearConv@CPUExecutionProvider"]


def test_precision_refuses_a_missing_file(capsys: pytest.CaptureFixture) -> None:
    assert main(["precision", "/nonexistent.onnx"]) == 2
    assert capsys.readouterr().err.startswith("hase: error: no such ONNX file")


def _vanishing_model(path: Path) -> Path:
    """x (4 x 16) -> MatMul W1 -> MatMul W2 -> scores (4 x 10) of about 1e-9, as random-weight
    mobilenet_v2's logits (3e-9 on the dev VM): input-dependent in fp32, below float16's range."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 16)) * 1e-4).astype(np.float32)
    w2 = (rng.standard_normal((16, 10)) * 1e-6).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])],
        "vanishing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _run_in_float16(path: Path, feed: dict) -> object:
    """The fp16 variant evaluated in true float16 arithmetic (ONNX's reference evaluator), as the
    CUDA EP runs it; ORT's CPU EP computes an fp16 graph's nodes in float32 and would hide the
    underflow. The converter appends its Cast nodes last, so the nodes are put in order first."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(str(path))
    known = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    pending, ordered = list(model.graph.node), []
    while pending:
        ready = [n for n in pending if all(i in known or not i for i in n.input)]
        assert ready, "the fp16 graph has a cycle"
        for node in ready:
            ordered.append(node)
            pending.remove(node)
            known.update(node.output)
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return ReferenceEvaluator(model).run(None, feed)[0]


def test_fp16_scores_that_all_round_to_zero_are_ties_not_disagreements(tmp_path: Path) -> None:
    """The H100's mobilenet_v2 fp16 "0% agreement": its fp32 logits (~3e-9) round to 0 in fp16, so
    every fp16 row is constant and argmax names class 0. Counted as agreement that was 0% (before);
    now those rows are ties, left out, and the fp32 scores' range is flagged."""
    import numpy as np
    import onnxruntime as ort

    from hase_dagster.analysis.precision import FP16_MIN_NORMAL, fp16_variant, top1_agreement

    source = _vanishing_model(tmp_path / "vanishing.onnx")
    half = fp16_variant(source, tmp_path / "vanishing.fp16.onnx")
    feed = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}
    reference = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    scores = np.asarray(_run_in_float16(half, feed), dtype=np.float32)
    assert 0 < np.abs(reference).max() < FP16_MIN_NORMAL and len(set(reference.argmax(-1))) > 1
    assert not scores.any()  # every fp16 score is 0: argmax is class 0 on every row

    result = top1_agreement(reference, scores)
    assert result["top1_agreement"] is None and result["top1_rows"] == 0
    assert result["tied_rows"] == 4 and result["reference_tied_rows"] == 0
    assert "below float16's smallest normal" in result["fp16_range"]


def test_top1_agreement_counts_single_top_rows_and_flags_overflow() -> None:
    import numpy as np

    from hase_dagster.analysis.precision import top1_agreement

    reference = np.array([[1.0, 3.0, 2.0], [5.0, 1.0, 0.0], [0.0, 0.0, 9.0], [7e4, 0.0, 1.0]])
    variant = np.array([[1.0, 3.0, 2.0], [1.0, 5.0, 0.0], [2.0, 2.0, 1.0], [9.0, 0.0, 1.0]])
    result = top1_agreement(reference, variant)
    assert result["top1_rows"] == 3 and result["tied_rows"] == 1  # row 3 ties 2.0 = 2.0
    assert result["top1_agreement"] == pytest.approx(2 / 3)
    assert "above float16's largest" in result["fp16_range"]
    assert top1_agreement(reference[:3], reference[:3])["fp16_range"] is None
