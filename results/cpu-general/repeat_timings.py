"""How far a set's own timings repeat, beside how far its predictions land (issue 11): a level of a gpu_run.sh
set timed a second time on the same machine, minutes later. A second timing "predicting" the first is the
most any predictor could score against one timing on that host; the predictions are scored against each timing
and against their geometric mean. Prints markdown by batch size and stress level.

    .venv/bin/python results/cpu-general/repeat_timings.py results/cpu-general/gpu-setM \
        results/cpu-general/gpu-setM/timings-repeat results/cpu-general/gpu-setM/predictions-shipped
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
    parser.add_argument("second", type=Path, help="folder of level-*.json timed again")
    parser.add_argument("predictions", type=Path, help="folder of predictions_b*.json")
    args = parser.parse_args()
    first = measured([args.first])
    second = timed([args.second])[["model", "stress_level", "mean_ms"]]
    frame = first.merge(second, on=["model", "stress_level"], suffixes=("", "_again"))
    frame = frame.merge(predicted(args.predictions), on=["model", "stress_level"])
    if frame.empty:
        raise SystemExit("repeat_timings: error: no model and level is in all three folders")
    frame["both_ms"] = np.sqrt(frame.mean_ms * frame.mean_ms_again)
    rows = []
    for (level, batch), group in [
        *frame.groupby(["stress_level", "batch_size"]),
        *[((lv, "all"), g) for lv, g in frame.groupby("stress_level")],
    ]:
        again = agreement(group.mean_ms_again, group.mean_ms)
        rows.append(
            {
                "stress": level,
                "batch": batch,
                "cases": len(group),
                "second vs first: MAPE %": again[0],
                "within 10 %": again[1],
                "median second / first": round(float((group.mean_ms_again / group.mean_ms).median()), 3),
                "prediction vs first": scored(group.predicted_ms, group.mean_ms),
                "vs second": scored(group.predicted_ms, group.mean_ms_again),
                "vs both (geometric mean)": scored(group.predicted_ms, group.both_ms),
            }
        )
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
