"""Kernel features for the latency regressor: shapes, attributes, FLOPs, bytes and the background load.

One row in, one feature vector out, with the same code for training rows (from the warehouse) and
for kernels of a model to predict (from ``hase analyze``), so the two cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from math import log1p, prod
from typing import TYPE_CHECKING, Any

import numpy as np

from hase_dagster.core.dtypes import element_bytes, precision_of

if TYPE_CHECKING:  # pandas is imported where frames are built: a prediction needs none (and no import time)
    import pandas as pd

MAX_RANK = 4
NUMERIC_FEATURES: tuple[str, ...] = (
    *(f"in_d{i}" for i in range(MAX_RANK)),
    *(f"out_d{i}" for i in range(MAX_RANK)),
    "in_rank",
    "out_rank",
    # Which of the last MAX_RANK dims the first output changes from the first input: a data-movement kernel's
    # path. ORT pads only the last dims of a channels-first map at 1.6 TB/s on the H100, copies an unpadded
    # tensor at 2.9 TB/s, and runs any other pad (Swin's channels-last one) in its generic kernel at 57 GB/s.
    *(f"changed_d{i}" for i in range(MAX_RANK)),
    # How aligned the last two dims of the first input and of the first output are: the largest power of two up to
    # ALIGN_CAP that divides both. Matrix products and row-wise kernels pick other paths for misaligned or long
    # rows: on the H100 a Softmax over rows of 1,025 ran at 2.4 TB/s where rows of 129-785 ran 2.8-2.9, and a
    # vision transformer's 197 tokens are odd where a text encoder's 128 or 512 are not.
    "align_in",
    "align_out",
    "n_activation_inputs",
    "in_numel",
    "out_numel",
    "weight_numel",
    "kernel_h",
    "kernel_w",
    "stride_h",
    "stride_w",
    "group",
    # Input channels per group (0 without groups): the size of each group's GEMM, which sets a grouped
    # convolution's efficiency (4-8 channels a group run several times slower per FLOP than 16 or more).
    "channels_per_group",
    "fused_activation",
    "fused_sum",
    "log_flops",
    "log_input_bytes",
    "log_output_bytes",
    "log_weight_bytes",
    "log_intensity",
    "n_absorbed",
    # Precision (issue 15 C): bytes per element of the activation inputs and of the weights (0: none),
    # and whether the kernel computes in int8 or fp16 (``core.dtypes.precision_of``).
    *(PRECISION_FEATURES := ("elem_bytes", "weight_elem_bytes", "precision_fp16", "precision_int8")),
    # Whether a convolution has a bias (a rank-1 weight): ORT's CUDA Conv adds it with a second cuDNN call, a pass
    # over the output, so a bias-free one (after a norm, not before one: VisFormer's) is that pass shorter; on the
    # H100 VisFormer-tiny's bias-free 1x1 convolutions ran at 42-96 TFLOPS (results/gpu-general/user-kernels).
    "conv_bias",
    # Whether ORT's CUDA EP runs a reduction as a matrix reduction (its own kernel) rather than cuDNN's generic one:
    # a ReduceSum or ReduceMean whose reduced axes, size-1 dims dropped, are the leading or the trailing ones
    # (``get_applicable_matrix_reduction``, ORT 1.31). On the H100 a ReduceMean over the spatial axes of a
    # channels-first map ran at 1.1-1.7 TB/s, a ReduceL2 or ReduceMax over the same axes at 130-240 GB/s
    # (ConvNeXtV2's global response norm, predicted 37% fast: results/gpu-general/README.md, "Reduce grid").
    "reduce_matrix_path",
    # A row-wise kernel's rows (:data:`AXIS_OPS`): the elements along its axis (a LayerNormalization's: every dim
    # from its axis on) and the elements after that axis (1 for the last). On the H100 ORT's CUDA Softmax over the
    # last axis ran at 1.3-3.0 TB/s and over any other (keys normalised over the tokens) at 160-590 GB/s, and a
    # LayerNormalization over 24 elements at about 275 GB/s against 1.3-1.8 TB/s over 256-4,096: without these the
    # trees blended the two Softmax paths, other-axis rows 25% fast and last-axis ones 11% slow (median, in sample;
    # results/gpu-general/axis-rows.md).
    "axis_length",
    "axis_inner",
)
# Row-wise ops whose ``axis`` attribute (default -1, opset 13 on) sets the rows the kernel runs over.
AXIS_OPS: frozenset[str] = frozenset(
    {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "SkipLayerNormalization",
     "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
)  # fmt: skip
# Of those, the ones that normalise every dim from the axis on (the rest run along the one axis).
TRAILING_AXIS_OPS: frozenset[str] = frozenset(
    {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
)
# The reductions that may take ORT's CUDA matrix path (cuDNN's ADD op: a mean is a sum scaled).
MATRIX_REDUCTION_OPS: frozenset[str] = frozenset({"ReduceSum", "ReduceMean"})
CONV_OPS: frozenset[str] = frozenset({"Conv", "FusedConv", "ConvTranspose", "NhwcConv", "QLinearConv", "ConvInteger"})
CATEGORICAL_FEATURES: tuple[str, ...] = ("family", "op")
# ONNX's broadcasting elementwise ops: ORT's CUDA and CPU kernels stream the larger operand and broadcast the
# smaller from either side at the same speed (on the H100 a [64,32,112,112] x [64,32,1,1] Mul and its
# operands swapped both ran 2.8 TB/s), so the graph's operand order says nothing about the work. Their
# features read the operands largest first (:data:`OPERAND_ORDERS`): read in graph order, EfficientNet's
# SE scale (``s * x``, the small operand first) looked like a broadcast to a larger map and was predicted
# 2-3x slow by trees that had only seen ``x * s``.
BROADCAST_ELEMENTWISE_OPS: frozenset[str] = frozenset(
    {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Equal", "Greater", "Less",
     "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Mod", "BitShift"}
)  # fmt: skip
# How kernel_features orders activation operands: "graph" as the graph has them (regressors saved before
# the order was a choice), "largest_first" for BROADCAST_ELEMENTWISE_OPS (every regressor trained since).
OPERAND_ORDERS: tuple[str, ...] = ("graph", "largest_first")
# Families whose ORT kernel takes another path for inputs of one rank or for one mode, trained and predicted as a
# family of their own (``<family>@rank<r>``, ``<family>@<mode>``; :func:`feature_family`). On the H100 a
# BatchNormalization over a 2-D (rows, channels) input (LeViT's, after a token-wise Linear) moves 12-13 GB/s, one over
# a 4-D map up to 2.6 TB/s (bytes read and written); pooled in one family, the 2-D rows made DenseNet's 4-D ones 163%
# slow (results/gpu-general/README.md, "Set S and the norms probes"). On this VM's CPU a bicubic Resize of a
# 3 x 240 x 240 image to 224 px (CrossViT's) took 17.7 ms, where the nearest and bilinear resizes the tables held
# run in microseconds (results/cpu/resize-probes).
RANK_FAMILIES: dict[str, int] = {"BatchNormalization": 2}
MODE_FAMILIES: dict[str, frozenset[str]] = {"Resize": frozenset({"cubic"})}
ALIGN_CAP = 16
# Integer vectors up to this many elements are a kernel's parameters (pads, shape, axes, starts, repeats),
# whether an initializer holds them or a constant subgraph computes them: ORT reads them on the host.
SHAPE_OPERAND_MAX = 16


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def kernel_precision(kernel: Mapping[str, Any]) -> str:
    """What a catalog-style kernel record computes in (``core.dtypes.precision_of`` of its inputs' types); rows from
    before dtypes were recorded lack them: fp32, as everything was then."""
    return _inputs_precision(_loads(kernel.get("inputs_json", kernel.get("inputs"))) or [])


def _inputs_precision(inputs: list[dict[str, Any]]) -> str:
    return precision_of(str(t.get("dtype", "float")) for t in inputs)


def _dims(shape: list[int]) -> list[int]:
    """The last MAX_RANK dims, left-padded with 1 (a 5-D NCHWc-like shape keeps its inner dims)."""
    tail = list(shape)[-MAX_RANK:]
    return [1] * (MAX_RANK - len(tail)) + tail


def alignment(shape: Sequence[int]) -> int:
    """The largest power of two up to :data:`ALIGN_CAP` that divides each of ``shape``'s last two dims (1 for a
    scalar or an unknown dim)."""
    dims = list(shape)[-2:]
    if not dims:
        return 1
    align = ALIGN_CAP
    for dim in dims:
        if not isinstance(dim, int) or dim <= 0:
            return 1
        while dim % align:
            align //= 2
    return align


def is_shape_operand(tensor: Mapping[str, Any]) -> bool:
    """Whether ``tensor`` (a catalog-style input) is a small integer vector: a parameter of the kernel,
    not data it moves (see :data:`SHAPE_OPERAND_MAX`)."""
    shape = tensor.get("shape") or []
    return str(tensor.get("dtype", "")) in ("int64", "int32") and len(shape) <= 1 and prod(shape) <= SHAPE_OPERAND_MAX


def _split_inputs(inputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """A kernel's inputs as (activations, weights, bytes of computed shape operands), in their order: a computed
    shape operand joins the weights and adds its bytes to theirs."""
    activations, weights, computed_parameter_bytes = [], [], 0
    for t in inputs:
        if t.get("weight"):
            weights.append(t)
        elif is_shape_operand(t):
            weights.append(t)
            computed_parameter_bytes += prod(t["shape"]) * element_bytes(str(t["dtype"]))
        else:
            activations.append(t)
    return activations, weights, computed_parameter_bytes


def feature_family(family: str, input_rank: int, mode: str = "") -> str:
    """The family a kernel trains and predicts as: ``family``, ``family@rank<r>`` for :data:`RANK_FAMILIES` when
    its first activation input has that rank, ``family@<mode>`` for :data:`MODE_FAMILIES`' modes."""
    if RANK_FAMILIES.get(family) == input_rank:
        return f"{family}@rank{input_rank}"
    if mode in MODE_FAMILIES.get(family, ()):
        return f"{family}@{mode}"
    return family


