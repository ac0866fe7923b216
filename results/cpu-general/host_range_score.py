"""How often a blind set's measured mean falls in its prediction's host range (``ModelPrediction.host_range_ms``).

The range is what the prediction becomes on the bundle's host's fast and slow states (``learn.host_speed.host_range``:
the 10th and 90th percentiles of the loop readings its composition's reference came from). Each case's range is
rebuilt from the committed prediction (``predicted_ms``, ``gpu_busy_share``, ``idle_predicted_ms``) and the bundle's
reference and range, so sets predicted before the bundle carried the range are scored as the bundle predicts now.

    .venv/bin/python results/cpu-general/host_range_score.py results/bundles/h200 \\
        results/cpu-general/gpu-setAQ/timings-h200=results/cpu-general/gpu-setAQ/predictions-h200 ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from score_gpu import idle_predicted, predicted, timed  # noqa: E402  (this folder's scorer)

from hase_dagster.learn.bundles import read_bundle  # noqa: E402
from hase_dagster.learn.host_speed import host_range, near_range  # noqa: E402
from hase_dagster.learn.predict import ModelPrediction  # noqa: E402


def ranges(frame: pd.DataFrame, reference_ms: float, loop_range_ms: tuple[float, float]) -> pd.DataFrame:
    """``frame`` (measured and predicted cases) with each case's ``low_ms`` and ``high_ms``."""
    idle_ms = idle_predicted(frame)
    spans = [
        host_range(
            ModelPrediction(model, "cuda", None, {}, "", ms, ms, ms, ms, {}, gpu_busy_share=busy, idle_predicted_ms=i),
            reference_ms,
            loop_range_ms,
        )
        for model, ms, busy, i in zip(frame.model, frame.predicted_ms, frame.gpu_busy_share, idle_ms, strict=True)
    ]
    return frame.assign(low_ms=[s[0] for s in spans], high_ms=[s[1] for s in spans])  # type: ignore[index]


def summary(frame: pd.DataFrame) -> dict[str, float]:
    point = (frame.predicted_ms / frame.mean_ms - 1).abs()
    inside = (frame.low_ms <= frame.mean_ms) & (frame.mean_ms <= frame.high_ms)
    near = near_range(frame.mean_ms, frame.low_ms, frame.high_ms)
    return {
        "cases": len(frame),
        "point MAPE %": round(point.mean() * 100, 1),
        "point within 10 %": round((point <= 0.1).mean() * 100, 1),
        "in the range %": round(inside.mean() * 100, 1),
        "range within 10 %": round(near.mean() * 100, 1),
        "median width %": round(((frame.high_ms / frame.low_ms) - 1).median() * 100, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, help="the bundle whose host reference and range build the ranges")
    parser.add_argument("sets", nargs="+", help="TIMINGS=PREDICTIONS folders (gpu_run.sh work folder, predict_sets.sh)")
    args = parser.parse_args()
    composition = read_bundle(args.bundle).predictor.composition
    if composition.host_loop_ms is None or composition.host_loop_range_ms is None:
        parser.error(f"{args.bundle} has no host reference with a range (hase predictor host-reference)")
    frames = []
    for pair in args.sets:
        timings, _, predictions = pair.partition("=")
        frame = timed([Path(timings) / "timings"]).merge(predicted(Path(predictions)), on=["model", "stress_level"])
        name = Path(timings).parent.name if Path(timings).name.startswith("timings") else timings
        frames.append(ranges(frame, composition.host_loop_ms, composition.host_loop_range_ms).assign(set=name))
    cases = pd.concat([f.dropna(axis=1, how="all") for f in frames], ignore_index=True)
    reference, (fast, slow) = composition.host_loop_ms, composition.host_loop_range_ms
    print(f"Bundle {args.bundle}: host reference {reference} ms, range {fast}-{slow} ms\n")
    for by in (["batch_size", "stress_level"], "set"):
        table = pd.DataFrame({key: summary(group) for key, group in cases.groupby(by)}).T
        print(table.to_markdown(), end="\n\n")
    print(pd.DataFrame({"all": summary(cases)}).T.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
