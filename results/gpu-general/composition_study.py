"""The composition alone, fed measured kernel times: leave one architecture (LOAO) and one family
(LOFO) out, with and without a term. Isolates the composition's error from the kernel regressor's.

    .venv/bin/python results/gpu-general/composition_study.py [--drop TERM ...]   # about 2 min a variant

Reads results/gpu-general/tables; prints MAPE, share within +-10% and p90 MAPE, by batch size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

import hase_dagster.learn.predict as composition
from hase_dagster.learn.timeslice import TimeSlicing

TABLES = Path(__file__).resolve().parent / "tables"
# The stressor's steady GPU utilisation per stress level (wait_study.json).
UTIL = {0.0: 0.0, 0.25: 24.0, 0.5: 45.0, 0.75: 65.0, 1.0: 95.0}


def load_points() -> tuple[pd.DataFrame, list[tuple[composition.Sums, float, float]]]:
    kernels = pd.read_parquet(TABLES / "kernels.parquet")
    kernels = kernels[kernels.ep == "cuda"].sort_values(["variant_id", "kernel_order"])
    bench = pd.read_parquet(TABLES / "kernel_benchmarks.parquet")
    bench = bench[(bench.ep == "cuda") & (bench.status == "ok")]
    times = bench.groupby(["instance_id", "batch_size", "stress_level"]).mean_ms.median()
    files = pd.read_parquet(TABLES / "model_files.parquet")[["variant_id", "family"]].drop_duplicates("variant_id")
    models = pd.read_parquet(TABLES / "model_benchmarks.parquet")
    models = models[(models.ep == "cuda") & (models.status == "ok")].merge(files, on="variant_id")
    by_variant = {v: g for v, g in kernels.groupby("variant_id")}
    points = []
    for row in models.itertuples():
        group = by_variant[row.variant_id]
        idle = np.nan_to_num([times.get((i, row.batch_size, 0.0), np.nan) for i in group.instance_id])
        loaded = np.nan_to_num([times.get((i, row.batch_size, row.stress_level), np.nan) for i in group.instance_id])
        view = group.family.isin(composition.VIEW_FAMILIES).to_numpy()
        sums = composition.Sums(
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
        )
        points.append((sums, row.mean_ms, row.p90_ms))
    return models.reset_index(drop=True), points


def held_out(models: pd.DataFrame, points: list, key: str) -> tuple[np.ndarray, np.ndarray]:
    errors, errors_p90 = np.zeros(len(models)), np.zeros(len(models))
    for group in models[key].unique():
        train = (models[key] != group).to_numpy()
        fitted = composition.Composition.fit([p for p, t in zip(points, train) if t])
        for i in np.where(~train)[0]:
            mean, p90 = fitted.apply(points[i][0])
            errors[i], errors_p90[i] = mean / points[i][1] - 1, p90 / points[i][2] - 1
    return errors, errors_p90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drop", nargs="*", default=[], help="terms to leave out of the composition")
    args = parser.parse_args()
    composition.MEAN_TERMS = tuple(t for t in composition.MEAN_TERMS if t.name not in args.drop)
    composition.P90_TERMS = tuple(t for t in composition.P90_TERMS if t.name not in args.drop)
    models, points = load_points()
    for name, key in (("LOAO", "model_name"), ("LOFO", "family")):
        errors, errors_p90 = held_out(models, points, key)
        absolute = np.abs(errors)
        by_batch = {
            int(b): round(100 * float(absolute[(models.batch_size == b).to_numpy()].mean()), 1)
            for b in sorted(models.batch_size.unique())
        }
        print(
            f"{name}: MAPE {100 * absolute.mean():.2f}%, within 10% {100 * (absolute < 0.1).mean():.0f}%, "
            f"p90 MAPE {100 * np.abs(errors_p90).mean():.2f}%, by batch {by_batch}"
        )


if __name__ == "__main__":
    main()
