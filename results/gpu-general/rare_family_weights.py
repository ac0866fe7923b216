"""Tried, not shipped: XGBoost with the bundle's settings on the H100 tables, rare kernel families weighted up,
scored 5-fold by row: every row, Conv, MatMul_Add, and the generic pads (channels-last, under 100 GB/s).

    .venv/bin/python results/gpu-general/rare_family_weights.py > results/gpu-general/rare_family_weights.md  # 4 min
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from xgboost import XGBRegressor

from hase_dagster.learn.features import PRECISION_FEATURES, as_matrix, feature_frame, numeric_columns
from hase_dagster.learn.regressor import load_fields_for

TABLES = Path(__file__).resolve().parent / "tables"


def main() -> int:
    k = pd.read_parquet(TABLES / "kernel_benchmarks.parquet")
    rows = k[(k.status == "ok") & (k.mean_ms > 0)].reset_index(drop=True)
    load_fields = load_fields_for("cuda", rows)
    frame = feature_frame(rows, rows, load_fields)
    numeric = [c for c in numeric_columns(load_fields) if c not in PRECISION_FEATURES]
    x = as_matrix(frame, sorted(frame.family.unique()), sorted(frame.op.unique()), load_fields, numeric)
    y = np.log(rows.mean_ms.to_numpy())
    path = rows.family + frame[[f"changed_d{i}" for i in range(4)]].astype(str).agg("".join, axis=1)
    weights = {
        "none": np.ones(len(rows)),
        "family^-0.5": rows.family.map(rows.family.value_counts()).to_numpy() ** -0.5,
        "family x changed dims^-0.5": path.map(path.value_counts()).to_numpy() ** -0.5,
    }
    fold = np.random.default_rng(0).integers(0, 5, len(rows))
    rate = (rows.input_bytes + rows.output_bytes) / rows.mean_ms / 1e6  # GB/s
    generic = ((rows.family == "Pad") & (rate < 100)).to_numpy()
    print("| weights | all rows | time-weighted | Conv | MatMul_Add | generic pads, held-out / measured (median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, w in weights.items():
        w = w / w.mean()
        held = np.zeros(len(rows))
        for f in range(5):
            model = XGBRegressor(
                n_estimators=800, max_depth=5, learning_rate=0.03, subsample=0.8, colsample_bytree=0.8,
                n_jobs=2, random_state=0,
            )  # fmt: skip
            model.fit(x[fold != f], y[fold != f], sample_weight=w[fold != f])
            held[fold == f] = model.predict(x[fold == f])
        ratio = np.exp(held - y)
        error = np.abs(ratio - 1)
        by_family = pd.Series(error).groupby(rows.family).mean()
        print(
            f"| {name} | {100 * error.mean():.1f}% | {100 * np.average(error, weights=rows.mean_ms):.1f}% | "
            f"{100 * by_family['Conv']:.1f}% | {100 * by_family['MatMul_Add']:.1f}% | "
            f"{np.median(ratio[generic]):.2f} ({generic.sum()} rows) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
