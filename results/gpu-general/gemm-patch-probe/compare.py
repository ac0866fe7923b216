"""Measured (time_grid.py) against predicted (`hase predict --json`) for the probe grid: the kernels' GPU time against
the device clock, the whole run against the host clock, per file; a markdown table and MAPE by kind of layer.

    python3 compare.py TIMINGS.jsonl PREDICTIONS.json [PREDICTIONS.json ...] > report.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from export_grid import flops


def main() -> int:
    measured = pd.DataFrame([json.loads(x) for x in Path(sys.argv[1]).read_text().splitlines()])
    predicted = pd.DataFrame(
        [
            {
                "file": Path(p["model"]).name,
                "kernels_pred_ms": p["sequential_sum_ms"],
                "run_pred_ms": p["predicted_ms"],
                "families": "+".join(k["family"] for k in p["kernels"] if k["family"] not in ("Reshape",)),
            }
            for arg in sys.argv[2:]
            for p in json.loads(Path(arg).read_text())["predictions"]
        ]
    )
    df = measured.merge(predicted, on="file")
    kind = df.file.str.extract(r"^(lin_.*_(?:bias|nobias)|patch)")[0]
    df["kind"] = kind.str.replace(r"_d\d+_r\d+_t\d+", "", regex=True)
    df["tflops"] = df.file.map(flops) / df.device_median_ms / 1e9
    df["kernels_err_pct"] = 100 * (df.kernels_pred_ms / df.device_median_ms - 1)
    df["run_err_pct"] = 100 * (df.run_pred_ms / df.host_mean_ms - 1)
    summary = df.groupby("kind").agg(
        files=("file", "size"),
        kernels_mape=("kernels_err_pct", lambda s: s.abs().mean()),
        kernels_median=("kernels_err_pct", "median"),
        run_mape=("run_err_pct", lambda s: s.abs().mean()),
        run_median=("run_err_pct", "median"),
    )
    print(summary.round(1).to_markdown(), "\n")
    cols = ["file", "families", "device_median_ms", "tflops", "kernels_pred_ms", "kernels_err_pct", "host_mean_ms"]
    cols += ["run_pred_ms", "run_err_pct"]
    print(df.sort_values("file")[cols].round(3).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
