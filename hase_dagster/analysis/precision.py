"""Precision variants of an ONNX model: FP16 (ORT's float16 converter, the onnxconverter-common code
ORT ships, keeping fp32 inputs and outputs) and INT8 (ORT's static quantization in QDQ format,
calibrated on random inputs), and which of a variant's kernels really compute in INT8."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from hase_dagster.core.errors import ModelLoadError

if TYPE_CHECKING:  # detect_precision runs in a bundle's prediction, which reads no config
    from hase_dagster.core.config import EpName

PRECISIONS = ("fp32", "fp16", "int8")
# ORT kernels that compute on 8-bit integers (ONNX and com.microsoft domains).
QUANTIZED_OPS = frozenset(
    {
        "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm", "QLinearAdd", "QLinearMul",
        "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearConcat", "QLinearGlobalAveragePool",
        "QLinearAveragePool", "QLinearReduceMean", "QLinearWhere", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
        "QAttention", "QEmbedLayerNormalization", "QOrderedMatMul", "QOrderedGelu", "QOrderedLayerNormalization",
    }
)  # fmt: skip
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
# Float kernels whose cost dominates: left in float (between DequantizeLinear and QuantizeLinear) they
# are where an INT8 model falls back.
FLOAT_COMPUTE_OPS = frozenset({"Conv", "FusedConv", "NhwcFusedConv", "MatMul", "FusedMatMul", "Gemm", "FusedGemm"})


def detect_precision(model: onnx.ModelProto) -> str:
    """The precision a model file was made in: ``int8`` when it quantizes (QDQ or QLinear/integer
    nodes), ``fp16`` when float16 weights outnumber float32 ones (by elements), else ``fp32``."""
    ops = {node.op_type for node in model.graph.node}
    if ops & (QUANTIZED_OPS | QDQ_OPS):
        return "int8"
    elements = {onnx.TensorProto.FLOAT: 0, onnx.TensorProto.FLOAT16: 0}
    for tensor in model.graph.initializer:
        if tensor.data_type in elements:
            elements[tensor.data_type] += int(np.prod(tensor.dims)) if tensor.dims else 1
    return "fp16" if elements[onnx.TensorProto.FLOAT16] > elements[onnx.TensorProto.FLOAT] else "fp32"


def precision_variant(precision: str, source: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write ``source`` (an fp32 model) at ``precision``: :func:`fp16_variant` or :func:`int8_variant`."""
    if precision == "fp16":
        return fp16_variant(source, out)
    if precision == "int8":
        return int8_variant(source, out)
    raise ValueError(f"no {precision} variant: precisions are {PRECISIONS} and fp32 is the source itself")


