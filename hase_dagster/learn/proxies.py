"""Kernels of families no training row has, predicted as the trained kernels that do the same work.

A family the regressor never saw (an op of a user's own module: ``Pow`` from ``x ** 2``, ``Einsum`` from
``torch.einsum``, ``Where`` from ``masked_fill``) used to get the trees' answer for its shapes and bytes with no
family to go by. Trees do not carry over: an Einsum's FLOPs were not even counted, and set AG's attention einsums
came out too fast at batch 64 while its squared ReLUs' ``Pow`` came out slow (results/cpu-general/gpu-setAG). ORT
runs these ops as kernels of kinds the tables hold:

- a broadcasting elementwise op (``Pow``, ``Div``, ``Sub``, ``Where``'s two value operands) streams its operands
  like ``Mul`` or ``Add``;
- a fused family whose kernel is a trained op (``Transpose_Split`` is a ``Split``, ``MatMul_Div`` a ``FusedMatMul``)
  is that op's kernel;
- a one-input elementwise op (``Sqrt``, ``Exp``, ``Erf``, ``FastGelu`` ...) streams its input like ``Sigmoid``,
  ``Tanh``, ``Relu`` or ``Gelu``;
- a normalisation ORT fused from hand-written code (RMSNorm's ``SimplifiedLayerNormalization``) reads and writes
  its rows once, like ``LayerNormalization``;
- a two-operand ``Einsum`` is ORT's batched ``MatMul`` (cuBLAS or MLAS) on operands laid out as
  (batch, rows, contracted) and (batch, contracted, columns), with a ``Transpose`` of each operand (and of the
  result) whose labels are not already in such an order.

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


def einsum_as_matmul(record: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A two-operand Einsum as the kernels ORT runs for it: a batched MatMul and the Transposes that lay out its
    operands and result; None for an equation this does not cover (one or three operands, an ellipsis, a label
    summed within one operand).

    Args:
        record: a catalog-style Einsum kernel (``attributes.equation``, ``inputs``, ``outputs`` with shapes).

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
    size: dict[str, int] = {}
    for labels, tensor in zip(operands, inputs):
        for label, dim in zip(labels, tensor["shape"]):
            size[label] = int(dim)
    batch = [x for x in result if x in a and x in b]
    rows = [x for x in result if x in a and x not in b]
    columns = [x for x in result if x in b and x not in a]
    contracted = [x for x in a if x in b and x not in result]
    if set(a) | set(b) != set(batch) | set(rows) | set(columns) | set(contracted):
        return None  # a label summed within one operand
    n_batch, n_rows, n_columns, n_contracted = (
        prod(size[x] for x in group) for group in (batch, rows, columns, contracted)
    )
    ta, tb, to = inputs[0], inputs[1], outputs[0]
    matmul_a = _tensor(ta, [n_batch, n_rows, n_contracted] if batch else [n_rows, n_contracted], "")
    matmul_b = _tensor(tb, [n_batch, n_contracted, n_columns] if batch else [n_contracted, n_columns], "")
    matmul_out = _tensor(to, [n_batch, n_rows, n_columns] if batch else [n_rows, n_columns], "")
    records = [
        _record(record, "MatMul", [matmul_a, matmul_b], [matmul_out], 2 * n_batch * n_rows * n_columns * n_contracted)
    ]

    def laid_out(labels: str, first: list[str], second: list[str]) -> bool:
        """Whether ``labels``, size-1 dims apart, already read batch, then ``first``, then ``second`` (or batch,
        ``second``, ``first``: a transposed operand the GEMM reads as it is)."""
        kept = [x for x in labels if size[x] != 1]
        order = lambda *groups: [x for g in groups for x in g if size[x] != 1]  # noqa: E731
        return kept in (order(batch, first, second), order(batch, second, first))

    for labels, tensor, first, second in ((a, ta, rows, contracted), (b, tb, contracted, columns)):
        if not laid_out(labels, first, second) and not tensor.get("weight"):
            target = batch + first + second
            moved = _tensor(tensor, [size[x] for x in target], "/transposed")
            perm = [labels.index(x) for x in target]
            records.append(_record(record, "Transpose", [dict(tensor, weight=False)], [moved], 0, {"perm": perm}))
    if not laid_out(result, rows, columns):
        produced = batch + rows + columns
        records.append(
            _record(
                record,
                "Transpose",
                [_tensor(to, [size[x] for x in produced], "/matmul")],
                [dict(to)],
                0,
                {"perm": [produced.index(x) for x in result]},
            )  # fmt: skip
        )
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
        proxies = einsum_as_matmul(record)
        return proxies if proxies is not None and all(known(p) for p in proxies) else None
    if op in BINARY_ELEMENTWISE:
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
