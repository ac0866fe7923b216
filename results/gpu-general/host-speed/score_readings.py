"""Score idle predictions against timings taken with host loop readings, as they are and at each window's reading.

    .venv/bin/python results/gpu-general/host-speed/score_readings.py READINGS.json PREDICTIONS_DIR [--reference MS]
        [--gain K] [--folds]

PREDICTIONS_DIR holds ``predictions_bB.json`` (``results/cpu-general/predict_sets.sh``); each window of READINGS is
scored at idle without the reading and at it (``hase_dagster.learn.host_speed``, the reference by default the median of
READINGS' windows). ``--folds`` fits the gain on a 0.25 grid on one family (file-name prefix) and scores the others.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from hase_dagster.learn.host_speed import HOST_SHARE_GAIN, host_bound_share


def idle_predictions(folder: Path) -> dict[str, dict]:
    """Each file's idle prediction in ``folder``'s ``predictions_b*.json``."""
    found: dict[str, dict] = {}
    for path in sorted(folder.glob("predictions_b*.json")):
        for row in json.loads(path.read_text())["predictions"]:
            if row["load_source"].startswith("idle"):
                found[row["model"]] = row
    return found


def errors(windows: list[dict], predicted: dict[str, dict], reference: float, gain: float) -> np.ndarray:
    """Signed relative errors (%) of the predictions at each window's reading (gain 0: as they are)."""
    out = []
    for window in windows:
        row = predicted[window["model"]]
        share = host_bound_share(row["gpu_busy_share"], gain)
        factor = 1.0 + share * (window["loop_mean_ms"] / reference - 1.0)
        out.append((row["predicted_ms"] * factor - window["mean_ms"]) / window["mean_ms"] * 100)
    return np.array(out)


def summary(values: np.ndarray) -> str:
    return f"{np.abs(values).mean():.1f}% MAPE, {(np.abs(values) <= 10).mean() * 100:.0f}% within +-10%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("readings", type=Path)
    parser.add_argument("predictions", type=Path)
    parser.add_argument("--reference", type=float, default=None, help="ms (default: the readings' median)")
    parser.add_argument("--gain", type=float, default=HOST_SHARE_GAIN)
    parser.add_argument("--folds", action="store_true", help="fit the gain on one family, score the others")
    args = parser.parse_args()
    windows = json.loads(args.readings.read_text())
    predicted = idle_predictions(args.predictions)
    reference = args.reference or statistics.median(w["loop_mean_ms"] for w in windows)
    print(f"{len(windows)} windows of {len({w['model'] for w in windows})} files, reference {reference:.4f} ms")
    print(f"- as predicted: {summary(errors(windows, predicted, reference, 0.0))}")
    print(f"- at the readings (gain {args.gain}): {summary(errors(windows, predicted, reference, args.gain))}")
    if args.folds:
        grid = np.arange(0.0, 4.01, 0.25)
        families = sorted({w["model"].split("_")[0] for w in windows})
        for family in families:
            train = [w for w in windows if w["model"].startswith(family + "_")]
            test = [w for w in windows if not w["model"].startswith(family + "_")]
            best = min(grid, key=lambda k: np.abs(errors(train, predicted, reference, k)).mean())
            as_is, one, fitted = (summary(errors(test, predicted, reference, k)) for k in (0.0, 1.0, best))
            print(f"- gain fitted on {family} ({best}), the rest: as predicted {as_is}; gain 1 {one}; fitted {fitted}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
