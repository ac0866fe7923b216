"""In sample: bundles' predictions of the h100 tables' Softmax and LayerNormalization rows, by whether the kernel runs
along the last axis and by its rows' length (``learn.features.axis_rows``), every stress level. Prints markdown.

    .venv/bin/python results/gpu-general/axis_rows_check.py BUNDLE [BUNDLE ...] > results/gpu-general/axis-rows.md
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd

from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.features import axis_rows

TABLES = "results/gpu-general/tables"
SHORT_ROWS = 32  # elements along the axis


def main() -> int:
    if len(sys.argv) < 2:
        raise SystemExit("axis_rows_check: error: usage: axis_rows_check.py BUNDLE [BUNDLE ...]")
    rows = pd.read_parquet(f"{TABLES}/kernel_benchmarks.parquet")
    rows = rows[(rows.status == "ok") & rows.op_type.isin(["Softmax", "LayerNormalization"])].reset_index(drop=True)
    shapes = rows.inputs_json.map(lambda s: json.loads(s)[0]["shape"])
    attributes = rows.attributes_json.map(json.loads)
    length, inner = zip(*(axis_rows(op, s, a) for op, s, a in zip(rows.op_type, shapes, attributes)))
    rows["axis"] = np.where(np.array(inner) == 1, "last", "other")
    rows["rows"] = np.where(np.array(length) <= SHORT_ROWS, f"up to {SHORT_ROWS}", f"over {SHORT_ROWS}")
    table = rows.groupby(["op_type", "axis", "rows"]).size().rename("kernel rows").to_frame()
    for path in sys.argv[1:]:
        bundle = load_bundle(path)
        predicted = np.empty(len(rows))
        for level, group in rows.groupby("stress_level"):
            regressor, load = bundle.predictor.regressor, [bundle.levels[float(level)]]
            predicted[group.index] = regressor.predict_kernels(group.to_dict("records"), load)[0]["mean_ms"]
        error = pd.Series((predicted / rows.mean_ms.to_numpy() - 1) * 100)
        grouped = error.groupby([rows.op_type, rows.axis, rows.rows])
        table[f"{bundle.document['created'][:16]}: median / MAPE %"] = [
            f"{m:+.1f} / {a:.1f}" for m, a in zip(grouped.median(), grouped.apply(lambda e: e.abs().mean()))
        ]
    print(f"In sample on `{TABLES}` (every batch size and stress level):\n")
    print(table.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
