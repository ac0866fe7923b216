"""The composition alone, fed measured kernel times: leave one architecture (LOAO) and one family
(LOFO) out, with and without a term. Isolates the composition's error from the kernel regressor's.

    .venv/bin/python results/gpu-general/composition_study.py [--drop TERM ...]   # about 10 s a variant
    .venv/bin/python results/gpu-general/composition_study.py --group-dispatch conv pool normalization

``--group-dispatch`` gives the kernels of the named op groups (``learn.estimators.OP_GROUPS``, or
``elementwise``) a host dispatch time of their own on top of the shared one, in the launch-bound terms
(issue times the cumulative sum of each kernel's dispatch time); each group's extra cost is searched
among :data:`EXTRA_CANDIDATES_MS` on the training models of every fold (a few minutes a variant).

Reads results/gpu-general/tables; prints MAPE, share within +-10% and p90 MAPE, by batch size.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import hase_dagster.learn.predict as composition
from hase_dagster.learn.estimators import OP_GROUPS, op_group
from hase_dagster.learn.timeslice import TimeSlicing
from hase_dagster.learn.training import networks

TABLES = Path(__file__).resolve().parent / "tables"
# The stressor's steady GPU utilisation per stress level (wait_study.json).
UTIL = {0.0: 0.0, 0.25: 24.0, 0.5: 45.0, 0.75: 65.0, 1.0: 95.0}
GROUPS = (*OP_GROUPS, "elementwise")
# A group's host time per kernel on top of the shared dispatch time, ms.
EXTRA_CANDIDATES_MS = (0.0, 0.004, 0.008, 0.016)


@dataclass
class GroupedSums(composition.Sums):
    """Sums whose kernels of some op groups take longer to dispatch than the others.

    ``extra_ms`` is one array shared by every point of a study (indexed by :data:`GROUPS`), so the
    search sets a group's cost once for all of them.
    """

    kernel_groups: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    extra_ms: np.ndarray = field(default_factory=lambda: np.zeros(len(GROUPS)))

    def _dispatch(self, dispatch_ms: float) -> np.ndarray:
        return dispatch_ms + self.extra_ms[self.kernel_groups]

    def launch_shortfall_ms(self, dispatch_ms: float) -> float:
        """GPU time left idle while the host dispatches kernels shorter than their dispatch time."""
        return float(np.maximum(0.0, self._dispatch(dispatch_ms) - np.asarray(self.idle_kernel_ms)).sum())

    def dispatch_stall_ms(self, dispatch_ms: float) -> float:
        """As :func:`composition.pipelined_end_ms`, with kernel k issued once kernels 0..k are dispatched."""
        if not self.idle_kernel_ms:
            return 0.0
        times = np.asarray(self.idle_kernel_ms)
        from_k_on = np.cumsum(times[::-1])[::-1]
        return float(np.max(np.cumsum(self._dispatch(dispatch_ms)) + from_k_on)) - float(times.sum())


def load_points() -> tuple[pd.DataFrame, list[tuple[GroupedSums, float, float]]]:
    """Every measured whole model on the CUDA EP with its sums of measured kernel times."""
    kernels = pd.read_parquet(TABLES / "kernels.parquet")
    kernels = kernels[kernels.ep == "cuda"].sort_values(["variant_id", "kernel_order"])
    bench = pd.read_parquet(TABLES / "kernel_benchmarks.parquet")
    bench = bench[(bench.ep == "cuda") & (bench.status == "ok")]
    times = bench.groupby(["instance_id", "batch_size", "stress_level"]).mean_ms.median()
    files = pd.read_parquet(TABLES / "model_files.parquet")
    models = pd.read_parquet(TABLES / "model_benchmarks.parquet")
    models = models[(models.ep == "cuda") & (models.status == "ok")].reset_index(drop=True)
    # By model name: the zoo grid's files predate families, and a row without one was never left out.
    models["family"] = models.model_name.map(files.dropna(subset=["family"]).groupby("model_name").family.first())
    # The training networks only, as the composition is fitted (learn/training.py): no held-out model
    # (its kernels are timed at idle alone) and no design-space probe (a kernel carrier, no network).
    held_out = set(files.loc[files.held_out.astype(bool), "variant_id"])
    models = networks(models[~models.variant_id.isin(held_out)]).reset_index(drop=True)
    by_variant = {v: g for v, g in kernels.groupby("variant_id")}
    extra = np.zeros(len(GROUPS))
    points = []
    for row in models.itertuples():
        group = by_variant[row.variant_id]
        idle = np.nan_to_num([times.get((i, row.batch_size, 0.0), np.nan) for i in group.instance_id])
        loaded = np.nan_to_num([times.get((i, row.batch_size, row.stress_level), np.nan) for i in group.instance_id])
        view = group.family.isin(composition.VIEW_FAMILIES).to_numpy()
        sums = GroupedSums(
            float(loaded.sum()),
            float(loaded.sum()),
            float(loaded.sum()),
            len(group),
            UTIL.get(row.stress_level, 95.0 * row.stress_level),
            idle_mean_ms=float(idle.sum()),
            view_idle_ms=float(idle[view].sum()),
            view_mean_ms=float(loaded[view].sum()),
            idle_kernel_ms=tuple(idle[~view]),
            time_slicing=TimeSlicing(),
            kernel_groups=np.array([GROUPS.index(op_group(op)) for op in group.op_type[~view]], dtype=int),
            extra_ms=extra,
        )
        points.append((sums, row.mean_ms, row.p90_ms))
    return models, points


def fit_groups(points: list[tuple[GroupedSums, float, float]], free: list[str]) -> composition.Composition:
    """The composition with the extra dispatch cost of each ``free`` group chosen, one group after
    the other, by the mean's squared relative error on ``points`` (the shared extra array is left set)."""
    extra = points[0][0].extra_ms
    extra[:] = 0.0
    measured = np.array([m for _, m, _ in points])
    as_sums: list[tuple[composition.Sums, float, float]] = list(points)

    def error() -> tuple[float, composition.Composition]:
        fitted = composition.Composition.fit(as_sums)
        predicted = np.array([fitted.apply(s)[0] for s, _, _ in points])
        return float(np.mean((predicted / measured - 1) ** 2)), fitted

    best, fitted = error()
    for name in free:
        index, keep = GROUPS.index(name), 0.0
        for value in EXTRA_CANDIDATES_MS[1:]:
            extra[index] = value
            trial, candidate = error()
            if trial < best:
                best, fitted, keep = trial, candidate, value
        extra[index] = keep
    return fitted


