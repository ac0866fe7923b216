"""Where the whole-model misses are: the share within +-10% and the mean signed error by batch size and stress
level, pooled over the timed sets given, for one predictions folder name.

    .venv/bin/python results/gpu-general/within_by_cell.py predictions-windows F G H I
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

SETS = Path(__file__).resolve().parents[1] / "cpu-general"
sys.path.insert(0, str(SETS))

import score_gpu  # noqa: E402


def cases(predictions: str, sets: list[str]) -> pd.DataFrame:
    """One row per timed case: set, batch, stress level, signed error in % (score_gpu's join of a set's
    timings and one of its prediction folders)."""
    frames = []
    for name in sets:
        folder = SETS / f"gpu-set{name}"
        frame = score_gpu.measured([folder]).merge(
            score_gpu.predicted(folder / predictions), on=["model", "stress_level"]
        )
        frames.append(pd.DataFrame({
            "set": name, "batch": frame.batch_size, "stress": frame.stress_level,
            "error_pct": 100 * (frame.predicted_ms / frame.mean_ms - 1),
        }))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions")
    parser.add_argument("sets", nargs="+")
    args = parser.parse_args()
    frame = cases(args.predictions, args.sets)
    frame["within_10"] = frame.error_pct.abs() <= 10
    print(f"{len(frame)} cases, {100 * frame.within_10.mean():.1f}% within +-10%\n")
    print("Within +-10% (%), batch x stress:\n")
    print((100 * frame.pivot_table(index="batch", columns="stress", values="within_10")).round(0).to_markdown())
    print("\nMean signed error (%), batch x stress:\n")
    print(frame.pivot_table(index="batch", columns="stress", values="error_pct").round(1).to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
