"""FLOPs and bytes-moved estimates of one kernel from its op type, attributes and ORT's shapes.

Counts are analytic (a multiply-add = 2 FLOPs) and aim at the right order of magnitude for
features of a latency regressor, not at an exact instruction count.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.core.dtypes import element_bytes

# FLOPs per output element of element-wise and normalisation ops (rough but consistent).
PER_ELEMENT = {
    "Relu": 1,
    "Clip": 1,
    "Add": 1,
    "Sub": 1,
    "Mul": 1,
    "Div": 1,
    "Sum": 1,
    "Sigmoid": 4,
    "Tanh": 4,
    "Erf": 4,
    "Sqrt": 1,
    "Pow": 1,
    "Exp": 1,
    "HardSigmoid": 2,
    "HardSwish": 3,
    "Gelu": 8,
    "FastGelu": 8,
    "BiasGelu": 9,
    "QuickGelu": 5,
    "Softmax": 5,
    "LayerNormalization": 8,
    "SkipLayerNormalization": 9,
    "SimplifiedLayerNormalization": 6,
    "BatchNormalization": 2,
    # Operators of decoders, generators, audio and style networks: none was in a measured table when they were
    # counted here (no trained feature moved); the operators probes' rows were catalogued with these counts.
    "InstanceNormalization": 8,
    "GroupNormalization": 8,
    "MeanVarianceNormalization": 8,
    "LeakyRelu": 2,
    "PRelu": 2,
    "ThresholdedRelu": 1,
    "Elu": 4,
    "Selu": 4,
    "Celu": 4,
    "Softplus": 4,
    "Softsign": 3,
    "Mish": 8,
    "Neg": 1,
    "Abs": 1,
    "Reciprocal": 1,
    "Log": 4,
    "Sin": 4,
    "Cos": 4,
    "Max": 1,
    "Min": 1,
    "Where": 1,
}
ACTIVATION_FLOPS = {"Relu": 1, "Clip": 1, "Sigmoid": 4, "Tanh": 4, "LeakyRelu": 2, "HardSigmoid": 2}


def tensor_bytes(tensor: TensorInfo) -> int:
    """Bytes of a tensor from its shape and element type (4 when the type is unknown)."""
    return tensor.numel * element_bytes(tensor.dtype)


# Quantized kernels (ORT's QLinear*/integer ops): where the float op's operands sit among their inputs
# (x, x_scale, x_zero_point, w, ...): the weight (or B) input, and the bias input (-1: none).
QUANTIZED_OPERANDS: dict[str, tuple[int, int]] = {
    "QLinearConv": (3, 8),
    "ConvInteger": (1, -1),
    "QLinearMatMul": (3, -1),
    "QGemm": (3, 6),
    "MatMulIntegerToFloat": (1, 6),
    "DynamicQuantizeMatMul": (1, 4),
}
QUANTIZED_PER_ELEMENT = {"QLinearAdd": 1, "QLinearMul": 1, "QLinearSigmoid": 4, "QLinearLeakyRelu": 2}


def _conv_flops(
    attributes: dict[str, Any],
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    weight_index: int = 1,
    has_bias: bool | None = None,
) -> int:
    weight = inputs[weight_index].shape
    out = outputs[0].shape
    channels_in_per_group = weight[1] if len(weight) > 1 else 1  # already divided by groups
    kernel = prod(weight[2:]) if len(weight) > 2 else 1
    flops = 2 * prod(out) * channels_in_per_group * kernel
    if has_bias if has_bias is not None else len(inputs) > 2:
        flops += prod(out)  # bias
    if has_bias is None and len(inputs) > 3:
        flops += prod(out)  # the fused Sum input (Conv + Add)
    activation = attributes.get("activation")
    if activation:
        flops += ACTIVATION_FLOPS.get(str(activation), 1) * prod(out)
    return flops


def _matmul_flops(inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], attributes: dict[str, Any]) -> int:
    a = inputs[0].shape
    out = outputs[0].shape
    if not a or not out:
        return 0
    trans_a = int(attributes.get("transA", 0))
    # For a (.., M, K) x (.., K, N) product, FLOPs = 2 * numel(out) * K.
    k = a[-2] if trans_a and len(a) >= 2 else a[-1]
    if int(attributes.get("transBatchA", 0)) and len(a) >= 3:
        k = a[-1] if not trans_a else a[0]
    flops = 2 * prod(out) * k
    if len(inputs) > 2:
        flops += prod(out)  # bias (Gemm C)
    return flops


# ONNX's recurrent ops (their weights W and R hold every gate: 4 for LSTM, 3 for GRU, 1 for RNN).
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})


def _conv_transpose_flops(inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]) -> int:
    """Every input element times a (C_out / group) x kernel slice of the weight (C_in, C_out / group, k...)."""
    weight = inputs[1].shape
    flops = 2 * prod(inputs[0].shape) * prod(weight[1:])
    return flops + (prod(outputs[0].shape) if len(inputs) > 2 else 0)


def _recurrent_flops(inputs: Sequence[TensorInfo]) -> int:
    """Each step's input and recurrent products (W: dirs x gates.H x I, R: dirs x gates.H x H) over every
    (step, sample) of X, and about ten FLOPs a gate unit for the gates' nonlinearities and the state update."""
    x, w, r = inputs[0].shape, inputs[1].shape, inputs[2].shape
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        return 0
    steps_x_batch = prod(x) // max(x[2], 1)
    return steps_x_batch * (2 * (prod(w) + prod(r)) + 10 * w[0] * w[1])


