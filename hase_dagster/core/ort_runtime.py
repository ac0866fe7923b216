"""ONNX Runtime sessions that record which execution provider truly runs.

``onnxruntime-gpu`` lists the CUDA EP on machines without a GPU and silently falls back to the CPU
when asked for it. Every session made here checks ``get_providers()`` and fails loudly instead.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from hase_dagster.core.config import EpName, OrtOptions
from hase_dagster.core.dtypes import element_type
from hase_dagster.core.errors import ExecutionProviderUnavailableError, ModelLoadError

PROVIDER_BY_EP: dict[str, str] = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
OptimizationLevel = Literal["disable", "basic", "extended", "all"]
_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# The IR version Hase writes into the models it builds (kernel models, probes): onnx.helper stamps a
# newer one than ORT 1.31 reads (at most 13).
MAX_IR_VERSION = 10

# Errors are raised as exceptions that name the model; ORT printing them too is noise.
ort.set_default_logger_severity(4)


@functools.cache
def _preload_cuda_libraries() -> None:
    """Load CUDA/cuDNN from the nvidia-* wheels (e.g. torch's) so ORT's CUDA EP finds them."""
    try:
        ort.preload_dlls()
    except Exception:  # no such wheels: ORT then searches the system library path
        pass


def quick_search(options: OrtOptions | None) -> OrtOptions:
    """``options`` with cuDNN's heuristic algorithm choice: for runs whose values matter and whose
    speed does not (validation, fingerprints), it spares the exhaustive search per convolution."""
    return (options or OrtOptions()).model_copy(update={"cudnn_conv_algo_search": "HEURISTIC"})


def _providers(
    ep: EpName, options: OrtOptions, exact: bool = False, compute_stream: int | None = None
) -> list[str | tuple[str, dict[str, str]]]:
    if ep == "cuda":
        _preload_cuda_libraries()
        cuda_options: dict[str, str] = {"cudnn_conv_algo_search": options.cudnn_conv_algo_search}
        if exact:
            cuda_options["use_tf32"] = "0"  # full fp32 products: values comparable across graphs
        if compute_stream is not None:
            cuda_options["user_compute_stream"] = str(compute_stream)
        return [("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"]
    if ep == "cpu":
        return ["CPUExecutionProvider"]
    raise ExecutionProviderUnavailableError(f"unknown execution provider {ep!r}; use 'cpu' or 'cuda'")


def make_session(
    model: str | os.PathLike[str] | bytes,
    ep: EpName,
    options: OrtOptions | None = None,
    level: OptimizationLevel = "all",
    optimized_model_path: str | os.PathLike[str] | None = None,
    profile_prefix: str | os.PathLike[str] | None = None,
    exact: bool = False,
    compute_stream: int | None = None,
) -> ort.InferenceSession:
    """Create a session on ``ep`` and verify that ``ep`` is really the one that runs.

    ``exact`` turns off reduced-precision products (TF32 on the CUDA EP) for value comparisons.
    ``compute_stream`` (a ``cudaStream_t`` as an int) makes the CUDA EP run on that stream.

    Raises :class:`ModelLoadError` naming the model when ORT rejects it, and
    :class:`ExecutionProviderUnavailableError` when the EP fell back to another one.
    """
    options = options or OrtOptions()
    session_options = ort.SessionOptions()
    session_options.graph_optimization_level = _LEVELS[level]
    session_options.intra_op_num_threads = options.intra_op_num_threads
    session_options.inter_op_num_threads = 1
    session_options.log_severity_level = 3
    if optimized_model_path is not None:
        session_options.optimized_model_filepath = str(optimized_model_path)
    if profile_prefix is not None:
        session_options.enable_profiling = True
        session_options.profile_file_prefix = str(profile_prefix)
    source = model if isinstance(model, bytes) else str(model)
    name = "<in-memory model>" if isinstance(model, bytes) else str(model)
    try:
        session = ort.InferenceSession(
            source, session_options, providers=_providers(ep, options, exact, compute_stream)
        )
    except Exception as exc:  # ORT raises several unrelated exception types
        raise ModelLoadError(f"ONNX Runtime cannot load {name}: {exc}") from exc
    wanted = PROVIDER_BY_EP[ep]
    if session.get_providers()[0] != wanted:
        raise ExecutionProviderUnavailableError(
            f"{wanted} does not run on this machine (ORT fell back to {session.get_providers()}); "
            "use --ep cpu or the cpu profile"
        )
    return session


def _probe_model(
    node: onnx.NodeProto, inputs: dict[str, list[int]], outputs: dict[str, list[int]], *initializers: onnx.TensorProto
) -> bytes:
    """A serialized one-node float model (opset 17, an IR version ORT reads) for probing what ORT does here."""

    def values(shapes: dict[str, list[int]]) -> list[onnx.ValueInfoProto]:
        return [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape) for name, shape in shapes.items()]

    graph = helper.make_graph([node], "probe", values(inputs), values(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = MAX_IR_VERSION
    return model.SerializeToString()


@functools.cache
def cuda_is_usable() -> bool:
    """True when a session asking for the CUDA EP really gets it (a GPU, driver and libraries)."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    model = _probe_model(helper.make_node("Relu", ["x"], ["y"]), {"x": [1]}, {"y": [1]})
    try:
        make_session(model, "cuda")
    except (ExecutionProviderUnavailableError, ModelLoadError):
        return False
    return True


# A convolution whose output channels are a multiple of 8 and not of 16: ORT's NCHWc transformer pads them to its
# block, so the padded count names the block (MLAS blocks by 16 with AVX-512F, by 8 with AVX2).
_NCHWC_PROBE_CHANNELS = 24


@functools.cache
def nchwc_block_size() -> int:
    """How many channels this machine's ORT CPU EP blocks a convolution's NCHWc layout by (8 or 16), or 0 where it
    does not convert convolutions to NCHWc. Read from the graph ORT optimizes for a one-convolution probe.

    The CPU EP's kernels differ with it: a convolution whose output channels are not a multiple of the block is
    padded and followed by a ``ReorderOutput``, so two machines of different blocks run different kernel lists.
    """
    weight = helper.make_tensor(
        "w", onnx.TensorProto.FLOAT, [_NCHWC_PROBE_CHANNELS, 16, 3, 3], [0.01] * (_NCHWC_PROBE_CHANNELS * 16 * 9)
    )
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    model = _probe_model(node, {"x": [1, 16, 8, 8]}, {"y": [1, _NCHWC_PROBE_CHANNELS, 8, 8]}, weight)
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "probe.onnx"
        make_session(model, "cpu", optimized_model_path=optimized)
        graph = onnx.load(str(optimized)).graph
    initializers = {t.name: list(t.dims) for t in graph.initializer}
    for n in graph.node:
        if n.domain == "com.microsoft.nchwc" and n.op_type == "Conv" and n.input[1] in initializers:
            padded = initializers[n.input[1]][0]
            return 16 if padded % 16 == 0 else 8
    return 0


def device_name(ep: EpName) -> str:
    """A human-readable name of the device the EP runs on (GPU model or CPU model)."""
    if ep == "cuda":
        try:
            import pynvml

            pynvml.nvmlInit()
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # NVML missing: still a CUDA device, name unknown
            return "cuda:0"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "cpu"


def random_inputs(session: ort.InferenceSession, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for every input of ``session``: floats in [-1, 1), integers zero (valid indices)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        known = element_type(arg.type)
        if known is None:
            raise ModelLoadError(f"input {arg.name!r} has unsupported type {arg.type}")
        dtype = known.numpy
        if np.issubdtype(dtype, np.floating):
            feeds[arg.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        else:
            feeds[arg.name] = np.zeros(shape, dtype=dtype)
    return feeds


def load_onnx(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Load an ONNX file, raising :class:`ModelLoadError` that names it when it is not ONNX."""
    try:
        model = onnx.load(str(path))
    except FileNotFoundError as exc:
        raise ModelLoadError(f"no such ONNX file: {path}") from exc
    except Exception as exc:
        raise ModelLoadError(f"{path} is not a valid ONNX file: {exc}") from exc
    if not model.graph.node:
        raise ModelLoadError(f"{path} is not a valid ONNX model: its graph has no nodes")
    return model
