"""How far a set's own timings repeat, beside how far its predictions land (issue 11): a level of a gpu_run.sh
set timed again (once or more) on the same machine, minutes later. A repeat timing "predicting" the first is the
most any predictor could score against one timing on that host; the predictions are scored against the first
timing, the first repeat, and the geometric mean of all timings (the median of them with three or more). Also
prints, with two or more repeats, how many of all the timings lie within +-10% of their file's median. Prints
markdown by batch size and stress level.

    .venv/bin/python results/cpu-general/repeat_timings.py results/cpu-general/gpu-setM \
        results/cpu-general/gpu-setM/timings-repeat results/cpu-general/gpu-setM/predictions-shipped
    .venv/bin/python results/cpu-general/repeat_timings.py results/cpu-general/gpu-setAA/timings-h100 \
        results/cpu-general/gpu-setAA/b1-repeats/pass{1,2,3} results/cpu-general/gpu-setAA/predictions-shipped
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from score_gpu import measured, predicted, timed


def agreement(estimate: pd.Series, truth: pd.Series) -> tuple[float, float]:
    """(MAPE %, share within +-10 % in %) of ``estimate`` against ``truth``."""
    error = (estimate / truth - 1).abs() * 100
    return round(float(error.mean()), 1), round(float((error <= 10).mean() * 100))


def scored(estimate: pd.Series, truth: pd.Series) -> str:
    """``agreement`` as "MAPE% (within%)"."""
    mape, within = agreement(estimate, truth)
    return f"{mape:.1f}% ({within:.0f}%)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="gpu_run.sh work folder (its timings/ are the first timing)")
    parser.add_argument("again", type=Path, nargs="+", help="folders of level-*.json timed again")
    parser.add_argument("predictions", type=Path, help="folder of predictions_b*.json")
    args = parser.parse_args()
    frame = measured([args.first])
    repeats = [f"mean_ms_{i}" for i in range(len(args.again))]
    for column, folder in zip(repeats, args.again):
        again = timed([folder])[["model", "stress_level", "mean_ms"]].rename(columns={"mean_ms": column})
        frame = frame.merge(again, on=["model", "stress_level"])
    frame = frame.merge(predicted(args.predictions), on=["model", "stress_level"])
    if frame.empty:
        raise SystemExit("repeat_timings: error: no model and level is in every folder")
    timings = frame[["mean_ms", *repeats]]
    frame["all_ms"] = timings.median(axis=1) if timings.shape[1] >= 3 else np.sqrt(timings.prod(axis=1))
    rows = []
    for (level, batch), group in [
        *frame.groupby(["stress_level", "batch_size"]),
        *[((lv, "all"), g) for lv, g in frame.groupby("stress_level")],
    ]:
        again = agreement(group[repeats[0]], group.mean_ms)
        row = {
            "stress": level,
            "batch": batch,
            "cases": len(group),
            "repeat vs first: MAPE %": again[0],
            "within 10 %": again[1],
            "median repeat / first": round(float((group[repeats[0]] / group.mean_ms).median()), 3),
        }
        if len(repeats) >= 2:
            spread = group[["mean_ms", *repeats]]
            ratio = spread.max(axis=1) / spread.min(axis=1)
            row["largest / smallest timing"] = f"{ratio.min():.2f}-{ratio.max():.2f}"
            row["timings within 10 % of their median %"] = round(
                float(((spread.div(group.all_ms, axis=0) - 1).abs() <= 0.10).to_numpy().mean() * 100)
            )
        row |= {
            "prediction vs first": scored(group.predicted_ms, group.mean_ms),
            "vs first repeat": scored(group.predicted_ms, group[repeats[0]]),
            "vs all (median or geometric mean)": scored(group.predicted_ms, group.all_ms),
        }
        rows.append(row)
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
