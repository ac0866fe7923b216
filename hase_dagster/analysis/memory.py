"""How much memory analysing a model takes, estimated before anything runs.

Analysis runs the model in ORT and fingerprints every float tensor of the original and optimized
graphs, so it holds about every activation at once, plus the weights. A batch size far beyond what
the machine holds would otherwise grow until the kernel's OOM killer ends the process without a word.
"""

from __future__ import annotations

from math import prod

import onnx
import psutil
from onnx import shape_inference

from hase_dagster.core.dtypes import element_bytes, ort_name_of_onnx_type
from hase_dagster.core.errors import HaseError

# Original and optimized graph are fingerprinted side by side, and ORT's arena adds its own slack;
# the libraries take a base. resnet18 at batch 8 (0.24 GB of tensors) peaked at 0.80 GB resident in
# `hase analyze` on the 2-core VM (2026-11-22); the estimate there is 1.2 GB.
ANALYSIS_MEMORY_FACTOR = 3.0
ANALYSIS_BASE_BYTES = 500_000_000


def tensor_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every tensor whose shape ONNX shape inference knows: weights, inputs, activations
    and outputs (tensors of unknown shape count zero)."""
    inferred = shape_inference.infer_shapes(model)
    graph = inferred.graph
    total = sum(prod(init.dims) * element_bytes(ort_name_of_onnx_type(init.data_type)) for init in graph.initializer)
    initializers = {init.name for init in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value for d in tensor.shape.dim]
        if not dims or any(d <= 0 for d in dims):
            continue
        total += prod(dims) * element_bytes(ort_name_of_onnx_type(tensor.elem_type))
    return int(total)


def check_fits_in_memory(model: onnx.ModelProto, name: str, available: int | None = None) -> int:
    """Raise a HaseError, with the estimate, when analysing ``model`` would not fit in the memory
    available now; return the estimate in bytes.

    Args:
        model: the model at the batch size to analyse (batch dimension fixed).
        name: how the error names the model.
        available: bytes available (default: what the OS reports now).
    """
    needed = int(tensor_bytes(model) * ANALYSIS_MEMORY_FACTOR) + ANALYSIS_BASE_BYTES
    available = psutil.virtual_memory().available if available is None else available
    if needed > available:
        raise HaseError(
            f"analysing {name} needs about {needed / 1e9:.1f} GB (its tensors x {ANALYSIS_MEMORY_FACTOR:g}, plus "
            f"{ANALYSIS_BASE_BYTES / 1e9:.1f}) and "
            f"{available / 1e9:.1f} GB is available: use a smaller batch size or a larger machine"
        )
    return needed
