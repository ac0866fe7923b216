"""Replace the PRelu rows of a CPU tables folder with the same instances timed again on feature-map-like inputs.

ORT's CPU PRelu branches per element, and its kernel files were fed uniform noise until 2026-12-07
(`analysis.kernel_models.SIGN_PATTERN_OPS`). NEW holds exported tables of profiles run since, which time the same
PRelu instances again. Their times are divided by this machine's drift against TABLES (the median ratio of every
other kernel both timed), so the rows stay on TABLES' clock. Writes OUT (a copy of TABLES with those rows replaced)
and prints old and new times per instance.

    .venv/bin/python results/cpu/prelu-feeds/retime_prelu.py results/cpu/tables OUT NEW [NEW ...]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd

KEYS = ["instance_id", "stress_level", "batch_size"]
TIMES = ["mean_ms", "median_ms", "p90_ms", "std_ms", "min_ms"]


def other_kernels(frame: pd.DataFrame) -> pd.Series:
    """Mean time of every kernel that is not a PRelu, by instance, stress level and batch size."""
    return frame[frame.op_type != "PRelu"].groupby(KEYS).mean_ms.mean()


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    tables, out, news = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
    old = pd.read_parquet(tables / "kernel_benchmarks.parquet")
    new = pd.concat([pd.read_parquet(p / "kernel_benchmarks.parquet") for p in news], ignore_index=True)
    new = new[new.status == "ok"]
    ratios = (other_kernels(new) / other_kernels(old)).dropna()
    drift = float(ratios.median())
    retimed = new[new.op_type == "PRelu"].drop_duplicates(KEYS).copy()
    retimed[TIMES] = retimed[TIMES] / drift
    old_prelu = old[old.op_type == "PRelu"]
    missing = set(map(tuple, old_prelu[KEYS].values)) - set(map(tuple, retimed[KEYS].values))
    if missing:
        first = sorted(missing)[:3]
        print(f"hase: error: {len(missing)} PRelu rows of {tables} are not in NEW: {first}", file=sys.stderr)
        return 2
    retimed = retimed.merge(old_prelu[KEYS], on=KEYS)[old.columns]
    if out.resolve() != tables.resolve():
        shutil.copytree(tables, out, dirs_exist_ok=True)
    pd.concat([old[old.op_type != "PRelu"], retimed], ignore_index=True).to_parquet(
        out / "kernel_benchmarks.parquet", index=False
    )
    both = old_prelu.set_index(KEYS).mean_ms.rename("old_ms").to_frame()
    both = both.join(retimed.set_index(KEYS).mean_ms.rename("new_ms"))
    both["new / old"] = both.new_ms / both.old_ms
    print(f"drift against {tables}: {drift:.4f} (median of {len(ratios)} shared timings)\n")
    print(both.round(4).to_markdown())
    print(f"\n{len(retimed)} PRelu rows replaced; median new / old {both['new / old'].median():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
