"""What an aten operator is: its category (matrix, attention, ...), its ``native_functions.yaml``
entry and the ATen source file that implements it.

The torch wheel ships ``torchgen/packaged/ATen/native/native_functions.yaml`` (every operator's
schema and the kernel function each dispatch key calls) and the ATen headers
(``torch/include/ATen/native/**.h``), but no ``.cpp``/``.cu`` source. So the source file of an
operator is told in three grades, and every answer says which one it is:

- ``header``: a header shipped in the wheel declares the dispatch function (found on disk);
- ``known``: the file in the PyTorch source tree, from :data:`KNOWN_SOURCES` (checked by hand
  against the public pytorch/pytorch tree on 2026-11-23; files move between releases);
- ``inferred``: guessed from the dispatch function's name (``addmm_out_cuda`` -> ``cuda/...``);
  not found anywhere, only a lead.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

Category = Literal[
    "matrix", "convolution", "attention", "normalization", "activation", "embedding", "elementwise", "memory", "other"
]
CATEGORIES: tuple[Category, ...] = (
    "matrix",
    "convolution",
    "attention",
    "normalization",
    "activation",
    "embedding",
    "elementwise",
    "memory",
    "other",
)

# Operator base names (no ``aten::`` prefix, no trailing ``_`` of the in-place form, no overload).
_MATRIX = {"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "addmv", "mv", "dot", "_addmm_activation", "einsum"}
_CONVOLUTION = {
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "_convolution",
    "cudnn_convolution",
    "cudnn_convolution_relu",
    "cudnn_convolution_add_relu",
    "mkldnn_convolution",
    "_conv_depthwise2d",
    "conv_depthwise2d",
    "_slow_conv2d_forward",
    "slow_conv2d",
    "_nnpack_spatial_convolution",
    "thnn_conv2d",
}
# Softmax belongs to attention: in a Transformer it is the attention's normalization of scores.
_ATTENTION = {"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "masked_softmax"}
_NORMALIZATION = {
    "layer_norm",
    "native_layer_norm",
    "batch_norm",
    "_batch_norm_impl_index",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
    "cudnn_batch_norm",
    "miopen_batch_norm",
    "group_norm",
    "native_group_norm",
    "instance_norm",
    "rms_norm",
    "_fused_rms_norm",
}
_ACTIVATION = {
    "relu",
    "relu6",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "leaky_relu",
    "elu",
    "selu",
    "softplus",
    "mish",
    "threshold",
    "clamp_min",
    "clamp",
    "prelu",
}
_EMBEDDING = {"embedding", "embedding_bag", "_embedding_bag", "index_select", "gather", "index", "take"}
_ELEMENTWISE = {
    "add",
    "sub",
    "rsub",
    "mul",
    "div",
    "neg",
    "pow",
    "sqrt",
    "rsqrt",
    "exp",
    "log",
    "abs",
    "where",
    "masked_fill",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "bitwise_and",
    "bitwise_or",
    "bitwise_not",
    "logical_not",
    "logical_and",
    "__and__",
    "__or__",
    "dropout",
    "native_dropout",
    "reciprocal",
    "erf",
    "square",
    "maximum",
    "minimum",
}
_MEMORY = {
    "copy",
    "_to_copy",
    "to",
    "contiguous",
    "clone",
    "transpose",
    "t",
    "permute",
    "view",
    "reshape",
    "_reshape_alias",
    "_unsafe_view",
    "expand",
    "expand_as",
    "as_strided",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
    "split",
    "split_with_sizes",
    "chunk",
    "cat",
    "stack",
    "narrow",
    "empty",
    "empty_strided",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "fill",
    "zero",
    "resize",
    "detach",
    "alias",
    "lift_fresh",
    "new_empty",
    "new_zeros",
    "_unsafe_split",
    "unbind",
    "movedim",
    "_copy_from",
    "_copy_from_and_resize",
}
# Order matters only for names in two sets (none today); attention before matrix keeps
# scaled_dot_product* out of matrix.
_SETS: tuple[tuple[Category, set[str]], ...] = (
    ("convolution", _CONVOLUTION),
    ("matrix", _MATRIX),
    ("attention", _ATTENTION),
    ("normalization", _NORMALIZATION),
    ("activation", _ACTIVATION),
    ("embedding", _EMBEDDING),
    ("elementwise", _ELEMENTWISE),
    ("memory", _MEMORY),
)


def base_name(op: str) -> str:
    """``aten::add_.Tensor`` -> ``add``: namespace, overload and in-place ``_`` removed."""
    name = op.split("::", 1)[-1].split(".", 1)[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def categorize(op: str) -> Category:
    """The category of an aten operator name (``aten::addmm``, ``aten::relu_``, ``addmm``).

    Anything whose name mentions attention or ``scaled_dot_product`` is attention (the SDPA entry
    point and its flash / memory-efficient / math backends); names in none of the sets are ``other``.
    """
    name = base_name(op)
    if "scaled_dot_product" in name or "attention" in name or name.startswith(("_flash_", "_efficient_")):
        return "attention"
    for category, names in _SETS:
        if name in names:
            return category
    return "other"


# ONNX op types of the exported graph, in the same categories (to compare with ORT per category).
_ONNX_CATEGORIES: dict[str, Category] = {
    **dict.fromkeys(["MatMul", "Gemm", "FusedMatMul", "MatMulNBits", "FusedGemm", "QuantizeLinear"], "matrix"),
    **dict.fromkeys(["Conv", "FusedConv", "ConvTranspose", "NhwcConv", "QLinearConv"], "convolution"),
    **dict.fromkeys(
        ["Attention", "MultiHeadAttention", "Softmax", "LogSoftmax", "GroupQueryAttention", "PackedAttention"],
        "attention",
    ),
    **dict.fromkeys(
        [
            "LayerNormalization",
            "SkipLayerNormalization",
            "EmbedLayerNormalization",
            "BatchNormalization",
            "SimplifiedLayerNormalization",
            "SkipSimplifiedLayerNormalization",
            "InstanceNormalization",
            "GroupNorm",
        ],
        "normalization",
    ),
    **dict.fromkeys(
        ["Relu", "Gelu", "FastGelu", "BiasGelu", "Tanh", "Sigmoid", "Clip", "HardSwish", "HardSigmoid", "LeakyRelu"],
        "activation",
    ),
    **dict.fromkeys(["Gather", "GatherElements", "GatherND"], "embedding"),
    **dict.fromkeys(
        ["Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Where", "Equal", "Not", "Cast", "Neg", "Exp", "BiasAdd"],
        "elementwise",
    ),
    **dict.fromkeys(
        [
            "Transpose",
            "Reshape",
            "Squeeze",
            "Unsqueeze",
            "Flatten",
            "Concat",
            "Split",
            "Slice",
            "Expand",
            "Identity",
            "MemcpyToHost",
            "MemcpyFromHost",
            "ReorderInput",
            "ReorderOutput",
            "Shape",
            "ConstantOfShape",
        ],
        "memory",
    ),
}


def onnx_category(op_type: str) -> Category:
    """The category of an ONNX (or ORT contrib) op type, in :func:`categorize`'s terms."""
    return _ONNX_CATEGORIES.get(op_type, "other")


