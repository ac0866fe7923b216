"""Several gpu_run.sh sets scored together (issue 11): each set's timings against its own predictions folder, pooled;
prints markdown by batch size and stress level (MAPE, share within +-10%, median signed error) and the total.

    .venv/bin/python results/cpu-general/pool_sets.py \
        results/cpu-general/gpu-setM=results/cpu-general/gpu-setM/predictions-shipped ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from score_gpu import measured, predicted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", help="SET_FOLDER=PREDICTIONS_FOLDER")
    parser.add_argument("--match", default=None, help="score only models whose file name matches this regex")
    args = parser.parse_args()
    frames = []
    for spec in args.sets:
        set_folder, _, predictions = spec.partition("=")
        if not predictions:
            raise SystemExit(f"pool_sets: error: {spec!r} is not SET_FOLDER=PREDICTIONS_FOLDER")
        frame = measured([Path(set_folder)]).merge(predicted(Path(predictions)), on=["model", "stress_level"])
        frames.append(frame.assign(set=Path(set_folder).name))
    pooled = pd.concat(frames)
    if args.match:
        pooled = pooled[pooled.model.str.contains(args.match)]
    pooled["error_pct"] = (pooled.predicted_ms / pooled.mean_ms - 1) * 100

    def scores(errors: pd.Series) -> pd.Series:
        return pd.Series(
            {
                "cases": len(errors),
                "MAPE %": round(errors.abs().mean(), 1),
                "within 10 %": round((errors.abs() <= 10).mean() * 100, 1),
                "median signed %": round(errors.median(), 1),
            }
        )

    table = pooled.groupby(["batch_size", "stress_level"]).error_pct.apply(scores).unstack()
    print(table.to_markdown())
    print("\n" + pd.DataFrame([{"cases": "all", **scores(pooled.error_pct).to_dict()}]).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
