"""In-graph factors: how a kernel's GPU time inside a whole model compares with its standalone time.

The kernel regressor learns from standalone kernel ONNX files, each timed on the device clock. Inside a
model the same kernel's GPU time differs by kind, and the difference is systematic: on the H100 the GPU
time CUPTI measures for whole networks (training networks and unseen ones alike) is about 0.8x the
standalone prediction for 1x1 convolutions and matrix products and about 1.1x for depthwise ones
(results/gpu-general/graph-factors). A factor per :data:`CATEGORIES` entry, fitted on CUPTI's kernel time
per run of whole networks, scales each kernel's predicted GPU time; the standalone clock's own cost per
kernel (``overhead_ms``) is left unscaled. Without factors (the CPU EP, or no CUPTI data) nothing changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.core.errors import HaseError

if TYPE_CHECKING:
    from hase_dagster.learn.regressor import LatencyRegressor

CATEGORIES: tuple[str, ...] = ("conv_1x1", "conv_kxk", "conv_depthwise", "conv_grouped", "matmul", "other")
CONV_OPS = frozenset({"Conv", "FusedConv", "NhwcConv", "NhwcFusedConv"})
MATMUL_OPS = frozenset({"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger", "QLinearMatMul"})
# The standalone device clock's own share of each kernel's time on the H100 (fitted on the training
# networks against CUPTI: results/gpu-general/gpu-time/README.md); it is not the kernel's work.
STANDALONE_OVERHEAD_MS = 0.00248
# Factors stay within these bounds, and each is pulled toward 1 as strongly as RIDGE files agreeing on 1.
FACTOR_BOUNDS = (0.5, 2.0)
RIDGE = 1.0
GRAPH_FACTORS_FORMAT = "hase-graph-factors"


def kernel_category(kernel: Kernel) -> str:
    """The kind of kernel whose in-graph time one factor describes (one of :data:`CATEGORIES`).

    Convolutions split by their weight: one input channel per group is depthwise, other groups are
    grouped, and a dense one is 1x1 or larger. Matrix products are one category; everything else
    (element-wise, pooling, normalisation, data movement) is ``other``.
    """
    if kernel.op_type in CONV_OPS:
        weight = next((t for t in kernel.inputs if t.name in kernel.weight_names and len(t.shape or ()) >= 3), None)
        group = int(kernel.attributes.get("group", 1) or 1)
        if group > 1:
            per_group = weight.shape[1] if weight is not None else None
            return "conv_depthwise" if per_group == 1 else "conv_grouped"
        shape = kernel.attributes.get("kernel_shape") or (list(weight.shape[2:]) if weight is not None else [])
        return "conv_1x1" if shape and all(int(s) == 1 for s in shape) else "conv_kxk"
    if kernel.op_type in MATMUL_OPS or "MatMul" in kernel.family or kernel.family == "Gemm":
        return "matmul"
    return "other"


@dataclass(frozen=True)
class GraphFactors:
    """In-graph over standalone GPU time per kernel category, and what they were fitted on."""

    factors: dict[str, float]
    overhead_ms: float = STANDALONE_OVERHEAD_MS
    fitted_on: int = 0
    source: str = ""
    scores: dict[str, Any] = field(default_factory=dict)

    def scale(self, category: str, ms: float) -> float:
        """``ms`` (a standalone prediction) as the kernel's in-graph time: its work scaled, the clock's
        own cost per kernel kept."""
        factor = self.factors.get(category, 1.0)
        if ms <= self.overhead_ms:
            return ms
        return self.overhead_ms + factor * (ms - self.overhead_ms)

    def to_json(self) -> dict[str, Any]:
        return {"format": GRAPH_FACTORS_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphFactors:
        if data.get("format") != GRAPH_FACTORS_FORMAT:
            raise HaseError(f"not a graph-factors document (format {data.get('format')!r})")
        factors = {str(k): float(v) for k, v in dict(data["factors"]).items()}
        unknown = set(factors) - set(CATEGORIES)
        if unknown:
            raise HaseError(f"graph factors name unknown kernel categories {sorted(unknown)}")
        low, high = FACTOR_BOUNDS
        outside = {k: v for k, v in factors.items() if not low <= v <= high}
        if outside:
            raise HaseError(f"graph factors outside {FACTOR_BOUNDS}: {outside}")
        return cls(
            factors,
            float(data.get("overhead_ms", STANDALONE_OVERHEAD_MS)),
            int(data.get("fitted_on", 0)),
            str(data.get("source", "")),
            dict(data.get("scores", {})),
        )


def read_graph_factors(path: str | os.PathLike[str]) -> GraphFactors:
    """A graph-factors JSON file (as :func:`write_graph_factors` writes it); a HaseError names what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise HaseError(f"cannot read graph factors {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise HaseError(f"{path} is not a graph-factors document")
    try:
        return GraphFactors.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise HaseError(f"{path} is not a valid graph-factors document: {exc}") from exc


def write_graph_factors(factors: GraphFactors, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(factors.to_json(), indent=1, sort_keys=True) + "\n")
    return path


def category_work_ms(kernels: Sequence[Kernel], predicted_ms: Sequence[float], overhead_ms: float) -> dict[str, float]:
    """Per category, the predicted standalone times of ``kernels`` less the clock's cost per kernel."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for kernel, ms in zip(kernels, predicted_ms, strict=True):
        out[kernel_category(kernel)] += max(ms - overhead_ms, 0.0)
    return out


def fit_graph_factors(
    work_ms: Sequence[Mapping[str, float]],
    gpu_ms: Sequence[float],
    ridge: float = RIDGE,
    overhead_ms: float = STANDALONE_OVERHEAD_MS,
    source: str = "",
) -> GraphFactors:
    """Factors that make each network's summed category work match its measured GPU kernel time.

    Bounded least squares on relative errors (networks of 0.1 to 100 ms weigh alike), each factor
    pulled toward 1 as strongly as ``ridge`` networks that agree with 1; a category no network has
    stays at 1.

    Args:
        work_ms: per network, :func:`category_work_ms` of its predicted kernels.
        gpu_ms: per network, the GPU kernel time per run that CUPTI measured, ms.
        ridge: the pull toward 1, in networks.
        overhead_ms: the clock's cost per kernel that ``work_ms`` left out.
        source: where the measurements came from, kept in the result.

    Returns:
        The fitted factors, with the fit's mean absolute relative error before and after.
    """
    from scipy.optimize import lsq_linear  # fitting only

    if len(work_ms) != len(gpu_ms) or not len(gpu_ms):
        raise HaseError(f"graph factors need networks with GPU times: {len(work_ms)} sums, {len(gpu_ms)} times")
    measured = np.asarray(gpu_ms, dtype=float)
    if np.any(measured <= 0):
        raise HaseError("graph factors need positive GPU kernel times")
    design = np.array([[w.get(c, 0.0) for c in CATEGORIES] for w in work_ms]) / measured[:, None]
    penalty = np.sqrt(ridge) * np.eye(len(CATEGORIES))
    present = design.sum(axis=0) > 0
    low, high = FACTOR_BOUNDS
    fitted = lsq_linear(
        np.vstack([design, penalty]),
        np.concatenate([np.ones(len(measured)), penalty @ np.ones(len(CATEGORIES))]),
        bounds=(low, high),
    ).x
    factors = {c: (float(round(f, 4)) if present[i] else 1.0) for i, (c, f) in enumerate(zip(CATEGORIES, fitted))}
    before = design.sum(axis=1) - 1.0
    after = design @ np.array([factors[c] for c in CATEGORIES]) - 1.0
    scores = {
        "mean_abs_error_pct_before": float(np.mean(np.abs(before)) * 100),
        "mean_abs_error_pct_after": float(np.mean(np.abs(after)) * 100),
        "within_10_pct_before": float(np.mean(np.abs(before) <= 0.10) * 100),
        "within_10_pct_after": float(np.mean(np.abs(after) <= 0.10) * 100),
        "ridge": ridge,
    }
    return GraphFactors(factors, overhead_ms, len(measured), source, scores)


def idle_work_ms(regressor: LatencyRegressor, kernels: Sequence[Kernel], overhead_ms: float) -> dict[str, float]:
    """Per category, the standalone idle mean time ``regressor`` predicts for ``kernels`` (its own
    graph factors not applied) less the clock's cost per kernel; view ops (no kernel in a model) left out."""
    from hase_dagster.learn.predict import VIEW_FAMILIES  # predict imports this module

    kept = [k for k in kernels if k.family not in VIEW_FAMILIES]
    if not kept:
        return dict.fromkeys(CATEGORIES, 0.0)
    idle = dict.fromkeys(regressor.load_fields, 0.0)
    (predicted,) = regressor.predict_kernels([k.to_dict() for k in kept], [idle])
    return category_work_ms(kept, [float(v) for v in predicted["mean_ms"]], overhead_ms)


def read_cupti_times(paths: Sequence[str | os.PathLike[str]]) -> dict[str, float]:
    """GPU kernel time per run by ONNX file name from JSON-lines files of ``gpu_time_study.py`` rows
    (``file``, ``gpu_kernel_ms``); a file's last row wins."""
    out: dict[str, float] = {}
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as exc:
            raise HaseError(f"cannot read {path}: {exc}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                name, gpu_ms = row["file"], row.get("gpu_kernel_ms")
            except (ValueError, KeyError, TypeError) as exc:
                raise HaseError(f"{path}:{number} is not a GPU-time row (file, gpu_kernel_ms): {exc}") from exc
            if gpu_ms:
                out[str(name)] = float(gpu_ms)
    return out
