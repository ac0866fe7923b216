"""One standalone ONNX model per kernel instance, cut out of the optimized graph.

Each kernel model holds its node, its own copy of every weight it reads (untrained models share
zero biases between nodes, so weights cannot be referenced), the opset of its domain, and
random dummy inputs saved beside it (``.npz``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.core.config import OrtOptions
from hase_dagster.core.dtypes import element_type
from hase_dagster.core.errors import ModelLoadError
from hase_dagster.core.ort_runtime import MAX_IR_VERSION, EpName, make_session, quick_search, random_inputs

# Dummy inputs are saved up to this size; larger ones (a batch-128 convolution reads GBs) are drawn
# again at run time, or the kernel files of one batch size would outgrow the disk.
SAVED_INPUT_BYTES = 64 * 1024**2

# Ops whose time follows how often their input changes sign: ORT's CPU PRelu branches per element, so uniform noise
# (a sign change every other element) ran it 16x slower than one sign, and 4x slower than the same kernels inside
# fsrcnn (results/cpu/user-kernels). Their kernels are fed feature-map-like inputs (:func:`feature_map_like`).
SIGN_PATTERN_OPS = frozenset({"PRelu"})


def feature_map_like(values: np.ndarray) -> np.ndarray:
    """``values`` (noise in [-1, 1)) averaged over 3 x 3 neighbours of an image map's height and width (3 along the
    last axis of a sequence or a matrix): the sign runs of a map a convolution wrote, a sign change every 3-4 elements
    against every other one for the noise, about half of it still negative."""
    from scipy.ndimage import uniform_filter

    size = [1] * values.ndim
    for axis in (-2, -1) if values.ndim >= 4 else (-1,):
        size[axis] = 3
    return uniform_filter(values, size=size, mode="wrap").astype(values.dtype)


def kernel_inputs(session: ort.InferenceSession, kernel: Kernel) -> dict[str, np.ndarray]:
    """Dummy inputs of ``kernel``'s model: :func:`random_inputs`, feature-map-like for :data:`SIGN_PATTERN_OPS`."""
    feeds = random_inputs(session, seed=1)
    if kernel.op_type in SIGN_PATTERN_OPS:
        feeds = {
            name: feature_map_like(value) if np.issubdtype(value.dtype, np.floating) else value
            for name, value in feeds.items()
        }
    return feeds


def _value_info(tensor: TensorInfo) -> onnx.ValueInfoProto:
    known = element_type(tensor.dtype)
    if known is None:
        raise ModelLoadError(f"tensor {tensor.name!r} has a type ORT did not report ({tensor.dtype!r})")
    return helper.make_tensor_value_info(tensor.name, known.onnx_type, list(tensor.shape))


def build_kernel_model(optimized_model: onnx.ModelProto, kernel: Kernel) -> onnx.ModelProto:
    """A model whose graph is exactly ``kernel``'s node, with its weights and opset imports."""
    nodes = {node.name: node for node in optimized_model.graph.node}
    if kernel.node_name not in nodes:
        raise ModelLoadError(f"node {kernel.node_name!r} is not in the optimized model")
    node = nodes[kernel.node_name]
    initializers = {init.name: init for init in optimized_model.graph.initializer}
    weights = [initializers[name] for name in dict.fromkeys(kernel.weight_names)]
    graph = helper.make_graph(
        [node],
        kernel.file_stem,
        [_value_info(t) for t in kernel.activations],
        [_value_info(t) for t in kernel.outputs],
        initializer=weights,
    )
    versions = {imp.domain: imp.version for imp in optimized_model.opset_import}
    domains = {"", node.domain}
    opsets = [helper.make_opsetid(d, versions.get(d, 1)) for d in sorted(domains)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="hase")
    model.ir_version = min(optimized_model.ir_version or MAX_IR_VERSION, MAX_IR_VERSION)
    return model


def inputs_path(model_path: str | os.PathLike[str]) -> Path:
    """Where the dummy inputs of a kernel model are saved."""
    return Path(model_path).with_suffix(".inputs.npz")


def load_inputs(model_path: str | os.PathLike[str]) -> dict[str, np.ndarray] | None:
    """The saved dummy inputs of a kernel model, if any."""
    path = inputs_path(model_path)
    if not path.exists():
        return None
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def write_kernel_model(
    optimized_model: onnx.ModelProto,
    kernel: Kernel,
    out_dir: str | os.PathLike[str],
    ep: EpName,
    options: OrtOptions | None = None,
) -> Path:
    """Write ``kernel``'s model and dummy inputs (once per instance, inputs up to
    ``SAVED_INPUT_BYTES``) and validate it on ``ep``.

    Validation runs the model once with optimizations disabled, so the node runs as in the graph
    (with cuDNN's heuristic choice: the benchmark does the exhaustive search it times).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{kernel.file_stem}.onnx"
    if not path.exists():
        model = build_kernel_model(optimized_model, kernel)
        partial = path.with_suffix(f".{os.getpid()}.partial.onnx")  # workers may write the same instance
        onnx.save(model, str(partial))
        try:
            session = make_session(partial, ep, quick_search(options), level="disable")
            feeds = kernel_inputs(session, kernel)
            session.run(None, feeds)
        except Exception as exc:
            partial.unlink(missing_ok=True)
            raise ModelLoadError(f"kernel model {path.name} ({kernel.family}) does not run: {exc}") from exc
        # A sign-pattern kernel keeps its inputs whatever their size: drawn again at run time they would be noise.
        if kernel.op_type in SIGN_PATTERN_OPS or sum(value.nbytes for value in feeds.values()) <= SAVED_INPUT_BYTES:
            np.savez(inputs_path(partial), **feeds)  # type: ignore[arg-type]  # numpy stubs read **kwds as allow_pickle
            inputs_path(partial).replace(inputs_path(path))
        partial.replace(path)
    return path
