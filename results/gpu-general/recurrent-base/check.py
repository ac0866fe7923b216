"""How well the H100 kernel regressor's trees, a per-step model (``xgboost_recurrent_base``) and a log-linear
per-step model predict LSTM/GRU kernels whose shape they never saw: the recurrent kernels' shapes (op, steps,
input, hidden, directions) in four folds; each fold's rows (every batch and level) predicted by a regressor trained
on every other row of the tables. Prints markdown.

    .venv/bin/python results/gpu-general/recurrent-base/check.py results/gpu-general/tables > REPORT.md
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from hase_dagster.learn.features import feature_frame
from hase_dagster.learn.regressor import _train, load_fields_for, training_rows
from hase_dagster.learn.reports import import_tables

RECURRENT = ("LSTM", "GRU")


def shapes(rows: pd.DataFrame) -> pd.DataFrame:
    def dim(text: str, tensor: int, axis: int) -> int:
        return int(json.loads(text)[tensor]["shape"][axis])

    return pd.DataFrame(
        {
            "steps": rows.inputs_json.map(lambda s: dim(s, 0, 0) * dim(s, 1, 0)),  # sequence x directions
            "batch": rows.inputs_json.map(lambda s: dim(s, 0, 1)),
            "inputs": rows.inputs_json.map(lambda s: dim(s, 0, 2)),
            "hidden": rows.inputs_json.map(lambda s: dim(s, 2, -1)),
            "lstm": (rows.op_type == "LSTM").astype(float),
            "util": rows["bg_DCGM_FI_DEV_GPU_UTIL"] / 100.0,
        },
        index=rows.index,
    )


def log_linear_design(s: pd.DataFrame) -> np.ndarray:
    return np.c_[np.ones(len(s)), np.log(s.steps), np.log(s.hidden), np.log(s.batch), s.util, np.log(s.inputs), s.lstm]


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        store = import_tables(sys.argv[1], Path(scratch) / "w.duckdb")
        rows = training_rows(store, "cuda").reset_index(drop=True)
    recurrent = rows.op_type.isin(RECURRENT)
    s = shapes(rows[recurrent])
    key = rows.loc[recurrent, "op_type"] + s.steps.astype(str) + s.inputs.astype(str) + s.hidden.astype(str)
    names = sorted(key.unique())
    fold_of = {name: i % 4 for i, name in enumerate(np.random.default_rng(0).permutation(names))}
    fields = load_fields_for("cuda", rows)
    measured = rows.loc[recurrent, "mean_ms"].to_numpy()
    trees, based, linear = np.zeros(recurrent.sum()), np.zeros(recurrent.sum()), np.zeros(recurrent.sum())
    folds = key.map(fold_of).to_numpy()
    for fold in range(4):
        out = rows.index[recurrent][folds == fold]
        train = rows.drop(index=out)
        regressor = _train("xgboost", feature_frame(train, train, fields), train, "cuda", fields, ("mean_ms",))
        trees[folds == fold] = regressor.predict(feature_frame(rows.loc[out], rows.loc[out], fields))["mean_ms"]
        regressor = _train(
            "xgboost_recurrent_base", feature_frame(train, train, fields), train, "cuda", fields, ("mean_ms",)
        )
        based[folds == fold] = regressor.predict(feature_frame(rows.loc[out], rows.loc[out], fields))["mean_ms"]
        kept = train[train.op_type.isin(RECURRENT)]
        coef, *_ = np.linalg.lstsq(log_linear_design(shapes(kept)), np.log(kept.mean_ms), rcond=None)
        linear[folds == fold] = np.exp(log_linear_design(s[folds == fold]) @ coef)
    print(f"# LSTM/GRU kernels, one shape out (4 folds of {len(names)} shapes, {recurrent.sum()} rows)\n")
    print("| predictor | MAPE | within +-10% | within +-25% | median signed |")
    print("|---|---|---|---|---|")
    for name, predicted in (
        ("kernel regressor (xgboost)", trees),
        ("a per-step model (xgboost_recurrent_base)", based),
        ("log-linear in log steps, units, batch", linear),
    ):
        error = predicted / measured - 1
        print(
            f"| {name} | {100 * np.mean(np.abs(error)):.1f}% | {100 * np.mean(np.abs(error) <= 0.1):.0f}% | "
            f"{100 * np.mean(np.abs(error) <= 0.25):.0f}% | {100 * np.median(error):+.1f}% |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
