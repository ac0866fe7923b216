"""The grid's rows scored by a shipped bundle against the same rows held out five ways (folds.sh), by kernel family,
kernel size and batch size: MAPE and share within +-10%. Markdown.

    .venv/bin/python results/gpu-general/dense-conv-rows/compare_held_out.py TABLES SHIPPED_CSV HELD_OUT_CSV

``TABLES``: the rows' tables (for each kernel's family); the CSVs: score_rows.py's ``--csv`` of the shipped bundle on
those rows and folds.sh's ``held-out.csv``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from hase_dagster.learn.reports import error_cell


def comparison(tables: Path, shipped: Path, held_out: Path) -> pd.DataFrame:
    """One row per (family, kernel size, batch size) and totals: each CSV's MAPE (within +-10%)."""
    families = pd.read_parquet(tables / "kernels.parquet").groupby("instance_id")["family"].first()
    keys = ["instance_id", "batch_size", "stress_level"]
    frame = (
        pd.read_csv(shipped)[[*keys, "model", "error_pct"]]
        .rename(columns={"error_pct": "shipped"})
        .merge(pd.read_csv(held_out)[[*keys, "error_pct"]].rename(columns={"error_pct": "held_out"}), on=keys)
    )
    frame["family"] = frame["instance_id"].map(families)
    frame["kernel"] = frame["model"].str.extract(r"_k(\d+)_")[0]
    rows = []
    for (family, kernel, batch), group in frame.groupby(["family", "kernel", "batch_size"]):
        rows.append((family, kernel, batch, len(group), error_cell(group["shipped"]), error_cell(group["held_out"])))
    for family, group in frame.groupby("family"):
        rows.append((family, "all", "all", len(group), error_cell(group["shipped"]), error_cell(group["held_out"])))
    rows.append(("all", "all", "all", len(frame), error_cell(frame["shipped"]), error_cell(frame["held_out"])))
    return pd.DataFrame(rows, columns=["family", "k", "batch", "rows", "shipped", "held out"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path)
    parser.add_argument("shipped", type=Path)
    parser.add_argument("held_out", type=Path)
    args = parser.parse_args()
    print(comparison(args.tables, args.shipped, args.held_out).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
