"""Whole-model latency from kernel predictions: per-kernel regressor outputs under a given load,
combined over the model's DAG and calibrated to measured whole-model latencies.

Composition: a model's mean (and p90) latency is a bounded linear combination of its kernels'
predicted sums (idle, idle x load, loaded, view ops apart), a per-kernel and a per-run term, fitted
on the zoo's measured models (see :meth:`Sums.design`). Under GPU time-slicing waiting is paid per
model run, not per kernel, so a raw sum of loaded kernel times is far off; the fit learns how much
of each sum counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.learn.features import feature_frame
from hase_dagster.analysis.fusion import VIEW_OP_TYPES
from hase_dagster.analysis.model_dag import build_dag, critical_path
from hase_dagster.learn.regressor import LatencyRegressor


@dataclass
class KernelPrediction:
    order: int
    node_name: str
    family: str
    instance_id: str
    median_ms: float
    mean_ms: float
    p90_ms: float
    fallback: bool


@dataclass
class Sums:
    """What composition needs from one model's kernel predictions under one load."""

    median_ms: float
    mean_ms: float
    p90_ms: float
    kernels: int
    load_util: float  # the device's load field, in %
    idle_mean_ms: float = 0.0  # the same kernels predicted with no background load
    # The part of idle_mean_ms / mean_ms that view ops (VIEW_FAMILIES) make up.
    view_idle_ms: float = 0.0
    view_mean_ms: float = 0.0

    def design(self) -> np.ndarray:
        # Every term grows with the model's time (a constant or per-kernel term overcharged small,
        # many-kernel models on the CPU). Load enters twice: as the loaded kernel sum (CPU
        # time-sharing slows each kernel in proportion) and as a load share of the idle sum (GPU
        # time-slicing: a kernel measured alone waits a whole slice, a model run does not).
        # The kernel count carries a per-kernel term of either sign: host-clocked kernels (the CPU)
        # each include one launch-and-sync overhead that a whole-model run pays once (negative);
        # device-clocked kernels (the GPU) lack the host's dispatch gap between kernels (positive).
        # A non-negative constant is the per-run overhead of a whole model (input/output binding,
        # session dispatch): on the H100 grid it took the zoo from 15.3% to 10.1% MAPE.
        # View ops get a term of their own: timed alone they copy their input (a graph output
        # cannot alias a graph input), inside a model ORT's planner aliases them and no GPU kernel
        # runs (the encoder: 180 of 360 kernels, 1.4 of 5.3 ms of standalone time).
        share = self.load_util / 100.0
        idle = self.idle_mean_ms - self.view_idle_ms
        loaded = self.mean_ms - self.view_mean_ms
        return np.array([idle, share * idle, loaded, self.kernels, 1.0, self.view_idle_ms])


# Ops whose output is a view of their input: ORT's CUDA and CPU kernels for them declare an alias.
VIEW_FAMILIES = VIEW_OP_TYPES | {"Identity"}

# Time terms are non-negative; the kernel-count term (index 3) may take time away or add it; a view
# op (index 5) costs at most its standalone copy (without that bound a zoo whose only views are
# the CNNs' Flatten leaves the term free to explode).
_SIGNED_TERMS = (3,)
_AT_MOST_ONE = (5,)


def _bounds(width: int) -> tuple[list[float], list[float]]:
    lower = [-np.inf if i in _SIGNED_TERMS else 0.0 for i in range(width)]
    upper = [1.0 if i in _AT_MOST_ONE else np.inf for i in range(width)]
    return lower, upper


