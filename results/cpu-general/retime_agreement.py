"""How far two timings of the same files on one kind of GPU agree, and how a set's predictions score against each and
against their mean (issue 11: the floor a prediction can be checked to). Both folders hold time_files.py's
``level-*.json`` (gpu_run.sh's ``timings/``), made by the same command in different leases.

    .venv/bin/python results/cpu-general/retime_agreement.py FIRST_TIMINGS SECOND_TIMINGS [--predictions PRED]

Prints markdown: by batch size x stress level, the mean absolute difference of the second timing from the first, its
median sign and the share within +-10% (and with ``--predictions``, the predictions' MAPE and share within +-10%
against the first, the second and the two timings' geometric mean).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from score_gpu import predicted, timed  # this script's folder

from hase_dagster.learn.reports import error_cell


def agreement(first: Path, second: Path, predictions: Path | None = None) -> pd.DataFrame:
    """One row per file and stress level timed ok in both: ``first_ms``, ``second_ms``, ``difference_pct`` (second
    against first), ``mean_ms`` (their geometric mean) and, with predictions, ``predicted_ms``."""
    keys = ["model", "batch_size", "stress_level"]
    frame = (
        timed([first])[[*keys, "mean_ms"]]
        .rename(columns={"mean_ms": "first_ms"})
        .merge(timed([second])[[*keys, "mean_ms"]].rename(columns={"mean_ms": "second_ms"}), on=keys)
    )
    frame["difference_pct"] = (frame["second_ms"] / frame["first_ms"] - 1) * 100
    frame["mean_ms"] = np.sqrt(frame["first_ms"] * frame["second_ms"])
    if predictions is not None:
        frame = frame.merge(
            predicted(predictions)[["model", "stress_level", "predicted_ms"]], on=["model", "stress_level"]
        )
    return frame


def report(frame: pd.DataFrame) -> str:
    """Markdown by batch size x stress level and overall."""
    has_predictions = "predicted_ms" in frame

    def row(group: pd.DataFrame) -> pd.Series:
        cells = {
            "cases": len(group),
            "second vs first: mean abs (within 10%)": error_cell(group["difference_pct"]),
            "median signed": f"{group['difference_pct'].median():+.1f}%",
        }
        if has_predictions:
            for column in ("first_ms", "second_ms", "mean_ms"):
                errors = (group["predicted_ms"] / group[column] - 1) * 100
                cells[f"predicted vs {column.removesuffix('_ms')}"] = error_cell(errors)
        return pd.Series(cells)

    by_setting = frame.groupby(["batch_size", "stress_level"]).apply(row, include_groups=False)
    overall = pd.DataFrame([row(frame)], index=["all"])
    return by_setting.to_markdown() + "\n\n" + overall.to_markdown() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--predictions", type=Path, default=None)
    args = parser.parse_args()
    print(report(agreement(args.first, args.second, args.predictions)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
