"""Gather a remeasure folder's partitions (``remeasure_models.py``) into an exported ``model_benchmarks``
table that ``hase merge-tables`` takes, keeping the models ``--known`` tables already hold (the others
have no model files or kernels there).

    .venv/bin/python results/gpu-general/never-seen-2/collect.py results/gpu-general/never-seen-2/m3 \
        results/gpu-general/runs/h100-m3/tables --known results/gpu-general/tables
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def collect(folder: Path, known: Path | None) -> pd.DataFrame:
    """Every partition of ``folder/remeasure``, less the models ``known`` lacks (when given)."""
    parts = sorted((folder / "remeasure").glob("model_benchmarks_*.parquet"))
    if not parts:
        raise ValueError(f"{folder}/remeasure holds no model_benchmarks_*.parquet partition")
    rows = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    if known is not None:
        files = pd.read_parquet(known / "model_files.parquet")
        rows = rows[rows.variant_id.isin(files.variant_id)]
    return rows  # no precision column: merge-tables reads a row without one as fp32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--known", type=Path)
    args = parser.parse_args()
    try:
        rows = collect(args.folder, args.known)
    except (OSError, ValueError) as exc:
        print(f"hase: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(args.out / "model_benchmarks.parquet", index=False)
    print(f"{len(rows)} model rows ({rows.variant_id.nunique()} models) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
