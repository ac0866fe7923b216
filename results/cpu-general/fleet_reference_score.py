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
import json
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from host_range_score import ranges  # noqa: E402  (this folder's scorer)
from score_gpu import predicted, timed  # noqa: E402

from hase_dagster.learn.bundles import read_bundle  # noqa: E402


def readings(timings: Path) -> list[float]:
    """Every timing's host loop reading of a gpu_run.sh timings folder."""
    values = []
    for path in sorted((timings / "timings").glob("level-*.json")):
        values += [r["host_loop_ms"] for r in json.loads(path.read_text()) if r.get("host_loop_ms")]
    return values


def scores(frame: pd.DataFrame, column: str) -> dict[str, float]:
    error = (frame[column] / frame.mean_ms - 1).abs()
    signed = (frame[column] / frame.mean_ms - 1).median()
    return {
        "MAPE %": round(error.mean() * 100, 1),
        "within 10 %": round((error <= 0.1).mean() * 100, 1),
        "median signed %": round(signed * 100, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("sets", nargs="+", help="TIMINGS=PREDICTIONS folders")
    args = parser.parse_args()
    composition = read_bundle(args.bundle).predictor.composition
    if composition.host_loop_ms is None:
        parser.error(f"{args.bundle} has no host reference (hase predictor host-reference)")
    pairs = [(Path(t), Path(p)) for t, _, p in (s.partition("=") for s in args.sets)]
    loops = {t: readings(t) for t, _ in pairs}
    frames = []
    for timings, predictions in pairs:
        others = [v for t, values in loops.items() if t != timings for v in values]
        fleet_ms = statistics.median(others)
        frame = timed([timings / "timings"]).merge(predicted(predictions), on=["model", "stress_level"])
        moved = ranges(frame, composition.host_loop_ms, (fleet_ms, fleet_ms))
        frames.append(moved.assign(set=timings.parent.name, fleet_ms=round(fleet_ms, 4), fleet_ms_point=moved.low_ms))
    cases = pd.concat([f.dropna(axis=1, how="all") for f in frames], ignore_index=True)
    reference = composition.host_loop_ms
    print(f"Bundle {args.bundle}: reference {reference} ms; each set's point moved to the others' median\n")
    for by in ("set", ["batch_size", "stress_level"]):
        rows = {}
        for key, group in cases.groupby(by):
            rows[key] = {"cases": len(group)}
            if by == "set":
                rows[key]["others' median ms"] = group.fleet_ms.iloc[0]
            rows[key] |= {f"as predicted {k}": v for k, v in scores(group, "predicted_ms").items()}
            rows[key] |= {f"moved {k}": v for k, v in scores(group, "fleet_ms_point").items()}
        print(pd.DataFrame(rows).T.to_markdown(), end="\n\n")
    total = {"cases": len(cases)}
    total |= {f"as predicted {k}": v for k, v in scores(cases, "predicted_ms").items()}
    total |= {f"moved {k}": v for k, v in scores(cases, "fleet_ms_point").items()}
    print(pd.DataFrame({"all": total}).T.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