def held_out(
    models: pd.DataFrame, points: list[tuple[GroupedSums, float, float]], key: str, free: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Relative errors of the mean and p90 with each value of ``key`` left out of the fit in turn."""
    errors, errors_p90 = np.zeros(len(models)), np.zeros(len(models))
    for group in models[key].unique():
        train = (models[key] != group).to_numpy()
        fitted = fit_groups([p for p, t in zip(points, train) if t], free)
        for i in np.where(~train)[0]:
            mean, p90 = fitted.apply(points[i][0])
            errors[i], errors_p90[i] = mean / points[i][1] - 1, p90 / points[i][2] - 1
    return errors, errors_p90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drop", nargs="*", default=[], help="terms to leave out of the composition")
    parser.add_argument(
        "--group-dispatch", nargs="*", default=[], choices=GROUPS, help="op groups with a dispatch cost of their own"
    )
    args = parser.parse_args()
    composition.MEAN_TERMS = tuple(t for t in composition.MEAN_TERMS if t.name not in args.drop)
    composition.P90_TERMS = tuple(t for t in composition.P90_TERMS if t.name not in args.drop)
    models, points = load_points()
    for name, key in (("LOAO", "model_name"), ("LOFO", "family")):
        errors, errors_p90 = held_out(models, points, key, args.group_dispatch)
        absolute = np.abs(errors)
        by_batch = {
            int(b): round(100 * float(absolute[(models.batch_size == b).to_numpy()].mean()), 1)
            for b in sorted(models.batch_size.unique())
        }
        print(
            f"{name}: MAPE {100 * absolute.mean():.2f}%, within 10% {100 * (absolute < 0.1).mean():.0f}%, "
            f"p90 MAPE {100 * np.abs(errors_p90).mean():.2f}%, by batch {by_batch}"
        )
    if args.group_dispatch:
        fitted = fit_groups(points, args.group_dispatch)
        extra = points[0][0].extra_ms
        costs = {g: round(1000 * (fitted.dispatch_ms + float(extra[GROUPS.index(g)])), 1) for g in GROUPS}
        print(f"all models: dispatch per kernel (us) {costs}")


if __name__ == "__main__":
    main()
