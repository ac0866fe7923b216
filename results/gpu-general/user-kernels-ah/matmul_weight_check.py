"""Bias-free projections (a MatMul whose second operand is a weight: ``x @ W``, ``nn.Linear(bias=False)``) timed
standalone at idle against a bundle's regressor, as the MatMul family and as the MatMul_Add one (a projection with a
bias, the nearest family with weights). No MatMul row of the H100 tables has a weight operand (all 120 are products
of two activations, attention's), so the trees answer these from attention products. Prints markdown.

    .venv/bin/python results/gpu-general/user-kernels-ah/matmul_weight_check.py \
        results/gpu-general/user-kernels-ah/tables results/gpu-general/user-kernels-ah2/tables \
        --bundle results/bundles/h200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
from proxy_check import idle_standalone_ms, standalone_predictor  # this script's folder

from hase_dagster.analysis.catalog import kernel_from_dict
from hase_dagster.learn.predict import predict_kernels
from hase_dagster.learn.training import kernel_from_row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path, nargs="+")
    parser.add_argument("--bundle", type=Path, default=Path("results/bundles/h200"))
    args = parser.parse_args()
    predictor, load = standalone_predictor(args.bundle)
    regressor = predictor.regressor
    rows = []
    for folder in args.tables:
        kernels = pd.read_parquet(folder / "kernels.parquet")
        measured = idle_standalone_ms(folder)
        products = kernels[kernels.family == "MatMul"].drop_duplicates(["instance_id", "batch_size"])
        for record in products.to_dict("records"):
            inputs = json.loads(record["inputs_json"])
            key = (record["instance_id"], record["batch_size"])
            if not inputs[1].get("weight") or key not in measured.index:
                continue
            kernel = kernel_from_row(record)
            as_projection = kernel_from_dict("p", "cuda", {**kernel.to_dict(), "family": "MatMul_Add"})
            as_matmul, as_bias = predict_kernels(regressor, [kernel, as_projection], load)
            ms = float(measured[key])
            rows.append(
                {
                    "shapes": str([t["shape"] for t in inputs]),
                    "measured_us": 1e3 * ms,
                    "tflops": record["flops"] / ms / 1e9,
                    "as_MatMul_us": 1e3 * as_matmul.mean_ms,
                    "as_MatMul_Add_us": 1e3 * as_bias.mean_ms,
                }
            )
    frame = pd.DataFrame(rows)
    for column in ("as_MatMul", "as_MatMul_Add"):
        frame[f"{column}_error_pct"] = 100 * (frame[f"{column}_us"] / frame.measured_us - 1)
    print(frame.to_markdown(index=False, floatfmt=".1f"))
    print()
    print(
        f"{len(frame)} kernels; MAPE as MatMul {frame.as_MatMul_error_pct.abs().mean():.1f}%, "
        f"as MatMul_Add {frame.as_MatMul_Add_error_pct.abs().mean():.1f}%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