def estimate_flops(
    op_type: str, attributes: dict[str, Any], inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]
) -> int:
    """Analytic FLOPs of one execution of a kernel; 0 for pure data movement."""
    if not outputs or not outputs[0].shape and op_type not in PER_ELEMENT:
        return 0
    out_elems = prod(outputs[0].shape) if outputs[0].shape else 1
    if op_type == "ConvTranspose" and len(inputs) > 1:
        return _conv_transpose_flops(inputs, outputs)
    if op_type in {"Conv", "FusedConv"} and len(inputs) > 1:
        return _conv_flops(attributes, inputs, outputs)
    if op_type in RECURRENT_OPS and len(inputs) > 2:
        return _recurrent_flops(inputs)
    if op_type in {"MatMul", "FusedMatMul", "Gemm", "FusedGemm", "MatMulInteger"}:
        return _matmul_flops(inputs, outputs, attributes)
    if op_type in QUANTIZED_OPERANDS:
        weight_index, bias_index = QUANTIZED_OPERANDS[op_type]
        if len(inputs) <= weight_index:
            return 0
        has_bias = 0 <= bias_index < len(inputs) and bool(inputs[bias_index].name)
        if "Conv" in op_type:
            return _conv_flops(attributes, inputs, outputs, weight_index, has_bias)
        flops = _matmul_flops([inputs[0], inputs[weight_index]], outputs, attributes)
        return flops + (prod(outputs[0].shape) if has_bias else 0)
    if op_type in QUANTIZED_PER_ELEMENT:
        return QUANTIZED_PER_ELEMENT[op_type] * out_elems
    if op_type in {"QLinearAveragePool", "NhwcMaxPool"}:
        return out_elems * prod(attributes.get("kernel_shape", [1]))
    if op_type in {"QLinearGlobalAveragePool", "QLinearReduceMean"}:
        return inputs[0].numel if inputs else out_elems
    if op_type in {"MaxPool", "AveragePool"}:
        return out_elems * prod(attributes.get("kernel_shape", [1]))
    if op_type in {"GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}:
        return inputs[0].numel if inputs else out_elems
    if op_type in PER_ELEMENT:
        return PER_ELEMENT[op_type] * max(out_elems, inputs[0].numel if inputs else 0)
    return 0


def bytes_moved(inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]) -> tuple[int, int]:
    """(bytes read, bytes written) if every input is read and every output written once."""
    return sum(tensor_bytes(t) for t in inputs), sum(tensor_bytes(t) for t in outputs)
