"""The projection rows timed on an H200 as the H100 would time them: each kernel benchmark's times divided by the
H200/H100 speed ratio of the ``h200`` bundle's calibration (learned from 1,891 kernel timings both devices made,
cross-validated error 2.1%; ``results/gpu-general/device-calibration``). The ratio is a function of the H100 time, so
each row's H100 time is solved for by a few fixed-point steps (t100 = t200 / ratio(t100)).

    .venv/bin/python results/gpu-general/projection-rows/h100_equivalent.py \
        results/gpu-general/projection-rows/h200/tables /tmp/projection-h100eq --bundle results/bundles/h200 \
        [--families MatMul]

Writes the five tables with the converted times (kernel_benchmarks' ``device`` reads
``NVIDIA H200 as H100 80GB HBM3``) and prints the median ratio by family.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from hase_dagster.learn.bundles import read_bundle
from hase_dagster.learn.reference_rows import TIME_COLUMNS

STEPS = 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--bundle", type=Path, default=Path("results/bundles/h200"))
    parser.add_argument("--families", default=None, help="comma-separated: keep only these kernel families' rows")
    args = parser.parse_args()
    bundle = read_bundle(args.bundle)
    calibration = bundle.predictor.regressor.device_calibration
    if calibration is None:
        raise SystemExit(f"{args.bundle} carries no device calibration")
    rows = pd.read_parquet(args.tables / "kernel_benchmarks.parquet")
    if args.families:
        rows = rows[rows["family"].isin(args.families.split(","))].reset_index(drop=True)
    records = rows.to_dict("records")
    measured = rows["mean_ms"].to_numpy(float)
    # The ratio reads the load as the source device's stress level; the rows know theirs.
    level_load = dict(calibration.level_loads)
    ratio = np.ones(len(rows))
    for level in sorted(rows["stress_level"].unique()):
        at = (rows["stress_level"] == level).to_numpy()
        kernels = [r for r, keep in zip(records, at, strict=True) if keep]
        h100 = measured[at].copy()
        for _ in range(STEPS):
            step = calibration.ratios(kernels, [h100], [level_load[float(level)]])[0]
            h100 = measured[at] / step
        ratio[at] = step
    for column in TIME_COLUMNS:
        if column in rows:
            rows[column] = rows[column].astype(float) / ratio
    rows["device"] = f"{calibration.device} as {calibration.source_device}"
    args.out.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(args.out / "kernel_benchmarks.parquet")
    for name in ("kernels", "kernel_models", "model_files", "model_benchmarks"):
        shutil.copyfile(args.tables / f"{name}.parquet", args.out / f"{name}.parquet")
    summary = pd.DataFrame({"family": rows["family"], "stress": rows["stress_level"], "ratio": ratio})
    print(summary.groupby(["family", "stress"])["ratio"].describe()[["count", "min", "50%", "max"]].round(3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