def kernel_family(kernel: Mapping[str, Any]) -> str:
    """:func:`feature_family` of a catalog-style kernel record (``inputs``/``inputs_json``, ``attributes``)."""
    activations = _split_inputs(_loads(kernel.get("inputs_json", kernel.get("inputs"))) or [])[0]
    attributes = _loads(kernel.get("attributes_json", kernel.get("attributes"))) or {}
    rank = len(activations[0]["shape"]) if activations else 0
    return feature_family(str(kernel["family"]), rank, _mode(attributes))


def reduced_axes(in_shape: Sequence[int], out_shape: Sequence[int], attributes: Mapping[str, Any]) -> list[int] | None:
    """The axes a reduction reduces, non-negative: its ``axes`` attribute, else the dims its output kept as 1 (a
    ReduceSum's axes are an input, folded into a weight); None where neither says (no dims kept)."""
    rank = len(in_shape)
    axes = attributes.get("axes")
    if isinstance(axes, list) and axes:
        return sorted(int(a) % rank for a in axes) if rank else None
    if rank and len(out_shape) == rank:
        return [i for i, (a, b) in enumerate(zip(in_shape, out_shape)) if a != b]
    return None


def takes_matrix_reduction(
    op_type: str, in_shape: Sequence[int], out_shape: Sequence[int], attributes: Mapping[str, Any]
) -> bool:
    """Whether ORT's CUDA EP runs this kernel with its matrix reduction: a ReduceSum or ReduceMean whose reduced axes
    (:func:`reduced_axes`), the size-1 dims dropped, are a leading or trailing run of what is left."""
    if op_type not in MATRIX_REDUCTION_OPS:  # the axes are read for reductions only: this runs for every kernel
        return False
    axes = reduced_axes(in_shape, out_shape, attributes)
    if not axes:
        return False
    kept = [i for i, d in enumerate(in_shape) if d != 1]
    reduced = [kept.index(a) for a in axes if a in kept]
    if not reduced or len(reduced) == len(kept):
        return False
    run = sorted(reduced) == list(range(min(reduced), max(reduced) + 1))
    return run and (min(reduced) == 0 or max(reduced) == len(kept) - 1)