def family_category(family: str, op_type: str = "") -> Category:
    """The category of a Hase kernel family (``FusedMatMul``, ``Conv_Add_Relu``, ``Add_LayerNormalization``):
    the heaviest category among the ONNX ops it names, in the order of :data:`CATEGORIES`."""
    parts = [p for p in re.split(r"[_+]", family) if p] + ([op_type] if op_type else [])
    found = {onnx_category(p) for p in parts}
    return next((c for c in CATEGORIES if c in found), "other")


# ----------------------------------------------------------------------------------------------
# native_functions.yaml and source files


def native_functions_path() -> Path:
    """``native_functions.yaml`` inside the installed torch wheel (``torchgen/packaged``)."""
    import torchgen

    return Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"


@dataclass
class NativeFunction:
    """One ``native_functions.yaml`` entry: schema, dispatch table and the YAML text as written."""

    name: str
    func: str
    dispatch: dict[str, str] = field(default_factory=dict)
    structured_delegate: str | None = None
    yaml_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "func": self.func,
            "dispatch": self.dispatch,
            "structured_delegate": self.structured_delegate,
            "yaml": self.yaml_text,
        }


@functools.cache
def _native_functions(path: str) -> dict[str, list[NativeFunction]]:
    text = Path(path).read_text()
    # Split into top-level entries ("- func: ...") to keep each entry's text for the report.
    chunks = re.split(r"\n(?=- func:)", text)
    entries: dict[str, list[NativeFunction]] = {}
    for chunk in chunks:
        if not chunk.lstrip().startswith("- func:"):
            continue
        parsed = yaml.safe_load(chunk)
        if not parsed or not isinstance(parsed, list) or not isinstance(parsed[0], dict):
            continue
        entry = parsed[0]
        func = str(entry.get("func", ""))
        overload_name = func.split("(", 1)[0]
        # "CPU, CUDA: add_out" lists several keys for one function: one entry per key.
        dispatch = {
            key.strip(): str(function)
            for keys, function in (entry.get("dispatch") or {}).items()
            for key in str(keys).split(",")
        }
        native = NativeFunction(
            name=overload_name,
            func=func,
            dispatch=dispatch,
            structured_delegate=entry.get("structured_delegate"),
            yaml_text=chunk.strip(),
        )
        entries.setdefault(overload_name.split(".", 1)[0], []).append(native)
    return entries


