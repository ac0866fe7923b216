"""The regressor-kind comparison `make run` does (latency_regressor), timed with the RandomForest at N trees, on the
committed `make run` tables with the CPU reference rows: seconds, the kind chosen, and each kind's (held-out rows MAPE,
held-out architectures MAPE). Why `Forest` has 100 trees (2026-11-27, 2-core VM): 200 -> 89.1 s, 100 -> 56.3 s, the
same choice.

    .venv/bin/python results/cpu/reference-rows/forest_trees.py 100
"""

import sys
import tempfile
import time
from pathlib import Path

import hase_dagster.learn.estimators as e
import hase_dagster.learn.regressor as r
from hase_dagster.learn.reference_rows import refresh_reference_rows
from hase_dagster.learn.reports import import_tables

n = int(sys.argv[1])
orig = e.Forest.__init__


def init(self, n_estimators=n):
    orig(self, n_estimators)


e.Forest.__init__ = init
with tempfile.TemporaryDirectory() as tmp:
    store = import_tables("results/cpu/reference-rows/makerun-tables-2026-11-27", Path(tmp) / "s.duckdb")
    refresh_reference_rows(store, "cpu", "results/cpu/tables", Path(tmp) / "r.duckdb")
    rows = r.training_rows(store, "cpu")
s = time.time()
m = r.train_regressor(rows.reset_index(drop=True), "cpu")
el = time.time() - s
c = m.metrics["comparison"]
print(
    n,
    "trees",
    round(el, 1),
    "s; best",
    m.metrics["best"],
    {
        k: (
            round(v["held_out_rows"]["mape"], 2),
            round(v["held_out_architectures"].get("overall", {}).get("mape", float("nan")), 2),
        )
        for k, v in c.items()
    },
)