def axis_rows(op_type: str, in_shape: Sequence[int], attributes: Mapping[str, Any]) -> tuple[int, int]:
    """(elements along the axis, elements after it) of a row-wise kernel (:data:`AXIS_OPS`), (0, 0) for any other
    kernel or an input of unknown rank. A LayerNormalization's axis runs to the last dim (its rows are every dim
    from the axis on, nothing after them)."""
    rank = len(in_shape)
    if op_type not in AXIS_OPS or not rank:
        return 0, 0
    axis = attributes.get("axis", -1)
    axis = int(axis) % rank if isinstance(axis, int) else rank - 1
    if op_type in TRAILING_AXIS_OPS:
        return prod(in_shape[axis:]), 1
    return int(in_shape[axis]), prod(in_shape[axis + 1 :])


def _mode(attributes: Mapping[str, Any]) -> str:
    mode = attributes.get("mode", "")
    return mode.decode() if isinstance(mode, bytes) else str(mode)


def kernel_features(
    kernel: Mapping[str, Any], operand_order: str = "largest_first", family_variants: bool = True
) -> dict[str, Any]:
    """Features of one kernel from catalog-style fields (``inputs``/``inputs_json`` etc.).

    ``operand_order`` (:data:`OPERAND_ORDERS`) says which activation is the first input whose dims the
    features read: with "largest_first" a broadcasting elementwise op's largest operand. ``family_variants``:
    the ``family`` feature is :func:`feature_family`'s (False: the catalog's, as regressors saved before it).

    A shape operand (:func:`is_shape_operand`) counts as a weight whether or not the graph holds it as one:
    the tables' kernels, read from ORT's optimised graphs, have them folded into initializers, while static
    detection may find them computed (Swin V2's window pads), and the two must give the same features.
    """
    inputs = _loads(kernel.get("inputs_json", kernel.get("inputs"))) or []
    outputs = _loads(kernel.get("outputs_json", kernel.get("outputs"))) or []
    attributes = _loads(kernel.get("attributes_json", kernel.get("attributes"))) or {}
    absorbed = _loads(kernel.get("absorbed_ops_json", kernel.get("absorbed_ops"))) or []
    activations, weights, computed_parameter_bytes = _split_inputs(inputs)
    if operand_order == "largest_first" and kernel.get("op_type") in BROADCAST_ELEMENTWISE_OPS:
        activations.sort(key=lambda t: -prod(t["shape"]))  # stable: equal sizes keep the graph's order
    first_in = activations[0]["shape"] if activations else []
    first_out = outputs[0]["shape"] if outputs else []
    kernel_shape = list(attributes.get("kernel_shape", [])) if isinstance(attributes.get("kernel_shape"), list) else []
    strides = list(attributes.get("strides", [])) if isinstance(attributes.get("strides"), list) else []
    flops = float(kernel.get("flops") or 0)
    in_bytes = float(kernel.get("input_bytes") or 0)
    out_bytes = float(kernel.get("output_bytes") or 0)
    precision = _inputs_precision(inputs)
    largest_weight = max(weights, key=lambda t: prod(t["shape"]), default=None)
    group = int(attributes.get("group", 1)) if isinstance(attributes.get("group", 1), int) else 1
    features: dict[str, Any] = {f"in_d{i}": d for i, d in enumerate(_dims(first_in))}
    features |= {f"out_d{i}": d for i, d in enumerate(_dims(first_out))}
    features |= {f"changed_d{i}": int(features[f"in_d{i}"] != features[f"out_d{i}"]) for i in range(MAX_RANK)}
    features |= {"align_in": alignment(first_in), "align_out": alignment(first_out)}
    features |= {
        "in_rank": len(first_in),
        "out_rank": len(first_out),
        "n_activation_inputs": len(activations),
        "in_numel": sum(prod(t["shape"]) for t in activations),
        "out_numel": sum(prod(t["shape"]) for t in outputs),
        "weight_numel": sum(prod(t["shape"]) for t in weights),
        "kernel_h": kernel_shape[0] if kernel_shape else 0,
        "kernel_w": kernel_shape[-1] if kernel_shape else 0,
        "stride_h": strides[0] if strides else 0,
        "stride_w": strides[-1] if strides else 0,
        "group": group,
        "channels_per_group": first_in[1] / group if group > 1 and len(first_in) >= 2 else 0.0,
        "fused_activation": int(bool(attributes.get("activation"))),
        "fused_sum": int(len(activations) > 1 and kernel.get("op_type") in ("Conv", "FusedConv")),
        "log_flops": log1p(flops),
        "log_input_bytes": log1p(in_bytes),
        "log_output_bytes": log1p(out_bytes),
        "log_weight_bytes": log1p(float(kernel.get("weight_bytes") or 0) + computed_parameter_bytes),
        "log_intensity": log1p(flops / max(in_bytes + out_bytes, 1.0)),
        "n_absorbed": len(absorbed),
        "elem_bytes": element_bytes(str(activations[0].get("dtype", "float"))) if activations else 0,
        "weight_elem_bytes": element_bytes(str(largest_weight.get("dtype", "float"))) if largest_weight else 0,
        "precision_fp16": int(precision == "fp16"),
        "precision_int8": int(precision == "int8"),
        "conv_bias": int(kernel.get("op_type") in CONV_OPS and any(len(t["shape"]) == 1 for t in weights)),
        "reduce_matrix_path": int(takes_matrix_reduction(str(kernel.get("op_type")), first_in, first_out, attributes)),
        **dict(zip(("axis_length", "axis_inner"), axis_rows(str(kernel.get("op_type")), first_in, attributes))),
        "family": (
            feature_family(kernel["family"], len(first_in), _mode(attributes)) if family_variants else kernel["family"]
        ),
        "op": f"{kernel.get('domain') or ''}.{kernel.get('op_type')}",
    }
    return features


