"""The loaded/idle ratio at stress 1.0 of the timed sets' long networks (idle > 4 ms), measured and predicted,
by quartile of the network's mean kernel time: does the time-slicing wait depend on how long the kernels are?

    for s in D E F G H I; do for b in 16 64; do .venv/bin/hase predict --predictor results/bundles/h100 \\
      --batch-size $b --load idle,level=1.0 --top 0 --json /tmp/gpu$s/*_b$b.onnx > DIR/${s}_b$b.json; done; done
    .venv/bin/python results/gpu-general/loaded_ratio_by_kernel.py DIR D E F G H I
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

SETS = Path(__file__).resolve().parents[1] / "cpu-general"
sys.path.insert(0, str(SETS))

import score_gpu  # noqa: E402


def long_networks(predictions: Path, sets: list[str], longer_than_ms: float = 4.0) -> pd.DataFrame:
    """One row per long network and batch: measured and predicted ratio, the error at stress 1.0, kernel stats."""
    rows = []
    for name in sets:
        timed = score_gpu.measured([SETS / f"gpu-set{name}"])
        measured = dict(zip(zip(timed.model, timed.stress_level), timed.mean_ms))
        for path in sorted(predictions.glob(f"{name}_b*.json")):
            by_load = {(r["model"], 0.0 if r["load_source"].startswith("idle") else 1.0): r
                       for r in json.loads(path.read_text())["predictions"]}  # fmt: skip
            for (model, level), idle in by_load.items():
                loaded = by_load.get((model, 1.0))
                idle_ms, loaded_ms = measured.get((model, 0.0)), measured.get((model, 1.0))
                if level or loaded is None or idle_ms is None or loaded_ms is None or idle_ms <= longer_than_ms:
                    continue
                kernels = idle["kernels"]
                rows.append({
                    "set": name, "model": model, "measured_ratio": loaded_ms / idle_ms,
                    "predicted_ratio": loaded["predicted_ms"] / idle["predicted_ms"],
                    "error_at_1": loaded["predicted_ms"] / loaded_ms - 1,
                    "mean_kernel_us": 1000 * sum(k["mean_ms"] for k in kernels) / len(kernels),
                })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path)
    parser.add_argument("sets", nargs="+")
    args = parser.parse_args()
    frame = long_networks(args.predictions, args.sets)
    frame["mean kernel (us)"] = pd.qcut(frame.mean_kernel_us, 4)
    table = frame.groupby("mean kernel (us)", observed=True).agg(
        cases=("model", "size"), measured_ratio=("measured_ratio", "median"),
        predicted_ratio=("predicted_ratio", "median"), median_error_at_1=("error_at_1", "median"),
    )  # fmt: skip
    print(f"{len(frame)} long networks (idle > 4 ms) at batch 16/64; medians by quartile of the mean kernel time:\n")
    table.index = table.index.astype(str)
    print(table.round(3).to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
