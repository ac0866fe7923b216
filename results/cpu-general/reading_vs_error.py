"""How far a set's prediction errors follow the host loop read beside each timing, batch by batch and load by load.

For each (batch size, stress level) it prints the correlation and the least-squares slope between
``log(reading / reference)`` and ``log(measured / predicted)``: a slope near 1 means the whole miss is the host's
speed (what ``hase predict --host-reading`` assumes at idle), near 0 that the reading says nothing about it.

    .venv/bin/python results/cpu-general/reading_vs_error.py results/cpu-general/gpu-setAN/predictions-h200 \
        results/cpu-general/gpu-setAN/timings-h200 --host-reference 0.6647
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from score_gpu import measured, predicted  # this folder's script, beside this one


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path)
    parser.add_argument("timings", type=Path, help="a folder holding timings/level-*.json with host_loop_ms")
    parser.add_argument("--host-reference", type=float, required=True, help="ms: the bundle's host reference")
    args = parser.parse_args()
    frame = measured([args.timings]).merge(predicted(args.predictions), on=["model", "stress_level"])
    frame = frame.dropna(subset=["host_loop_ms"])
    if frame.empty:
        parser.error("no timing in this folder carries host_loop_ms")
    frame["log_reading"] = np.log(frame["host_loop_ms"] / args.host_reference)
    frame["log_miss"] = np.log(frame["mean_ms"] / frame["predicted_ms"])
    rows = []
    for (batch, level), group in frame.groupby(["batch_size", "stress_level"]):
        if len(group) < 3:
            continue
        rows.append(
            {
                "batch": batch,
                "stress": level,
                "cases": len(group),
                "reading range ms": f"{group.host_loop_ms.min():.3f}-{group.host_loop_ms.max():.3f}",
                "correlation": round(float(np.corrcoef(group.log_reading, group.log_miss)[0, 1]), 2),
                "slope": round(float(np.polyfit(group.log_reading, group.log_miss, 1)[0]), 2),
            }
        )
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