def feature_frame(
    kernels: pd.DataFrame | list[Mapping[str, Any]],
    load: pd.DataFrame | Mapping[str, float],
    load_fields: list[str],
    operand_order: str = "largest_first",
    family_variants: bool = True,
) -> pd.DataFrame:
    """Kernel features plus one ``load_<field>`` column per load field.

    ``load`` is either one mapping applied to every kernel (prediction) or a frame with one row per
    kernel holding ``bg_<field>`` columns (training rows). ``operand_order`` and ``family_variants`` as in
    :func:`kernel_features`.
    """
    import pandas as pd

    records = kernels.to_dict("records") if isinstance(kernels, pd.DataFrame) else list(kernels)
    frame = pd.DataFrame([kernel_features(k, operand_order, family_variants) for k in records])
    for field in load_fields:
        if isinstance(load, pd.DataFrame):
            frame[f"load_{field}"] = load[f"bg_{field}"].to_numpy(dtype=float)
        else:
            frame[f"load_{field}"] = float(load[field])
    return frame


def numeric_columns(load_fields: list[str]) -> list[str]:
    return [*NUMERIC_FEATURES, *(f"load_{f}" for f in load_fields)]


def as_matrix(
    frame: pd.DataFrame,
    families: list[str],
    ops: list[str],
    load_fields: list[str],
    numeric: Sequence[str] | None = None,
) -> np.ndarray:
    """Numeric features followed by one-hot family and op columns (unknown values: all zero).

    ``numeric`` names the numeric columns in order (default :func:`numeric_columns`): a regressor
    trained before a feature existed asks for the columns it was trained on.
    """
    numeric = frame[list(numeric or numeric_columns(load_fields))].to_numpy(dtype=float)
    family_hot = (frame["family"].to_numpy()[:, None] == np.array(families)[None, :]).astype(float)
    op_hot = (frame["op"].to_numpy()[:, None] == np.array(ops)[None, :]).astype(float)
    return np.hstack([numeric, family_hot, op_hot])


