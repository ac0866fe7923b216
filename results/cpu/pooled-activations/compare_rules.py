"""The shipped training and evaluation of one warehouse under family rules 1 and 2 (`learn.features.FAMILY_RULES`:
rules 2 pool a convolution's fused ReLU6 with its ReLU, `POOLED_ACTIVATIONS`), the composition cross-fitted as the cpu
profile fits it. Appends one row per (setting, stress level, rules) to OUT.csv, tagged with RUN, and prints them.

    .venv/bin/python results/cpu/pooled-activations/compare_rules.py WAREHOUSE.duckdb RUN OUT.csv

It runs at commit 187b9fa, the experiment's code. The rules were reverted after it (README.md), and later code has no
``FAMILY_RULES``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cross-fit"))
from compare_evaluations import summarize  # noqa: E402

from hase_dagster.learn import estimators, features  # noqa: E402
from hase_dagster.learn.evaluation import evaluate  # noqa: E402
from hase_dagster.learn.training import train_predictor  # noqa: E402
from warehouse.store import Warehouse  # noqa: E402

EP = "cpu"


def main() -> int:
    source, run, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "hase.duckdb"
        shutil.copy(source, copy)  # the run's own file stays untouched
        store = Warehouse(copy)
        for rules in (1, 2):
            # Both modules read the constant when a layout or a feature row is made.
            features.FAMILY_RULES = estimators.FAMILY_RULES = rules
            start = time.monotonic()
            predictor = train_predictor(store, EP, cross_fit=True)
            assert predictor.regressor.layout.family_variants == rules
            result = evaluate(store, EP, predictor)
            rows += summarize(result.cases, run, f"rules_{rules}", time.monotonic() - start)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, mode="a", header=not out.exists(), index=False)
    print(frame[frame["stress_level"] == "all"].drop(columns=["run", "stress_level"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