def _relative_fit(design: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Bounded least squares on relative errors: models span 1 to 300 ms, and a plain fit would
    serve the largest and ignore the smallest."""
    return lsq_linear(design / measured[:, None], np.ones(len(measured)), bounds=_bounds(design.shape[1])).x


@dataclass
class Composition:
    """Bounded least squares from kernel sums to measured model mean and p90 (ms)."""

    mean_coefficients: list[float] | None = None
    p90_coefficients: list[float] | None = None
    fitted_on: int = 0

    @classmethod
    def fit(cls, points: list[tuple[Sums, float, float]]) -> Composition:
        """``points``: (sums, measured mean ms, measured p90 ms). Fewer than 3 points: identity."""
        if len(points) < 3:
            return cls()
        design = np.array([s.design() for s, _, _ in points])
        with_p90 = np.hstack([design, np.array([[s.p90_ms] for s, _, _ in points])])
        mean = _relative_fit(design, np.array([m for _, m, _ in points]))
        p90 = _relative_fit(with_p90, np.array([p for _, _, p in points]))
        return cls(mean.tolist(), p90.tolist(), len(points))

    def apply(self, sums: Sums) -> tuple[float, float]:
        if self.mean_coefficients is None or self.p90_coefficients is None:
            return sums.mean_ms, max(sums.p90_ms, sums.mean_ms)
        design = sums.design()
        # A negative per-kernel term must not drive a prediction below a tenth of the idle sum.
        floor = 0.1 * sums.idle_mean_ms
        mean = max(float(design @ np.array(self.mean_coefficients)), floor)
        p90 = float(np.append(design, sums.p90_ms) @ np.array(self.p90_coefficients))
        return mean, max(p90, mean)


@dataclass
class ModelPrediction:
    model: str
    ep: str
    batch_size: int | None
    load: dict[str, float]
    load_source: str
    predicted_ms: float
    p90_ms: float
    critical_path_ms: float
    sequential_sum_ms: float
    coverage: dict[str, Any]
    kernels: list[KernelPrediction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def predict_kernels(regressor: LatencyRegressor, kernels: list[Kernel], load: dict[str, float]) -> list[KernelPrediction]:
    """Every kernel under ``load``; kernels of a family the regressor never saw are marked fallback
    (their estimate comes from shapes, FLOPs and bytes alone)."""
    if not kernels:
        return []
    records = [k.to_dict() for k in kernels]
    predicted = regressor.predict(feature_frame(records, load, regressor.load_fields))
    return [
        KernelPrediction(
            order=k.order, node_name=k.node_name, family=k.family, instance_id=k.instance_id,
            median_ms=float(predicted["median_ms"][i]), mean_ms=float(predicted["mean_ms"][i]),
            p90_ms=float(predicted["p90_ms"][i]), fallback=not regressor.knows(k.family),
        )
        for i, k in enumerate(kernels)
    ]


def idle_load(regressor: LatencyRegressor, load: dict[str, float]) -> dict[str, float]:
    """``load`` with the device's load field at zero."""
    return {**load, regressor.load_fields[0]: 0.0}


def kernel_sums(predictions: list[KernelPrediction], load_util: float, idle: list[KernelPrediction]) -> Sums:
    return Sums(
        median_ms=sum(p.median_ms for p in predictions),
        mean_ms=sum(p.mean_ms for p in predictions),
        p90_ms=sum(p.p90_ms for p in predictions),
        kernels=len(predictions),
        load_util=load_util,
        idle_mean_ms=sum(p.mean_ms for p in idle),
        view_idle_ms=sum(p.mean_ms for p in idle if p.family in VIEW_FAMILIES),
        view_mean_ms=sum(p.mean_ms for p in predictions if p.family in VIEW_FAMILIES),
    )


def model_sums(regressor: LatencyRegressor, kernels: list[Kernel], load: dict[str, float]) -> tuple[Sums, list[KernelPrediction]]:
    """Kernel predictions under ``load`` and the sums composition needs (with the idle sum)."""
    predictions = predict_kernels(regressor, kernels, load)
    idle = predict_kernels(regressor, kernels, idle_load(regressor, load))
    return kernel_sums(predictions, float(load[regressor.load_fields[0]]), idle), predictions


def predict_model(
    model: str,
    kernels: list[Kernel],
    regressor: LatencyRegressor,
    composition: Composition,
    load: dict[str, float],
    load_source: str,
    batch_size: int | None = None,
) -> ModelPrediction:
    """Predict one model's latency under ``load`` from its kernels."""
    warnings: list[str] = []
    missing = [f for f in regressor.load_fields if f not in load]
    if missing:
        raise ValueError(f"load lacks {missing}, which the regressor needs")
    sums, predictions = model_sums(regressor, kernels, load)
    mean, p90 = composition.apply(sums)
    scale = mean / sums.mean_ms if sums.mean_ms > 0 else 1.0
    by_node = {p.node_name: p.mean_ms for p in predictions}
    dag = build_dag(model, regressor.ep, kernels)
    path_ms, _ = critical_path(dag, lambda node: by_node[node])
    fallback = [p for p in predictions if p.fallback]
    if fallback:
        warnings.append(
            f"{len(fallback)} of {len(predictions)} kernels belong to families without a trained regressor "
            f"({sorted({p.family for p in fallback})}); their times are fallback estimates"
        )
    if batch_size is not None and regressor.batch_sizes and batch_size not in regressor.batch_sizes:
        warnings.append(
            f"batch size {batch_size} was never benchmarked on {regressor.ep} (benchmarked: {regressor.batch_sizes}); "
            "kernel times are extrapolated"
        )
    if composition.mean_coefficients is None:
        warnings.append("no whole-model measurements to calibrate against: predicted_ms is the plain kernel sum")
    return ModelPrediction(
        model=model,
        ep=regressor.ep,
        batch_size=batch_size,
        load=load,
        load_source=load_source,
        predicted_ms=mean,
        p90_ms=p90,
        critical_path_ms=path_ms * scale,
        sequential_sum_ms=sums.mean_ms,
        coverage={
            "kernels": len(predictions),
            "covered": len(predictions) - len(fallback),
            "fallback": len(fallback),
            "fallback_families": sorted({p.family for p in fallback}),
        },
        kernels=predictions,
        warnings=warnings,
    )
