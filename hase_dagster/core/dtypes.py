"""One table of the tensor element types Hase handles, keyed by ORT's name (``float``, ``int64``...).

ORT's profiler and ``session.get_inputs()`` name types as ``float`` / ``tensor(float)``; ONNX uses
``TensorProto`` codes and numpy its own names. Every conversion goes through this table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx


@dataclass(frozen=True)
class ElementType:
    """One element type under its ORT name, with its ONNX code, numpy dtype and size."""

    ort_name: str
    onnx_type: int
    numpy: type[np.generic]
    bytes: int


ELEMENT_TYPES: dict[str, ElementType] = {
    t.ort_name: t
    for t in (
        ElementType("float", onnx.TensorProto.FLOAT, np.float32, 4),
        ElementType("float16", onnx.TensorProto.FLOAT16, np.float16, 2),
        ElementType("double", onnx.TensorProto.DOUBLE, np.float64, 8),
        ElementType("int64", onnx.TensorProto.INT64, np.int64, 8),
        ElementType("int32", onnx.TensorProto.INT32, np.int32, 4),
        ElementType("int8", onnx.TensorProto.INT8, np.int8, 1),
        ElementType("uint8", onnx.TensorProto.UINT8, np.uint8, 1),
        ElementType("bool", onnx.TensorProto.BOOL, np.bool_, 1),
    )
}
_BY_NUMPY_NAME = {np.dtype(t.numpy).name: t for t in ELEMENT_TYPES.values()}


def element_type(ort_name: str) -> ElementType | None:
    """The type named ``ort_name`` (``float`` or ``tensor(float)``), or None when Hase does not handle it."""
    if ort_name.startswith("tensor(") and ort_name.endswith(")"):
        ort_name = ort_name[len("tensor(") : -1]
    return ELEMENT_TYPES.get(ort_name)


def ort_name_of_onnx_type(onnx_type: int) -> str:
    """ORT's name for an ONNX ``TensorProto`` code (numpy's name for types not in the table)."""
    numpy_name = onnx.helper.tensor_dtype_to_np_dtype(onnx_type).name
    known = _BY_NUMPY_NAME.get(numpy_name)
    return known.ort_name if known else numpy_name


def element_bytes(ort_name: str, default: int = 4) -> int:
    """Bytes per element of the type ``ort_name`` (``default`` for a type not in the table)."""
    known = element_type(ort_name)
    return known.bytes if known else default


# Bytes per element of each precision's compute type (fp32 float, fp16 float16, int8 8-bit integers).
PRECISION_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "int8": 1}
_PRECISION_OF_TYPE = {"float": "fp32", "double": "fp32", "float16": "fp16", "int8": "int8", "uint8": "int8"}


def precision_of(ort_names: Iterable[str]) -> str:
    """The precision a kernel computes in, from the element types of its inputs (weights included):
    ``int8`` where one is an 8-bit integer (a QLinearConv's input, a DequantizeLinear's), else ``fp16``
    where one is float16 (a Cast from fp16 reads fp16), else ``fp32`` (also for integer-only kernels)."""
    found = {_PRECISION_OF_TYPE.get(name.removeprefix("tensor(").removesuffix(")")) for name in ort_names}
    for precision in ("int8", "fp16"):
        if precision in found:
            return precision
    return "fp32"
