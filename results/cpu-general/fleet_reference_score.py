"""Blind sets scored with the point moved to the fleet's typical host state, leave one set out.

The `h200` bundle's reference (0.6647 ms) is one lease's median loop reading; the leases that timed the blind sets
read medians of 0.65-0.99 ms (each timing carries ``host_loop_ms``). For each set, the point is moved to the median
reading of every *other* set's timings (``learn.host_speed.host_range`` with a one-point range: only the host-bound
share moves), so no set's own readings or errors choose its point. Sets without readings (AK, AL) get the median of
all sets that have them.

    .venv/bin/python results/cpu-general/fleet_reference_score.py results/bundles/h200 \\
        results/cpu-general/gpu-setAM/timings-h200=results/cpu-general/gpu-setAM/predictions-h200 ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from host_range_score import ranges  # noqa: E402  (this folder's scorer)
from score_gpu import predicted, timed  # noqa: E402

from hase_dagster.learn.bundles import read_bundle  # noqa: E402


def scores(frame: pd.DataFrame) -> dict[str, float]:
    """The cases, then MAPE, share within +-10% and median signed error of the point as predicted and as moved."""
    row: dict[str, float] = {"cases": len(frame)}
    for name, column in (("as predicted", "predicted_ms"), ("moved", "fleet_ms_point")):
        error = frame[column] / frame.mean_ms - 1
        row[f"{name} MAPE %"] = round(error.abs().mean() * 100, 1)
        row[f"{name} within 10 %"] = round((error.abs() <= 0.1).mean() * 100, 1)
        row[f"{name} median signed %"] = round(error.median() * 100, 1)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("sets", nargs="+", help="TIMINGS=PREDICTIONS folders")
    args = parser.parse_args()
    composition = read_bundle(args.bundle).predictor.composition
    if composition.host_loop_ms is None:
        parser.error(f"{args.bundle} has no host reference (hase predictor host-reference)")
    pairs = [(Path(t), Path(p)) for t, _, p in (s.partition("=") for s in args.sets)]
    timings_of = {t: timed([t / "timings"]) for t, _ in pairs}  # each set's timings, read once
    frames = []
    for timings, predictions in pairs:
        others = [v for t, frame in timings_of.items() if t != timings for v in frame.host_loop_ms.dropna()]
        fleet_ms = statistics.median(others)
        frame = timings_of[timings].merge(predicted(predictions), on=["model", "stress_level"])
        moved = ranges(frame, composition.host_loop_ms, (fleet_ms, fleet_ms))
        frames.append(moved.assign(set=timings.parent.name, fleet_ms=round(fleet_ms, 4), fleet_ms_point=moved.low_ms))
    cases = pd.concat([f.dropna(axis=1, how="all") for f in frames], ignore_index=True)
    reference = composition.host_loop_ms
    print(f"Bundle {args.bundle}: reference {reference} ms; each set's point moved to the others' median\n")
    for by in ("set", ["batch_size", "stress_level"]):
        rows = {}
        for key, group in cases.groupby(by):
            median = {"others' median ms": group.fleet_ms.iloc[0]} if by == "set" else {}
            row = scores(group)
            rows[key] = {"cases": row.pop("cases"), **median, **row}
        print(pd.DataFrame(rows).T.to_markdown(), end="\n\n")
    print(pd.DataFrame({"all": scores(cases)}).T.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
