"""A bundle's kernel predictions against measured kernel rows (an exported run's kernel_benchmarks), by batch size
and stress level (MAPE, median signed error, time-weighted error), and by family at the largest batch idle. Each
level's load is the bundle's own load table (what ``hase predict --load level=X`` uses).

    .venv/bin/python results/gpu-general/image-io-base/kernel_rows_check.py BUNDLE TABLES_DIR > REPORT.md
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from hase_dagster.learn.bundles import load_bundle


def main() -> int:
    if len(sys.argv) != 3:
        raise SystemExit("kernel_rows_check: error: usage: kernel_rows_check.py BUNDLE TABLES_DIR")
    bundle = load_bundle(sys.argv[1])
    rows = pd.read_parquet(f"{sys.argv[2]}/kernel_benchmarks.parquet")
    rows = rows[rows.status == "ok"]
    regressor = bundle.predictor.regressor
    by_level, by_family = [], None
    for (batch, level), group in rows.groupby(["batch_size", "stress_level"]):
        predicted = np.asarray(
            regressor.predict_kernels(group.to_dict("records"), [bundle.levels[float(level)]])[0]["mean_ms"]
        )
        error = (predicted / group.mean_ms.to_numpy() - 1) * 100
        by_level.append({
            "batch": batch, "stress": level, "rows": len(group), "MAPE %": round(float(np.mean(np.abs(error))), 1),
            "median signed %": round(float(np.median(error)), 1),
            "time-weighted %": round(float(np.abs(predicted - group.mean_ms).sum() / group.mean_ms.sum() * 100), 1),
        })  # fmt: skip
        if level == 0.0 and batch == rows.batch_size.max():
            by_family = group.assign(error=np.abs(error)).groupby("family").error.agg(["count", "mean"]).round(1)
    print(f"Bundle `{sys.argv[1]}` ({bundle.document['created']}) on `{sys.argv[2]}`\n")
    print(pd.DataFrame(by_level).to_markdown(index=False))
    if by_family is not None:
        print(f"\nMAPE % by family, batch {rows.batch_size.max()} idle:\n")
        print(by_family.rename(columns={"count": "rows", "mean": "MAPE %"}).to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
