"""Issue 11: how far the same kernel's time moves between H100 machines (and sessions).

The profile `gpu_retime` timed zoo and random networks at batch 16, idle, on one machine; their kernel
instances (fingerprinted: same op, shapes and attributes) are in the merged tables too, timed on the
machines of earlier runs. Prints, per model family and op family, the median ratio new / old of the
instances' mean times and the time-weighted ratio, and whole-model ratios for the same variants.

    .venv/bin/python results/gpu-general/retime_compare.py [RETIME_TABLES] [MERGED_TABLES]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent


def main(retime: Path, merged: Path) -> None:
    new = pd.read_parquet(retime / "kernel_benchmarks.parquet")
    old = pd.read_parquet(merged / "kernel_benchmarks.parquet")
    key = ["instance_id", "batch_size", "stress_level"]
    new = new[(new.status == "ok") & (new.stress_level == 0.0)].groupby(key).mean_ms.median().rename("new_ms")
    old = old[(old.status == "ok") & (old.stress_level == 0.0)].groupby(key).mean_ms.median().rename("old_ms")
    kernels = pd.read_parquet(retime / "kernels.parquet")
    files = pd.read_parquet(merged / "model_files.parquet")
    family_of = files.dropna(subset=["family"]).groupby("model_name").family.first()
    retimed_files = pd.read_parquet(retime / "model_files.parquet")[["variant_id", "model_name"]]
    owner = kernels.merge(retimed_files, on="variant_id")
    owner["model_family"] = owner.model_name.map(family_of).fillna("zoo")
    owner = owner.groupby("instance_id").agg(model_family=("model_family", "first"), op_family=("family", "first"))
    both = pd.concat([new, old], axis=1, join="inner").reset_index().join(owner, on="instance_id")
    both["ratio"] = both.new_ms / both.old_ms
    print(
        f"{len(both)} kernel instances timed in both; median new/old {both.ratio.median():.3f}, "
        f"time-weighted {both.new_ms.sum() / both.old_ms.sum():.3f}, "
        f"|log ratio| median {np.exp(np.abs(np.log(both.ratio)).median()) - 1:.1%}\n"
    )
    for column in ("model_family", "op_family"):
        table = both.groupby(column).apply(
            lambda d: pd.Series(
                {
                    "instances": len(d),
                    "old_ms": d.old_ms.sum(),
                    "median_ratio": d.ratio.median(),
                    "time_weighted_ratio": d.new_ms.sum() / d.old_ms.sum(),
                }
            ),
            include_groups=False,
        )
        print(table.sort_values("old_ms", ascending=False).head(12).round(3).to_markdown(), "\n")
    models_new = pd.read_parquet(retime / "model_benchmarks.parquet")
    models_old = pd.read_parquet(merged / "model_benchmarks.parquet")
    on = ["variant_id", "stress_level"]
    whole = models_new[on + ["mean_ms"]].merge(models_old[on + ["mean_ms"]], on=on, suffixes=("_new", "_old"))
    whole["ratio"] = whole.mean_ms_new / whole.mean_ms_old
    print(whole.round(3).to_markdown(index=False))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    main(
        args[0] if args else HERE / "runs" / "h100-retime" / "tables",
        args[1] if len(args) > 1 else HERE / "tables",
    )
