"""How much faster each network ran on the new device than on the H100 (the same files, timed by gpu_run.sh on
each) against how much faster the calibrated bundle predicts it (its prediction over the source bundle's), by batch
size and stress level. Prints markdown.

    .venv/bin/python results/gpu-general/device-calibration/device_ratio.py results/gpu-general/device-calibration/h200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cpu-general"))
from score_gpu import predicted, timed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="holds setX/timings-h200 and setX/predictions-{h200,h100}")
    parser.add_argument("--sets", default="AD,AE")
    parser.add_argument("--device", default="h200")
    args = parser.parse_args()
    cpu_general = Path(__file__).resolve().parents[2] / "cpu-general"
    frames = []
    for name in args.sets.split(","):
        here = args.folder / f"set{name}"
        new = timed([here / f"timings-{args.device}" / "timings"])
        old = timed([cpu_general / f"gpu-set{name}" / "timings-h100" / "timings"])
        keys = ["model", "batch_size", "stress_level"]
        both = new.merge(old, on=keys, suffixes=("_new", "_h100"))
        calibrated = predicted(here / f"predictions-{args.device}")[["model", "stress_level", "predicted_ms"]]
        source = predicted(here / "predictions-h100")[["model", "stress_level", "predicted_ms"]]
        both = both.merge(calibrated.merge(source, on=["model", "stress_level"], suffixes=("_new", "_h100")))
        frames.append(both)
    cases = pd.concat(frames)
    cases["measured"] = cases.mean_ms_new / cases.mean_ms_h100
    cases["predicted"] = cases.predicted_ms_new / cases.predicted_ms_h100
    for by in (["batch_size", "stress_level"], ["batch_size"]):
        table = cases.groupby(by)[["measured", "predicted"]].median().round(3)
        table["cases"] = cases.groupby(by).size()
        print(table.to_markdown() + "\n")
    print(
        f"{len(cases)} cases; median time ratio measured {cases.measured.median():.3f}, "
        f"predicted {cases.predicted.median():.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