def fp16_variant(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write ``source`` converted to float16 (weights and activations), with fp32 inputs and outputs."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        model = onnx.load(str(source))
    except Exception as exc:  # onnx raises DecodeError and others
        raise ModelLoadError(f"{source} is not a readable ONNX model: {exc}") from exc
    converted = convert_float_to_float16(model, keep_io_types=True)
    _sort_nodes(converted.graph)
    out = Path(out)
    onnx.save(converted, str(out))
    return out


def _sort_nodes(graph: onnx.GraphProto) -> None:
    """Put ``graph``'s nodes in topological order, in place, keeping the original order among ready
    nodes: the float16 converter appends its input Casts last, which ORT runs but ONNX's checker
    (and a valid file) does not allow."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        ready = [n for n in pending if all(name in available for name in n.input)]
        if not ready:  # a cycle or an input nobody makes: leave the rest as it was
            ordered.extend(pending)
            break
        for node in ready:
            available.update(node.output)
        ordered.extend(ready)
        pending = [n for n in pending if all(n is not r for r in ready)]
    del graph.node[:]
    graph.node.extend(ordered)


# float16's range: the largest finite value, and the smallest normal one (below it precision falls off;
# below half the smallest subnormal, 2.98e-8, a value rounds to 0).
FP16_MAX = 65504.0
FP16_MIN_NORMAL = 6.103515625e-05


def top1_agreement(reference: np.ndarray, variant: np.ndarray) -> dict[str, Any]:
    """Top-1 agreement of ``variant``'s outputs with ``reference``'s (rows of class scores), counting
    only rows where both have one top class: argmax over a row whose maximum is tied (a constant
    output, e.g. fp16 logits that all rounded to 0) names the first class, not a prediction.

    Args:
        reference: the fp32 model's scores, shape (rows, classes).
        variant: the variant's scores on the same inputs, same shape.

    Returns:
        ``top1_agreement`` (None when no row has a single top class on both sides), ``top1_rows``
        (rows compared), ``tied_rows`` and ``reference_tied_rows`` (rows without a single top class),
        ``max_abs`` and ``reference_max_abs`` (largest |score|), ``fp16_range``: a note when the
        reference's scores lie outside what float16 represents (None when inside).
    """
    reference, variant = np.asarray(reference, dtype=np.float64), np.asarray(variant, dtype=np.float64)

    def single_top(rows: np.ndarray) -> np.ndarray:
        return np.sum(rows == rows.max(axis=-1, keepdims=True), axis=-1) == 1

    valid = single_top(reference) & single_top(variant)
    same = reference.argmax(-1) == variant.argmax(-1)
    largest = float(np.max(np.abs(reference))) if reference.size else 0.0
    note = None
    if largest > FP16_MAX:
        note = f"fp32 scores reach {largest:.3g}, above float16's largest {FP16_MAX:g}: they overflow in fp16"
    elif largest < FP16_MIN_NORMAL:
        note = (
            f"fp32 scores are at most {largest:.3g}, below float16's smallest normal {FP16_MIN_NORMAL:.3g}: "
            "fp16 cannot hold them (random-weight activations that vanish through the network)"
        )
    return {
        "top1_agreement": float(np.mean(same[valid])) if valid.any() else None,
        "top1_rows": int(valid.sum()),
        "tied_rows": int((~single_top(variant)).sum()),
        "reference_tied_rows": int((~single_top(reference)).sum()),
        "max_abs": float(np.max(np.abs(variant))) if variant.size else 0.0,
        "reference_max_abs": largest,
        "fp16_range": note,
    }


def agreement_with_reference(
    reference: str | os.PathLike[str],
    variant: str | os.PathLike[str],
    ep: EpName = "cpu",
    draws: int = 8,
    seed: int = 1,
) -> dict[str, Any]:
    """:func:`top1_agreement` of ``variant``'s first output with ``reference``'s over ``draws`` random
    input batches (standard normal, :class:`RandomCalibration`), both run in ORT on ``ep``; the
    output's last axis holds the classes."""
    from hase_dagster.core.ort_runtime import make_session

    feeds = list(RandomCalibration(onnx.load(str(reference)), batches=draws, seed=seed)._feeds)

    def scores(path: str | os.PathLike[str]) -> np.ndarray:
        session = make_session(path, ep, level="all")
        rows = [np.asarray(session.run(None, feed)[0], dtype=np.float32) for feed in feeds]
        return np.concatenate([r.reshape(-1, r.shape[-1] if r.ndim else 1) for r in rows])

    return top1_agreement(scores(reference), scores(variant))


class RandomCalibration:
    """ORT's calibration data reader: ``batches`` random feeds (standard normal floats) shaped as the
    model's inputs (dynamic dimensions as 1)."""

    def __init__(self, model: onnx.ModelProto, batches: int = 8, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        specs = []
        initializers = {i.name for i in model.graph.initializer}
        for value in model.graph.input:
            if value.name in initializers:
                continue
            tensor = value.type.tensor_type
            shape = [d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
            specs.append((value.name, shape, dtype))
        self._feeds = iter(
            [{name: rng.standard_normal(shape).astype(dtype) for name, shape, dtype in specs} for _ in range(batches)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)

    def __iter__(self) -> Iterator[dict[str, Any]]:  # pragma: no cover - ORT calls get_next
        return self._feeds


def int8_variant(source: str | os.PathLike[str], out: str | os.PathLike[str], batches: int = 8, seed: int = 0) -> Path:
    """Write ``source`` statically quantized to INT8 in QDQ format (activations uint8, weights int8,
    per tensor), calibrated (min-max) on ``batches`` random inputs, after ORT's quantization
    pre-processing."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        model = onnx.load(str(source))
    except Exception as exc:  # onnx raises DecodeError and others
        raise ModelLoadError(f"{source} is not a readable ONNX model: {exc}") from exc

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.random = RandomCalibration(model, batches, seed)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.random.get_next()

    out = Path(out)
    # ORT's pre-processing (shape inference, constant folding) first, as its quantization guide asks:
    # without it a Conv whose bias comes from a Constant node stays in float.
    prepared = out.with_suffix(".prepared.onnx")
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    quantize_static(
        str(prepared),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    prepared.unlink()
    return out


def kernel_precisions(nodes: list[Any]) -> dict[str, Any]:
    """What an optimized graph's nodes compute in: INT8 kernels, QDQ (quantize/dequantize) nodes, float
    compute kernels left between them, and nodes on another provider than the first (CPU fallback).

    Args:
        nodes: ``analysis.graph.OptimizedNode`` s of one model on one EP (``op_type``, ``provider``).
    """
    providers = [n.provider for n in nodes if n.provider]
    main = max(set(providers), key=providers.count) if providers else ""
    ops: dict[str, int] = {}
    for node in nodes:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {
        "nodes": len(nodes),
        "int8_nodes": sum(n.op_type in QUANTIZED_OPS for n in nodes),
        "qdq_nodes": sum(n.op_type in QDQ_OPS for n in nodes),
        "float_compute_nodes": sum(n.op_type in FLOAT_COMPUTE_OPS for n in nodes),
        "provider": main,
        "other_provider_nodes": sorted(
            {f"{n.op_type}@{n.provider}" for n in nodes if n.provider and n.provider != main}
        ),
        "op_types": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
    }
