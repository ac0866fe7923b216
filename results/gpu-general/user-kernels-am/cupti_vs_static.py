"""A bundle's device-free prediction of each network against CUPTI's GPU kernel time and the settled wall time of the
same file (``cupti/gpu_time.jsonl`` and ``cupti/wall.jsonl`` from ``user-kernels/cupti_run.sh``). Prints markdown.

    .venv/bin/python results/gpu-general/user-kernels-am/cupti_vs_static.py results/gpu-general/user-kernels-am/cupti \
        /tmp/nf --bundle h200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from hase_dagster.learn.bundles import load_bundle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cupti", type=Path, help="folder with gpu_time.jsonl and wall.jsonl")
    parser.add_argument("files", type=Path, help="folder with the same ONNX files")
    parser.add_argument("--bundle", default="h200")
    args = parser.parse_args()
    gpu = {r["file"]: r for r in map(json.loads, (args.cupti / "gpu_time.jsonl").read_text().splitlines())}
    wall = {r["file"]: r for r in map(json.loads, (args.cupti / "wall.jsonl").read_text().splitlines())}
    bundle = load_bundle(args.bundle)
    rows = []
    for name, timing in sorted(gpu.items()):
        path = args.files / name
        if not path.exists():
            continue
        batch = int(name.rsplit("_b", 1)[1].removesuffix(".onnx"))
        prediction = bundle.predict([path], [batch], ["idle"])[0]
        kernel_sum = sum(k.mean_ms for k in prediction.kernels)
        measured_wall = wall.get(name, {}).get("wall_mean_ms")
        model_error = (prediction.predicted_ms / measured_wall - 1) * 100 if measured_wall else None
        rows.append(
            {
                "file": name,
                "kernels predicted / CUPTI per run": f"{len(prediction.kernels)} / {timing['gpu_kernels_per_run']:.0f}",
                "CUPTI GPU ms": round(timing["gpu_kernel_ms"], 3),
                "predicted kernel sum ms": round(kernel_sum, 3),
                "kernels error %": round((kernel_sum / timing["gpu_kernel_ms"] - 1) * 100, 1),
                "wall ms": round(measured_wall, 3) if measured_wall else None,
                "predicted ms": round(prediction.predicted_ms, 3),
                "model error %": round(model_error, 1) if model_error is not None else None,
            }
        )
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
