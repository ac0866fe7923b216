"""How well the speed ratio between two machines, learned from the zoo kernels both timed, carries to
kernels only design-space probes use (what `reference_tables` scales): the median and the time-weighted
absolute error of the scaled reference time against this machine's own time, for no scaling, one median
ratio, and the calibration `hase_dagster.learn.reference_rows` fits.

    .venv/bin/python results/cpu/reference-rows/calibration_transfer.py LOCAL_TABLES REFERENCE_TABLES
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from hase_dagster.learn.reference_rows import fit_calibration, shared_timings
from hase_dagster.learn.reports import import_tables

PROBE_ONLY = """SELECT instance_id FROM kernels k JOIN model_files f USING (variant_id)
                GROUP BY 1 HAVING bool_and(f.family = 'design_space')"""


def errors(pairs: pd.DataFrame, log_ratio: np.ndarray) -> str:
    error = np.abs(np.exp(pairs["log_ratio"].to_numpy() - log_ratio) - 1)
    weight = pairs["mean_ms"].to_numpy()
    signed = np.exp(pairs["log_ratio"].to_numpy() - log_ratio) - 1
    return (
        f"{np.median(error) * 100:.1f}% | {np.sum(error * weight) / weight.sum() * 100:.1f}% | "
        f"{np.sum(signed * weight) / weight.sum() * 100:+.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("local", type=Path, help="this machine's exported tables")
    parser.add_argument("reference", type=Path, help="the other machine's exported tables")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        local = import_tables(args.local, Path(tmp) / "local.duckdb")
        reference = import_tables(args.reference, Path(tmp) / "reference.duckdb")
        pairs = shared_timings(
            local.query("SELECT * FROM kernel_benchmarks"), reference.query("SELECT * FROM kernel_benchmarks")
        )
        probe_only = set(reference.query(PROBE_ONLY)["instance_id"])
    is_probe = pairs["instance_id"].isin(probe_only)
    zoo, probes = pairs[~is_probe], pairs[is_probe]
    calibration = fit_calibration(zoo)
    print(f"shared timings: {len(pairs)}; fitted on the zoo's {len(zoo)}, tested on the probes' {len(probes)}")
    print(f"median ratio (zoo kernels): {calibration.median_ratio:.3f}\n")
    print("| scaling | median abs error | time-weighted abs error | time-weighted signed error |")
    print("| --- | --- | --- | --- |")
    print(f"| none | {errors(probes, np.zeros(len(probes)))} |")
    print(f"| one median ratio | {errors(probes, np.full(len(probes), np.log(calibration.median_ratio)))} |")
    print(f"| `fit_calibration` | {errors(probes, np.log(calibration.ratios(probes)))} |")


if __name__ == "__main__":
    main()
