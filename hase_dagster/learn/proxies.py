"""Kernels of families no training row has, predicted as the trained kernels that do the same work.

A family the regressor never saw (an op of a user's own module: ``Pow`` from ``x ** 2``, ``Einsum`` from
``torch.einsum``, ``Where`` from ``masked_fill``) used to get the trees' answer for its shapes and bytes with no
family to go by. Trees do not carry over: an Einsum's FLOPs were not even counted, and set AG's attention einsums
came out too fast at batch 64 while its squared ReLUs' ``Pow`` came out slow (results/cpu-general/gpu-setAG). ORT
runs these ops as kernels of kinds the tables hold:

- a broadcasting elementwise op (``Div``, ``Sub``, ``Where``'s two value operands) streams its operands like ``Mul``
  or ``Add``; a ``Pow`` by a scalar computes a transcendental per element, like ``Gelu`` or ``Tanh``;
- a fused family whose kernel is a trained op (``Transpose_Split`` is a ``Split``, ``MatMul_Div`` a ``FusedMatMul``)
  is that op's kernel;
- a one-input elementwise op (``Sqrt``, ``Exp``, ``Erf``, ``FastGelu`` ...) streams its input like ``Sigmoid``,
  ``Tanh``, ``Relu`` or ``Gelu``;
- a normalisation ORT fused from hand-written code (RMSNorm's ``SimplifiedLayerNormalization``) reads and writes
  its rows once, like ``LayerNormalization``;
- a two-operand ``Einsum`` is the kernels ORT's einsum runs for it: ``Transpose``s of the operands into its label
  order and its GEMM layout, one batched ``MatMul`` (cuBLAS or MLAS), a ``Transpose`` of the result where needed and
  a copy into the output (:func:`einsum_as_matmul`). Each of them is a launch of its own
  (``KernelPrediction.launches``).

On the H100 tables, an elementwise family held out of training and predicted through its proxy did better than
the trees' fallback for most ops (``Sigmoid`` 19% -> 7%, ``HardSigmoid`` 39% -> 14%, ``Div`` as ``Add`` 10% -> 5%;
``Mul`` as ``Add`` 10% -> 14% was worse: proxies are for families the tables lack, never for ones they hold).
A kernel without a proxy keeps the fallback estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod
from typing import Any

from hase_dagster.core.dtypes import element_bytes
from hase_dagster.learn.features import BROADCAST_ELEMENTWISE_OPS

# Elementwise ops with operands broadcast against each other (and Where's two value operands), and the trained
# families tried for them in order.
BINARY_ELEMENTWISE: frozenset[str] = BROADCAST_ELEMENTWISE_OPS | {"Where"}
BINARY_PROXIES: tuple[str, ...] = ("Add", "Mul")
# One-input elementwise ops (output shaped as the input), and the trained families tried for them in order.
UNARY_ELEMENTWISE: frozenset[str] = frozenset(
    {"Abs", "Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Sigmoid", "Tanh", "Relu", "Elu", "Selu", "Celu",
     "LeakyRelu", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Mish", "Gelu", "FastGelu", "QuickGelu",
     "Sin", "Cos", "Tan", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "ThresholdedRelu", "Clip"}
)  # fmt: skip
UNARY_PROXIES: tuple[str, ...] = ("Sigmoid", "Tanh", "Relu", "Gelu")
# A power by a scalar exponent (``x ** 2`` in RMSNorm and squared ReLU) computes a transcendental per element: the
# trained one-input families with one, heaviest first. On the H200, set AH's standalone Pow kernels moved 1.5 TB/s,
# its Gelu kernels 1.9, its Mul kernels 2.5 (results/gpu-general/user-kernels-ah).
TRANSCENDENTAL_PROXIES: tuple[str, ...] = ("Gelu", "Tanh", "Sigmoid")
# A device-to-device copy (an Einsum's result into its output buffer) streams one read and one write, as a plain
# elementwise kernel: the trained families tried for it in order.
COPY_PROXIES: tuple[str, ...] = ("Relu", "Sigmoid", "Tanh", "Add")
# Normalisations ORT fuses from hand-written code (RMSNorm into SimplifiedLayerNormalization), by the trained families
# tried for them in order: one read of the rows and one write, as LayerNormalization.
NORMALIZATIONS: dict[str, tuple[str, ...]] = {
    "SimplifiedLayerNormalization": ("LayerNormalization",),
    "RMSNormalization": ("LayerNormalization",),
    "SkipSimplifiedLayerNormalization": ("SkipLayerNormalization", "LayerNormalization"),
    "SkipLayerNormalization": ("SkipLayerNormalization", "LayerNormalization"),
}


def _record(base: Mapping[str, Any], op_type: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
            flops: float, attributes: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """``base`` as a kernel of ``op_type`` (its own family) on ``inputs`` and ``outputs``."""
    size = lambda tensors: int(sum(prod(t["shape"]) * element_bytes(str(t.get("dtype", "float"))) for t in tensors))  # noqa: E731
    return {
        **base,
        "family": op_type,
        "op_type": op_type,
        "domain": "",
        "attributes": attributes or {},
        "inputs": inputs,
        "outputs": outputs,
        "flops": int(flops),
        "input_bytes": size([t for t in inputs if not t.get("weight")]),
        "weight_bytes": size([t for t in inputs if t.get("weight")]),
        "output_bytes": size(outputs),
        "absorbed_ops": [str(base.get("node_name", op_type))],  # one op's kernel, as a trained one of its family
        "absorbed_op_types": [op_type],
    }


def _tensor(like: Mapping[str, Any], shape: list[int], suffix: str) -> dict[str, Any]:
    return {"name": f"{like.get('name', 'proxy')}{suffix}", "dtype": like.get("dtype", "float"), "shape": shape,
            "weight": bool(like.get("weight"))}  # fmt: skip


def einsum_as_matmul(record: Mapping[str, Any], copy_family: str = "Relu") -> list[dict[str, Any]] | None:
    """A two-operand Einsum as the kernels ORT runs for it (``EinsumTypedComputeProcessor``, ORT 1.31, the same on
    the CPU and CUDA EPs); None for an equation this does not cover (one or three operands, an ellipsis, a label
    repeated in one operand or summed within one, broadcasting across a size-1 dim).

    ORT numbers the labels by first appearance (first operand, then second) and lays every operand out in that order
    over all labels, absent ones as size-1 dims:

    1. each operand whose labels are out of that order is transposed into it (weights too, every run);
    2. each operand is transposed again into its GEMM layout, the left one to (both, left only, contracted, right
       only), the right one to (both, contracted, right only, left only), where any label moves, size-1 ones too
       (only an intermediate tensor is reshaped instead, and both operands are inputs here);
    3. one batched MatMul of (both, left only, contracted) by (both, contracted, right only);
    4. the product is transposed to the equation's output order where that differs, and then copied into the op's
       output buffer: one more pass over the output, always.

    Labels of size 1 on both sides count as right only (ORT's ``ro``).

    Args:
        record: a catalog-style Einsum kernel (``attributes.equation``, ``inputs``, ``outputs`` with shapes).
        copy_family: the streaming kernel family the final copy is predicted as (:data:`COPY_PROXIES`).

    Returns:
        The kernels' catalog-style records, MatMul first.
    """
    equation = str((record.get("attributes") or {}).get("equation", "")).replace(" ", "")
    inputs, outputs = list(record.get("inputs") or []), list(record.get("outputs") or [])
    if "..." in equation or "->" not in equation or len(inputs) != 2 or len(outputs) != 1:
        return None
    left, result = equation.split("->")
    operands = left.split(",")
    if len(operands) != 2 or any(len(labels) != len(t["shape"]) for labels, t in zip(operands, inputs)):
        return None
    a, b = operands
    if any(len(set(labels)) != len(labels) for labels in (a, b, result)):
        return None  # a diagonal (a label repeated in one operand) or a repeated result label
    if any(x not in result and (x in a) != (x in b) for x in a + b) or set(result) - set(a + b):
        return None  # a label summed within one operand (ORT's ReduceSum) or a result label no operand has
    order = list(dict.fromkeys(a + b))  # ORT's subscript indices: labels by first appearance
    dims = [{x: int(d) for x, d in zip(labels, t["shape"])} for labels, t in zip(operands, inputs)]
    if any(x in dims[0] and x in dims[1] and dims[0][x] != dims[1][x] for x in order):
        return None  # broadcast along a size-1 dim
    size = {x: dims[0].get(x) or dims[1][x] for x in order}
    left_dim = lambda x: dims[0].get(x, 1)  # noqa: E731  (the homogenized operands' dims)
    right_dim = lambda x: dims[1].get(x, 1)  # noqa: E731
    contracted = [x for x in order if x not in result]
    both = [x for x in order if x in result and left_dim(x) > 1 and right_dim(x) > 1]
    left_only = [x for x in order if x in result and x not in both and left_dim(x) > 1]
    right_only = [x for x in order if x in result and x not in both and x not in left_only]
    n_both, n_left, n_right, n_contracted = (
        prod(size[x] for x in g) for g in (both, left_only, right_only, contracted)
    )
    ta, tb, to = inputs[0], inputs[1], outputs[0]
    # The GEMM's operands with their batch and row labels kept apart, as a graph's MatMul has them: (b, h, i, d) by
    # (b, h, d, j) for attention, (b, n, d) by a (d, e) weight for a projection (the trained rows' shapes).
    batch = [size[x] for x in both]
    rows = [size[x] for x in left_only] or [1]
    matmul = _record(
        record,
        "MatMul",
        [_tensor(ta, [*batch, *rows, n_contracted], ""), _tensor(tb, [*batch, n_contracted, n_right], "")],
        [_tensor(to, [*batch, *rows, n_right], "/matmul")],
        2 * n_both * n_left * n_right * n_contracted,
    )
    records = [matmul]

    def transpose(tensor: Mapping[str, Any], labels: list[str], target: list[str], shape_of: Callable[[str], int],
                  suffix: str) -> None:  # fmt: skip
        """A Transpose of ``tensor`` (its dims labelled ``labels``) into ``target``'s order, where they differ."""
        if labels != target:
            moved = _tensor(tensor, [shape_of(x) for x in target], suffix)
            source = _tensor(tensor, [shape_of(x) for x in labels], "")
            records.append(
                _record(
                    record,
                    "Transpose",
                    [dict(source, weight=False)],
                    [moved],
                    0,
                    {"perm": [labels.index(x) for x in target]},
                )
            )

    for labels, tensor, shape_of, gemm in (
        (a, ta, left_dim, both + left_only + contracted + right_only),
        (b, tb, right_dim, both + contracted + right_only + left_only),
    ):
        homogenized = [x for x in order if x in labels]
        transpose(tensor, list(labels), homogenized, shape_of, "/homogenized")
        transpose(tensor, order, gemm, shape_of, "/gemm")  # over every label, absent ones as size-1 dims
    produced = both + left_only + right_only
    transpose(to, produced, list(result), lambda x: size[x], "/candidate")
    records.append(_record(record, copy_family, [_tensor(to, list(to["shape"]), "/candidate")], [dict(to)], 0))
    return records


def proxy_records(record: Mapping[str, Any], known: Callable[[Mapping[str, Any]], bool]) -> list[dict[str, Any]] | None:
    """The trained kernels that stand in for ``record``, a kernel of a family the regressor never saw.

    Args:
        record: the kernel, catalog-style (``family``, ``op_type``, ``inputs``, ``outputs``, ``attributes``).
        known: whether the regressor trained on a record's family.

    Returns:
        The stand-in kernels (their predicted times add up to the kernel's), or None where no proxy serves.
    """
    op = str(record.get("op_type"))
    inputs, outputs = list(record.get("inputs") or []), list(record.get("outputs") or [])
    as_its_op = {**record, "family": op}  # a fused family whose kernel is a trained op's (Transpose_Split: a Split)
    if op != record.get("family") and known(as_its_op):
        return [as_its_op]
    if op == "Einsum":
        copies = (_record(record, name, outputs[:1], outputs[:1], 0) for name in COPY_PROXIES)
        copy = next((c for c in copies if known(c)), None)
        proxies = einsum_as_matmul(record, str(copy["family"])) if copy is not None else None
        return proxies if proxies is not None and all(known(p) for p in proxies) else None
    if op == "Pow" and len(inputs) == 2 and prod(inputs[1]["shape"]) <= 1:
        # x ** c: one transcendental per element of x (powf is exp2(c * log2(x))), before a streaming Add or Mul
        candidates = [
            _record(record, name, inputs[:1], outputs[:1], record.get("flops") or 0) for name in TRANSCENDENTAL_PROXIES
        ] + [_record(record, name, inputs, outputs, record.get("flops") or 0) for name in BINARY_PROXIES]
    elif op in BINARY_ELEMENTWISE:
        values = [t for t in inputs if str(t.get("dtype")) != "bool"] if op == "Where" else inputs
        candidates = [_record(record, name, values, outputs, record.get("flops") or 0) for name in BINARY_PROXIES]
    elif op in UNARY_ELEMENTWISE:
        candidates = [
            _record(record, name, inputs[:1], outputs[:1], record.get("flops") or 0) for name in UNARY_PROXIES
        ]
    elif op in NORMALIZATIONS:
        activations = [t for t in inputs if not t.get("weight")]
        weights = [t for t in inputs if t.get("weight")]
        candidates = [
            _record(record, name, (activations if name.startswith("Skip") else activations[:1]) + weights,
                    outputs[:1], record.get("flops") or 0)
            for name in NORMALIZATIONS[op]
        ]  # fmt: skip
    else:
        return None
    return next(([c] for c in candidates if known(c)), None)