def native_function(op: str, path: str | Path | None = None) -> NativeFunction | None:
    """The ``native_functions.yaml`` entry of ``op`` (``aten::addmm``): the default overload, else
    the first ``.out`` or other overload; ``None`` when the YAML has no such operator."""
    name = op.split("::", 1)[-1].split(".", 1)[0]
    candidates = _native_functions(str(path or native_functions_path())).get(name, [])
    if not candidates:
        return None
    default = [c for c in candidates if "." not in c.name]
    return (default or candidates)[0]


def dispatch_of(op: str, path: str | Path | None = None) -> dict[str, str]:
    """The dispatch table that really runs ``op``: its own, else its structured delegate's
    (``addmm`` delegates to ``addmm.out``), else that of its ``.out`` overload."""
    entries = _native_functions(str(path or native_functions_path()))
    name = op.split("::", 1)[-1].split(".", 1)[0]
    entry = native_function(op, path)
    if entry is None:
        return {}
    if entry.dispatch and not entry.structured_delegate:
        return entry.dispatch
    # A structured operator's own table holds only the sparse/quantized variants; the dense
    # kernels (CPU, CUDA) are its delegate's.
    delegate = entry.structured_delegate or f"{name}.out"
    for candidate in entries.get(name, []):
        if candidate.name == delegate and candidate.dispatch:
            return {**entry.dispatch, **candidate.dispatch}
    return entry.dispatch


