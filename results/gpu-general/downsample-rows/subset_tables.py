"""Copy exported tables keeping (``--keep``) or dropping (``--drop``) the models whose variant id matches a regex:
``kernels`` by variant, ``kernel_benchmarks`` and ``kernel_models`` by the instances the kept variants use, the
model tables by variant. For held-out folds of a probe grid (``folds.sh``).

    .venv/bin/python results/gpu-general/downsample-rows/subset_tables.py SRC DST (--keep | --drop) REGEX
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--keep")
    mode.add_argument("--drop")
    args = parser.parse_args()
    kernels = pd.read_parquet(args.source / "kernels.parquet")
    matches = kernels["variant_id"].str.contains(args.keep or args.drop)
    kept = kernels[matches if args.keep else ~matches]
    instances = set(kept["instance_id"])
    variants = set(kept["variant_id"])
    args.out.mkdir(parents=True, exist_ok=True)
    kept.to_parquet(args.out / "kernels.parquet")
    for name in ("kernel_benchmarks", "kernel_models"):
        table = pd.read_parquet(args.source / f"{name}.parquet")
        table[table["instance_id"].isin(instances)].to_parquet(args.out / f"{name}.parquet")
    for name in ("model_files", "model_benchmarks"):
        table = pd.read_parquet(args.source / f"{name}.parquet")
        column = next((c for c in ("variant_id", "model_id") if c in table.columns), None)
        (table[table[column].isin(variants)] if column else table.iloc[0:0]).to_parquet(args.out / f"{name}.parquet")
    print(f"{args.out}: {len(variants)} variants, {len(instances)} kernel instances")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
