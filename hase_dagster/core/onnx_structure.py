"""Read an ONNX file's graph without its weights' values.

``onnx.load`` parses every byte of the file: for ViT-B/16 that is 346 MB of weights copied into
memory (750 MB peak) and most of a second, although static detection and the analysis cache key
read only the graph, the initializers' names, types and shapes, and the values of small ones.
``onnx.load(load_external_data=False)`` does not help: a model exported in one file embeds its
weights in ``raw_data``.

:func:`load_structure` walks the protobuf wire format of the file (memory-mapped, so the weights'
pages are never read), copies every field as it is except the data fields of large initializers,
and parses that. The result is an ordinary ``onnx.ModelProto``: the same nodes, inputs, outputs,
opsets, initializer names, types and dims, and the values of initializers of up to
``KEEP_VALUE_ELEMENTS`` elements; the large initializers have no data.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
from pathlib import Path

import onnx

from hase_dagster.core.errors import HaseError, ModelLoadError

# Initializers up to this many elements keep their values: every value the analysis reads
# (shape-inference constants up to 64 elements, integer tensors hashed into the analysis cache key
# up to 4096) is in one of them.
KEEP_VALUE_ELEMENTS = 4096

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_DIMS = 1
_TENSOR_DATA_LOCATION = 14
# TensorProto fields holding values: float_data, int32_data, string_data, int64_data, raw_data,
# double_data, uint64_data.
_TENSOR_DATA = frozenset({4, 5, 6, 7, 9, 10, 11})
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


class _Malformed(Exception):
    """The bytes are not the protobuf this reader expects (onnx.load then decides)."""


def _varint(buffer: memoryview | bytes | mmap.mmap, position: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= end or shift > 63:
            raise _Malformed
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _fields(buffer: memoryview | bytes | mmap.mmap, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """Every field of the message in ``buffer[start:end]``: (number, wire type, field start,
    payload start, field end); a length-delimited field's payload is its bytes."""
    out = []
    position = start
    while position < end:
        begin = position
        key, position = _varint(buffer, position, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            payload = position
            _, position = _varint(buffer, position, end)
        elif wire == 1:
            payload, position = position, position + 8
        elif wire == 2:
            length, payload = _varint(buffer, position, end)
            position = payload + length
        elif wire == 5:
            payload, position = position, position + 4
        else:  # groups (3, 4) are not in ONNX's schema
            raise _Malformed
        if position > end or number == 0:
            raise _Malformed
        out.append((number, wire, begin, payload, position))
    return out


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _light_tensor(buffer: mmap.mmap, start: int, end: int) -> bytes | None:
    """The TensorProto in ``buffer[start:end]`` without its data fields when it has more than
    ``KEEP_VALUE_ELEMENTS`` elements; None when it is kept whole."""
    fields = _fields(buffer, start, end)
    dims: list[int] = []
    for number, wire, _, payload, stop in fields:
        if number == _TENSOR_DIMS:
            if wire == 2:  # packed
                position = payload
                while position < stop:
                    dim, position = _varint(buffer, position, stop)
                    dims.append(dim)
            elif wire == 0:
                dims.append(_varint(buffer, payload, stop)[0])
        elif number == _TENSOR_DATA_LOCATION and wire == 0 and _varint(buffer, payload, stop)[0] == _EXTERNAL:
            raise _Malformed  # values in another file: onnx.load resolves them
    if math.prod(dims) <= KEEP_VALUE_ELEMENTS:
        return None
    return b"".join(buffer[begin:stop] for number, _, begin, _, stop in fields if number not in _TENSOR_DATA)


def _light_graph(buffer: mmap.mmap, start: int, end: int) -> bytes:
    parts: list[bytes] = []
    for number, wire, begin, payload, stop in _fields(buffer, start, end):
        light = _light_tensor(buffer, payload, stop) if number == _GRAPH_INITIALIZER and wire == 2 else None
        if light is None:
            parts.append(buffer[begin:stop])
        else:
            parts += [_key(number, 2), _encode_varint(len(light)), light]
    return b"".join(parts)


def _structure_bytes(path: Path) -> bytes:
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise _Malformed
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            parts: list[bytes] = []
            for number, wire, begin, payload, stop in _fields(buffer, 0, size):
                if number == _MODEL_GRAPH and wire == 2:
                    graph = _light_graph(buffer, payload, stop)
                    parts += [_key(number, 2), _encode_varint(len(graph)), graph]
                else:
                    parts.append(buffer[begin:stop])
            return b"".join(parts)


def load_structure(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """The ONNX model at ``path`` with the values of initializers of more than
    ``KEEP_VALUE_ELEMENTS`` elements left out (their names, types and dims kept).

    Args:
        path: an ONNX file.

    Returns:
        The model: what ``onnx.load`` returns, less those values. A file this reader cannot walk
        (values in external files, an unexpected encoding) is read whole by ``onnx.load``.

    Raises:
        ModelLoadError: no such file, or not a valid ONNX model (or one with no nodes).
    """
    path = Path(path)
    try:
        data = _structure_bytes(path)
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except FileNotFoundError as exc:
        raise ModelLoadError(f"no such ONNX file: {path}") from exc
    except IsADirectoryError as exc:
        raise ModelLoadError(f"{path} is not a valid ONNX file: it is a folder") from exc
    except Exception:  # _Malformed, protobuf's DecodeError, mmap's ValueError: onnx.load decides
        from hase_dagster.core.ort_runtime import load_onnx

        return load_onnx(path)
    if not model.graph.node:
        raise ModelLoadError(f"{path} is not a valid ONNX model: its graph has no nodes")
    return model


# Initializers whose values belong to a graph's structure: integer tensors up to this many elements
# (shapes, axes, indices), and any tensor up to FLOAT_VALUE_ELEMENTS (the scalars some fusions test:
# ORT drops an Add of 0 or a Mul by 1). Larger float tensors are weights: their values change no kernel.
INTEGER_VALUE_ELEMENTS = 4096
FLOAT_VALUE_ELEMENTS = 64
_INTEGER_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # onnx.TensorProto: (u)int8/16/32/64, bool


def graph_structure_digest(model: onnx.ModelProto) -> str:
    """SHA-256 of what decides a model's kernels: IR and opset versions, inputs and outputs, every
    node (attributes and subgraphs included), each initializer's name, type and shape, and the values
    of small and integer initializers. Two files that differ only in their weights' values share it."""
    digest = hashlib.sha256(f"{model.ir_version}|{[(o.domain, o.version) for o in model.opset_import]}".encode())
    graph = model.graph
    for value in (*graph.input, *graph.output):
        digest.update(value.SerializeToString())
    for node in graph.node:
        digest.update(node.SerializeToString())
    for tensor in graph.initializer:
        elements = math.prod(tensor.dims)
        digest.update(f"|{tensor.name}|{tensor.data_type}|{list(tensor.dims)}|".encode())
        limit = INTEGER_VALUE_ELEMENTS if tensor.data_type in _INTEGER_TYPES else FLOAT_VALUE_ELEMENTS
        if elements <= limit:
            digest.update(tensor.SerializeToString())
    return digest.hexdigest()


def batch_size_of(model: onnx.ModelProto) -> int | None:
    """The static batch size of the first input, or None when it is symbolic."""
    dims = model.graph.input[0].type.tensor_type.shape.dim if model.graph.input else []
    return dims[0].dim_value if dims and dims[0].dim_value > 0 else None


def set_batch_size(model: onnx.ModelProto, batch_size: int, name: str) -> bool:
    """Set ``model``'s symbolic batch dimensions (the first of each input) to ``batch_size``, in place.

    Args:
        model: the loaded model.
        batch_size: the batch size wanted.
        name: the model's name for the error.

    Returns:
        True when the model was changed, False when its batch already was ``batch_size``.

    Raises:
        HaseError: its batch is fixed to another number.
    """
    current = batch_size_of(model)
    if current == batch_size:
        return False
    if current is not None:
        raise HaseError(f"{name} has a fixed batch size of {current}, not {batch_size}; export it with a dynamic batch")
    for graph_input in model.graph.input:
        dims = graph_input.type.tensor_type.shape.dim
        if dims and not dims[0].dim_value:
            dims[0].dim_value = batch_size
    return True