# Dispatch functions and composite operators -> file in the PyTorch source tree (aten/src/ATen/native/).
# Each file checked to exist in the public pytorch/pytorch tree (2026-11-23; addmm_out_cuda, gelu_out_cuda and
# _scaled_dot_product_flash_attention_cpu also read there in their files); a release may move them.
KNOWN_SOURCES: dict[str, str] = {
    "addmm_out_cuda": "cuda/Blas.cpp",
    "mm_out_cuda": "cuda/Blas.cpp",
    "bmm_out_cuda": "cuda/Blas.cpp",
    "baddbmm_out_cuda": "cuda/Blas.cpp",
    "addmm_out_cpu": "LinearAlgebra.cpp",
    "mm_out_cpu": "LinearAlgebra.cpp",
    "bmm_out_cpu": "LinearAlgebra.cpp",
    "baddbmm_out_cpu": "LinearAlgebra.cpp",
    "linear": "Linear.cpp",
    "matmul": "LinearAlgebra.cpp",
    "layer_norm_symint": "layer_norm.cpp",
    "layer_norm": "layer_norm.cpp",
    "layer_norm_cpu": "layer_norm.cpp",
    "layer_norm_cuda": "cuda/layer_norm_kernel.cu",
    "gelu_out_cpu": "Activation.cpp",
    "gelu_out_cuda": "cuda/Activation.cpp",
    "softmax_cpu_out": "SoftMax.cpp",
    "softmax_cuda_out": "cuda/SoftMax.cu",
    "scaled_dot_product_attention": "transformers/attention.cpp",
    "_scaled_dot_product_flash_attention_cuda": "transformers/cuda/attention.cu",
    "_scaled_dot_product_efficient_attention_cuda": "transformers/cuda/attention.cu",
    "_scaled_dot_product_cudnn_attention_cuda": "transformers/cuda/attention.cu",
    "_scaled_dot_product_flash_attention_cpu": "transformers/attention.cpp",
    "embedding_symint": "Embedding.cpp",
    "embedding": "Embedding.cpp",
    "index_select_out_cpu_": "TensorAdvancedIndexing.cpp",
    "index_select_cpu_": "TensorAdvancedIndexing.cpp",
    "index_select_cuda": "cuda/Indexing.cu",
    "index_select_out_cuda": "cuda/Indexing.cu",
    "copy_": "Copy.cpp",
    "_to_copy": "TensorConversions.cpp",
    "transpose": "TensorShape.cpp",
    "permute": "TensorShape.cpp",
    "view": "TensorShape.cpp",
    "reshape_symint": "TensorShape.cpp",
    "expand": "TensorShape.cpp",
    "slice": "TensorShape.cpp",
    "select_symint": "TensorShape.cpp",
    "unsqueeze": "TensorShape.cpp",
    "contiguous": "TensorProperties.cpp",
    "clone": "TensorFactories.cpp",
    "cat_out_cpu": "TensorShape.cpp",
    "cat_out_cuda": "cuda/Shape.cu",
    "convolution": "Convolution.cpp",
    "_convolution": "Convolution.cpp",
    "conv2d_symint": "Convolution.cpp",
    "cudnn_convolution": "cudnn/ConvShared.cpp",
    "mkldnn_convolution": "mkldnn/Conv.cpp",
    "batch_norm": "Normalization.cpp",
    "_batch_norm_impl_index": "Normalization.cpp",
    "_batch_norm_legit_no_training": "Normalization.cpp",
    "batch_norm_cpu": "Normalization.cpp",
    "batch_norm_cuda": "cuda/Normalization.cu",
    "cudnn_batch_norm": "cudnn/BatchNorm.cpp",
    "relu": "Activation.cpp",
    "relu_": "Activation.cpp",
    "clamp_min_out": "TensorCompare.cpp",
    "hardtanh": "Activation.cpp",
    "hardtanh_": "Activation.cpp",
    "tanh_out": "UnaryOps.cpp",
    "add_out": "BinaryOps.cpp",
    "mul_out": "BinaryOps.cpp",
    "div_out": "BinaryOps.cpp",
    "sub_out": "BinaryOps.cpp",
    "max_pool2d": "MaxPooling.cpp",
    "max_pool2d_with_indices_out_cpu": "DilatedMaxPool2d.cpp",
    "max_pool2d_with_indices_out_cuda": "cuda/DilatedMaxPool2d.cu",
    "adaptive_avg_pool2d_symint": "AdaptiveAveragePooling.cpp",
    "adaptive_avg_pool2d_out_cpu": "AdaptiveAveragePooling.cpp",
    "adaptive_avg_pool2d_out_cuda": "cuda/AdaptiveAveragePooling.cu",
    "flatten": "TensorShape.cpp",
    "mean_out": "ReduceOps.cpp",
    "dropout": "Dropout.cpp",
    "where": "TensorCompare.cpp",
    # ufunc operators (add, mul, ...) have no CPU/CUDA dispatch entry: generated from BinaryOps.
    "add": "BinaryOps.cpp",
    "mul": "BinaryOps.cpp",
    "sub": "BinaryOps.cpp",
    "div": "BinaryOps.cpp",
    "adaptive_avg_pool2d_cuda": "cuda/AdaptiveAveragePooling.cu",
    "adaptive_avg_pool2d_cpu": "AdaptiveAveragePooling.cpp",
    "_scaled_dot_product_flash_attention_for_cpu": "transformers/attention.cpp",
    "math_native_layer_norm": "layer_norm.cpp",
}
ATEN_NATIVE = "aten/src/ATen/native/"
# Dispatch keys in the order a reader wants them for each device.
_KEYS = {
    "cuda": ("CUDA", "CompositeExplicitAutograd", "CompositeImplicitAutograd"),
    "cpu": ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd"),
}


