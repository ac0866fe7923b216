"""The proxies of untrained families against ORT's own kernels of them, timed standalone at idle: per family and
equation, the measured time, the bundle's prediction and its error. Prints markdown.

A proxy of several launches (an Einsum's transposes, GEMM and copy) is the sum of as many standalone predictions, each
with a standalone kernel's own launch and sync; ORT's one Einsum node runs them back to back. ``predicted_ms`` is that
sum less the composition's per-kernel term (``per_kernel``, negative on a GPU: what a standalone kernel pays that a
kernel among others does not) for each launch after the first, as a whole model's prediction counts them.

    .venv/bin/python results/gpu-general/user-kernels-ah/proxy_check.py results/gpu-general/user-kernels-ah/tables \
        --bundle results/bundles/h200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from hase_dagster.learn.predict import idle_load, predict_kernels_under
from hase_dagster.learn.training import Predictor, kernel_from_row


def standalone_predictor(bundle: Path) -> tuple[Predictor, dict[str, float]]:
    """``bundle``'s predictor with its regressor answering for kernels alone (no graph factors), as the kernel
    benchmarks time them, and the idle load to predict them under."""
    predictor = Predictor.load(bundle / "predictor")
    predictor.regressor.graph_factors = None
    return predictor, idle_load(predictor.regressor, {f: 0.0 for f in predictor.regressor.load_fields})


def idle_standalone_ms(tables: Path) -> pd.Series:
    """Each (instance_id, batch_size)'s mean time timed standalone at idle on the device clock in a profile run's
    exported ``tables`` (a kernel a dead device-clock child sent to the host clock is left out)."""
    timed = pd.read_parquet(tables / "kernel_benchmarks.parquet")
    timed = timed[(timed.status == "ok") & (timed.stress_level == 0.0) & (timed.clock != "host")]
    return timed.groupby(["instance_id", "batch_size"]).mean_ms.mean()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path)
    parser.add_argument("--bundle", type=Path, default=Path("results/bundles/h200"))
    args = parser.parse_args()
    predictor, load = standalone_predictor(args.bundle)
    per_launch_ms = (predictor.composition.mean_coefficients or {}).get("per_kernel", 0.0)
    measured = idle_standalone_ms(args.tables)
    kernels = pd.read_parquet(args.tables / "kernels.parquet")
    timed = [
        record
        for record in kernels.to_dict("records")
        if (record["instance_id"], record["batch_size"]) in measured.index
    ]
    predictions = predict_kernels_under(predictor.regressor, [kernel_from_row(r) for r in timed], [load])[0]
    rows = []
    for record, prediction in zip(timed, predictions, strict=True):
        key = (record["instance_id"], record["batch_size"])
        if not (prediction.proxy_family or prediction.fallback):
            continue
        equation = json.loads(record["attributes_json"]).get("equation", "")
        rows.append(
            {
                "family": record["family"],
                "equation": equation,
                "input": json.loads(record["inputs_json"])[0]["shape"],
                "proxy": prediction.proxy_family or "fallback",
                "measured_ms": measured[key],
                "launches": prediction.launches,
                "predicted_ms": prediction.mean_ms + per_launch_ms * (prediction.launches - 1),
            }
        )
    frame = pd.DataFrame(rows)
    frame["error_pct"] = 100 * (frame.predicted_ms / frame.measured_ms - 1)
    frame["abs_error_pct"] = frame.error_pct.abs()
    by = frame.groupby(["family", "equation", "proxy"], dropna=False)
    table = by.agg(
        kernels=("error_pct", "size"),
        measured_ms=("measured_ms", "sum"),
        predicted_ms=("predicted_ms", "sum"),
        median_error_pct=("error_pct", "median"),
        mape=("abs_error_pct", "mean"),
    ).reset_index()
    print(table.to_markdown(index=False, floatfmt=".3f"))
    total = frame.groupby("family").agg(
        kernels=("error_pct", "size"),
        measured_ms=("measured_ms", "sum"),
        predicted_ms=("predicted_ms", "sum"),
        mape=("abs_error_pct", "mean"),
    )
    print()
    print(total.reset_index().to_markdown(index=False, floatfmt=".3f"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
