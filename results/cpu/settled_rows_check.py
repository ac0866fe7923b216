"""What the blocking check `held_out_rows_mape_within_limit` reads on a `make run` warehouse: the held-out kernel rows'
MAPE (median latency, 5-fold as `learn/regressor.py` `train_regressor` scores it, same folds) over all rows and over
the rows whose labels are settled (relative CI of the mean at most 0.10), by stress level, for each kind.

    .venv/bin/python results/cpu/settled_rows_check.py .hase_data/hase.duckdb [--ep cpu]     # 3 min on the 2-core VM
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from hase_dagster.learn.estimators import KINDS
from hase_dagster.learn.features import feature_frame
from hase_dagster.learn.regressor import (
    PRIMARY_TARGET,
    held_out_row_predictions,
    load_fields_for,
    training_rows,
)
from warehouse.store import Warehouse

SETTLED_REL_CI = 0.10


def mape_by_level(predicted: np.ndarray, rows: pd.DataFrame, mask: np.ndarray) -> str:
    """MAPE of the masked rows, overall and by stress level, as one table cell."""
    error = np.abs(predicted[mask] / rows[PRIMARY_TARGET].to_numpy()[mask] - 1) * 100
    levels = rows["stress_level"].to_numpy()[mask]
    parts = [f"{level:.1f}: {error[levels == level].mean():.1f}" for level in sorted(set(levels))]
    return f"{error.mean():.2f} ({mask.sum()}; {', '.join(parts)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("duckdb", type=Path)
    parser.add_argument("--ep", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:  # a copy: a warehouse another process holds stays untouched
        copy = Path(scratch) / "hase.duckdb"
        shutil.copy(args.duckdb, copy)
        rows = training_rows(Warehouse(copy), args.ep)
    load_fields = load_fields_for(args.ep, rows)
    frame = feature_frame(rows, rows, load_fields)
    settled = (rows["rel_ci"] <= SETTLED_REL_CI).to_numpy()
    every = np.ones(len(rows), dtype=bool)
    print(f"{args.duckdb}: {len(rows)} rows, {settled.sum()} with rel_ci <= {SETTLED_REL_CI}")
    print("| kind | all held-out rows: MAPE % (rows; by stress level) | rows with settled labels |")
    print("| --- | --- | --- |")
    for kind in KINDS:  # train_regressor's folds
        held_out = held_out_row_predictions(kind, frame, rows, args.ep, load_fields)[PRIMARY_TARGET]
        print(f"| {kind} | {mape_by_level(held_out, rows, every)} | {mape_by_level(held_out, rows, settled)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