@dataclass
class SourceLocation:
    """Where an operator's kernel function lives, and how sure that is (see the module docstring)."""

    function: str
    path: str
    grade: Literal["header", "known", "inferred"]

    def to_dict(self) -> dict[str, str]:
        return {"function": self.function, "path": self.path, "grade": self.grade}


@functools.cache
def _header_index(include_dir: str) -> dict[str, list[str]]:
    """Function name -> headers under ``include_dir/ATen/native`` that declare or define it
    (``name(`` appears), built once; the MPS and other non-CPU/CUDA backends are left out."""
    index: dict[str, list[str]] = {}
    root = Path(include_dir)
    for header in sorted((root / "ATen" / "native").rglob("*.h")):
        relative = str(header.relative_to(root.parent))
        if any(part in relative for part in ("/mps/", "/vulkan/", "/metal/", "/xpu/", "/hip/")):
            continue
        try:
            names = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", header.read_text(errors="ignore")))
        except OSError:
            continue
        for name in names:
            index.setdefault(name, []).append(relative)
    return index


def _torch_include() -> str:
    import torch

    return str(Path(torch.__file__).parent / "include")


def _inferred_path(function: str, device: str) -> str:
    stem = re.sub(r"_(out_)?(cpu|cuda)_?$", "", function).strip("_")
    camel = "".join(part.capitalize() for part in stem.split("_") if part)
    folder = "cuda/" if function.endswith(("_cuda", "_cuda_")) or device == "cuda" and "cpu" not in function else ""
    return f"{ATEN_NATIVE}{folder}{camel}{'.cu' if folder else '.cpp'}"


def source_locations(op: str, device: str, yaml_path: str | Path | None = None) -> list[SourceLocation]:
    """The files that implement ``op`` on ``device`` (``cpu`` or ``cuda``), best grade first per
    dispatch function: a header in the wheel that declares it, else :data:`KNOWN_SOURCES`, else a
    path inferred from the function's name."""
    dispatch = dispatch_of(op, yaml_path)
    name = op.split("::", 1)[-1].split(".", 1)[0]
    functions: list[str] = []
    for key in _KEYS.get(device, _KEYS["cpu"]):
        if key in dispatch and dispatch[key] not in functions:
            functions.append(dispatch[key])
    if not functions:
        # Composite operators without a dispatch table are implemented under their own name.
        functions = [name]
    headers = _header_index(_torch_include())
    out: list[SourceLocation] = []
    for function in functions[:2]:
        if function in KNOWN_SOURCES:
            out.append(SourceLocation(function, ATEN_NATIVE + KNOWN_SOURCES[function], "known"))
        else:
            out.append(SourceLocation(function, _inferred_path(function, device), "inferred"))
        if function != name:  # an op's own name is called everywhere; a dispatch function is declared once
            for header in headers.get(function, [])[:2]:
                out.append(SourceLocation(function, header, "header"))
    return out
