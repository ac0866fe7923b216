"""The CPU composition fitted on out-of-sample kernel sums (cross-fitted) against the in-sample fit.

`learn.training.fit_composition` fits the composition on the training models' kernel sums as predicted by the final
regressor, which saw those very kernels; a new network's sums are out of sample. Here, on a `make run` warehouse:

- never_seen: the shipped regressor with (a) the composition as trained and (b) one fitted on each training
  architecture's sums from a regressor trained without it.
- held_out_architecture: for each architecture A, the regressor without A with (a) the composition fitted on the
  others' in-sample sums (as `evaluate` does) and (b) one fitted on each other architecture B's sums from a regressor
  without A and B (nothing of A seen).

The cross-fitted compositions are `learn.training.fit_cross_fitted_composition`'s (shipped since), which leaves out a
precision only one architecture has (the fp16 / int8 resnet18, `unseen_precision` in the report: their sums from a
regressor that never saw that precision pulled every coefficient to 0.4x when kept). The scored cases are fp32
variants only; the in-sample fits keep every variant, as `evaluate` does.

    .venv/bin/python results/cpu/cross-fit/cross_fit_check.py .hase_data/hase.duckdb OUT.csv
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hase_dagster.learn.predict import Composition, predict_model
from hase_dagster.learn.regressor import LatencyRegressor
from hase_dagster.learn.training import (
    RegressorMemo,
    background_load,
    fit_composition,
    fit_cross_fitted_composition,
    kernels_by_variant,
    measured_models,
    networks,
    train_predictor,
    train_predictor_regressor,
)
from warehouse.store import Warehouse

EP = "cpu"


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "hase.duckdb"
        shutil.copy(sys.argv[1], copy)  # the data directory's file stays untouched
        return compare(Warehouse(copy))


def compare(store: Warehouse) -> int:
    """Fit and score both compositions on ``store``; write the cases to ``sys.argv[2]`` and print the summary."""
    shipped = train_predictor(store, EP)
    kind, factors = shipped.regressor.kind, shipped.regressor.graph_factors
    kernels = kernels_by_variant(store, EP)
    models = measured_models(store, EP)
    models = networks(models[models["variant_id"].isin(kernels)])
    held = models["held_out"].astype(bool)
    trained_all = models[~held]  # what evaluate's held-out predictors fit their composition on
    trained = trained_all[trained_all["precision"] == "fp32"]
    unseen = models[held]
    archs = sorted(trained["architecture"].unique())
    cache: RegressorMemo = {}

    def without(excluded: frozenset[str]) -> LatencyRegressor:
        if excluded not in cache:
            cache[excluded] = train_predictor_regressor(store, EP, kind, factors, excluded)
        return cache[excluded]

    def cross_fitted(excluded: frozenset[str]) -> Composition:
        # The shipped fit: it leaves out the fp16 / int8 variants no other architecture has, as fp32-only did here.
        rows = trained_all[~trained_all["architecture"].isin(excluded)]
        return fit_cross_fitted_composition(store, EP, without(excluded), excluded, models=rows, regressors=cache)

    def in_sample(excluded: frozenset[str]) -> Composition:
        rows = trained_all[~trained_all["architecture"].isin(excluded)]
        return fit_composition(store, EP, without(excluded), models=rows)

    rows: list[dict[str, Any]] = []

    def score(setting: str, frame: pd.DataFrame, regressor: LatencyRegressor, fits: dict[str, Composition]) -> None:
        for row in frame.to_dict("records"):
            variant = row["variant_id"]
            case = {"setting": setting, "variant": variant, "level": float(row["stress_level"])}
            case["measured"] = row["mean_ms"]
            load = background_load(row)
            for name, composition in fits.items():
                prediction = predict_model(
                    variant, kernels[variant], regressor, composition, load, "", row["batch_size"]
                )
                case[name] = prediction.predicted_ms
            rows.append(case)

    score(
        "never_seen",
        unseen,
        shipped.regressor,
        {"in_sample": shipped.composition, "cross_fitted": cross_fitted(frozenset())},
    )
    for a in archs:
        excluded = frozenset({a})
        fits = {"in_sample": in_sample(excluded), "cross_fitted": cross_fitted(excluded)}
        score("held_out_architecture", trained[trained["architecture"] == a], without(excluded), fits)
    cases = pd.DataFrame(rows)
    cases.to_csv(sys.argv[2], index=False)
    for (setting, level), group in cases.groupby(["setting", "level"]):
        print(setting, level, summary(group))
    for setting, group in cases.groupby("setting"):
        print(setting, "all", summary(group))
    return 0


def summary(group: pd.DataFrame) -> str:
    """MAPE, share within +-10% and median signed error of both fits."""
    parts = []
    for name in ("in_sample", "cross_fitted"):
        error = (group[name] / group["measured"] - 1) * 100
        within = np.mean(error.abs() <= 10) * 100
        parts.append(f"{name} {error.abs().mean():.1f}% ({within:.0f}% within +-10%, median {error.median():+.1f}%)")
    return f"n {len(group)}: " + "; ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