def feature_matrix(
    kernels: Sequence[Mapping[str, Any]],
    loads: Sequence[Mapping[str, float]],
    families: list[str],
    ops: list[str],
    load_fields: list[str],
    numeric: Sequence[str] | None = None,
    operand_order: str = "largest_first",
    family_variants: bool = True,
) -> np.ndarray:
    """The matrix :func:`as_matrix` makes of :func:`feature_frame` for these kernels, without pandas:
    one block of rows per load in ``loads`` (every kernel under the first load, then under the
    second...), so a prediction under several loads computes each kernel's features once.
    ``numeric`` as in :func:`as_matrix` (its ``load_`` columns come after the others), ``operand_order`` and
    ``family_variants`` as in :func:`kernel_features`."""
    names = [n for n in (numeric or numeric_columns(load_fields)) if not n.startswith("load_")]
    features = [kernel_features(k, operand_order, family_variants) for k in kernels]
    shape = np.array([[f[name] for name in names] for f in features], dtype=float).reshape(len(features), len(names))
    family_hot = np.array([f["family"] for f in features], dtype=object)[:, None] == np.array(families)[None, :]
    op_hot = np.array([f["op"] for f in features], dtype=object)[:, None] == np.array(ops)[None, :]
    blocks = []
    for load in loads:
        load_columns = np.tile([float(load[name]) for name in load_fields], (len(features), 1))
        blocks.append(np.hstack([shape, load_columns, family_hot.astype(float), op_hot.astype(float)]))
    return np.vstack(blocks) if blocks else np.zeros((0, len(names) + len(load_fields) + len(families) + len(ops)))
