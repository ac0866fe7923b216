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
