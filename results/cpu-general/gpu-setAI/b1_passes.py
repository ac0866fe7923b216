"""Batch-1 timings of set AI taken three times on one H200 host (the first pass with batch 16 and 64, two more after):
each file's spread across the passes and the `h200` predictions against each pass and against the median of three.

    .venv/bin/python results/cpu-general/gpu-setAI/b1_passes.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
PASSES = ("timings-h200", "timings-h200-b1-pass1", "timings-h200-b1-pass2")


def batch_one_timings(folder: Path) -> dict[tuple[str, float], float]:
    """(file name, stress level) -> mean ms of every batch-1 file in a time_files.py folder."""
    out = {}
    for path in sorted((folder / "timings").glob("level-*.json")):
        level = float(path.stem.removeprefix("level-"))
        for row in json.loads(path.read_text()):
            name = Path(str(row["model"])).name
            if name.endswith("_b1.onnx") and row["status"] == "ok":
                out[(name, level)] = float(row["mean_ms"])
    return out


def main() -> int:
    passes = [batch_one_timings(HERE / name) for name in PASSES]
    predicted = {}
    for row in json.loads((HERE / "predictions-h200" / "predictions_b1.json").read_text())["predictions"]:
        source = str(row["load_source"])
        level = 0.0 if source.startswith("idle") else float(source.split("=")[1].split()[0])
        predicted[(row["model"], level)] = float(row["predicted_ms"])
    keys = sorted(passes[0])
    spans = [max(p[k] for p in passes) / min(p[k] for p in passes) for k in keys]
    print(f"{len(keys)} batch-1 cases, 3 passes: spread (slowest / fastest) median {statistics.median(spans):.2f},")
    print(f"max {max(spans):.2f}; {sum(s > 1.1 for s in spans)} of {len(keys)} spread more than 10%")
    print()
    print("| timings | MAPE % | within +-10 % | median signed % |")
    print("|---|---|---|---|")
    median = {k: statistics.median(p[k] for p in passes) for k in keys}
    for name, timings in [*zip(PASSES, passes, strict=True), ("median of the three", median)]:
        errors = [100 * (predicted[k] / timings[k] - 1) for k in keys]
        within = 100 * sum(abs(e) <= 10 for e in errors) / len(errors)
        mape = statistics.mean(abs(e) for e in errors)
        print(f"| {name} | {mape:.1f} | {within:.0f} | {statistics.median(errors):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
