"""The shipped evaluation (`learn.evaluation.evaluate`) of one warehouse with the composition fitted in sample and
cross-fitted (`learn.training.fit_cross_fitted_composition`), on the same regressor.

Both go through the code `make run` runs: `evaluate` fits every held-out predictor's composition the way the
shipped one was fitted. Appends one row per (setting, stress level, fit) to OUT.csv, tagged with RUN, and prints
them.

    .venv/bin/python results/cpu/cross-fit/compare_evaluations.py WAREHOUSE.duckdb RUN OUT.csv
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hase_dagster.learn.evaluation import evaluate
from hase_dagster.learn.training import Predictor, fit_cross_fitted_composition, train_predictor
from warehouse.store import Warehouse

EP = "cpu"
SETTINGS = ("never_seen", "held_out_architecture", "held_out_family", "trained_on_all")


def summarize(cases: pd.DataFrame, run: str, fit: str, seconds: float) -> list[dict[str, object]]:
    """MAPE, share within +-10% and median signed error by setting, at each stress level and overall."""
    rows = []
    for setting in SETTINGS:
        frame = cases[cases["setting"] == setting]
        for level, group in [*frame.groupby("stress_level"), ("all", frame)]:
            error = group["error_pct"]
            rows.append(
                {
                    "run": run,
                    "fit": fit,
                    "setting": setting,
                    "stress_level": level,
                    "cases": len(group),
                    "mape_pct": round(float(error.abs().mean()), 2),
                    "within_10_pct": round(float(np.mean(error.abs() <= 10) * 100), 1),
                    "median_error_pct": round(float(error.median()), 2),
                    "evaluate_s": round(seconds, 1),
                }
            )
    return rows


def main() -> int:
    source, run, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "hase.duckdb"
        shutil.copy(source, copy)  # the run's own file stays untouched
        store = Warehouse(copy)
        in_sample = train_predictor(store, EP)
        regressor = in_sample.regressor
        cross_fitted = Predictor(regressor, fit_cross_fitted_composition(store, EP, regressor))
        rows = []
        for fit, predictor in (("in_sample", in_sample), ("cross_fitted", cross_fitted)):
            start = time.monotonic()
            result = evaluate(store, EP, predictor)
            rows += summarize(result.cases, run, fit, time.monotonic() - start)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, mode="a", header=not out.exists(), index=False)
    overall = frame[frame["stress_level"] == "all"]
    print(overall.drop(columns=["run", "stress_level"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
