"""Kernel rows of exported tables against a bundle's kernel predictions: each ``kernel_benchmarks`` row predicted at
its stress level's load (the background the bundle's own benchmarks measured at that level, as `hase predict --load
level=X` reads it), its mean time against the measured mean. Markdown by batch size x stress level and by groups.

    .venv/bin/python results/gpu-general/downsample-rows/score_rows.py TABLES BUNDLE [--only REGEX] [--group REGEX]
        [--family NAME]

``--only`` keeps rows whose model names (``kernels``' variant ids) match, ``--family`` the rows of one kernel
family; ``--group`` groups the rows by the regex's first capture on the model name (default: the kernel size,
``_k(\\d+)_``); ``--csv`` writes the rows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from hase_dagster.learn.bundles import read_bundle


def scored_rows(tables: Path, bundle_path: Path) -> pd.DataFrame:
    """The tables' kernel benchmark rows with ``predicted_ms`` (the bundle's mean) and ``error_pct``."""
    bundle = read_bundle(bundle_path)
    regressor = bundle.predictor.regressor
    rows = pd.read_parquet(tables / "kernel_benchmarks.parquet")
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    names = pd.read_parquet(tables / "kernels.parquet").groupby("instance_id")["variant_id"].first()
    rows["model"] = rows["instance_id"].map(names).fillna("")
    predicted = np.zeros(len(rows))
    for level, at in rows.groupby("stress_level").groups.items():
        kernels = rows.loc[at].to_dict("records")
        load, _ = bundle.load_for(f"level={float(level)}")
        predicted[np.asarray(at)] = regressor.predict_kernels(kernels, [load])[0]["mean_ms"]
    rows["predicted_ms"] = predicted
    rows["error_pct"] = (rows["predicted_ms"] / rows["mean_ms"] - 1) * 100
    return rows


def summary(errors: pd.Series) -> pd.Series:
    return pd.Series(
        {
            "rows": len(errors),
            "MAPE %": round(errors.abs().mean(), 1),
            "within 10 %": round((errors.abs() <= 10).mean() * 100, 1),
            "median signed %": round(errors.median(), 1),
            "worst %": round(errors.loc[errors.abs().idxmax()], 1) if len(errors) else np.nan,
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--only", default=None)
    parser.add_argument("--group", default=r"_k(\d+)_")
    parser.add_argument("--family", default=None, help="keep the rows of this kernel family (e.g. Conv)")
    parser.add_argument("--csv", type=Path, default=None, help="also write the scored rows here")
    args = parser.parse_args()
    rows = scored_rows(args.tables, args.bundle)
    if args.only:
        rows = rows[rows["model"].str.contains(args.only)]
    if args.family:
        rows = rows[rows["family"] == args.family]
    if args.csv:
        columns = ["model", "instance_id", "batch_size", "stress_level", "mean_ms", "predicted_ms", "error_pct"]
        rows[columns].to_csv(args.csv, index=False)
    print(f"{args.bundle} on {args.tables}: {len(rows)} kernel rows\n")
    print(rows.groupby(["batch_size", "stress_level"])["error_pct"].apply(summary).unstack().to_markdown(), "\n")
    group = rows["model"].str.extract(args.group)[0].fillna("other")
    print(rows.groupby([group, "batch_size"])["error_pct"].apply(summary).unstack().to_markdown(), "\n")
    print(pd.DataFrame([summary(rows["error_pct"])]).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
