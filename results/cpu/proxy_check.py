"""Kernel-level check of how Hase reads convolutions no table has (issue 11): a bundle's regressor predicts the
transposed, 1-D and 3-D convolutions of a warehouse, as Hase does now (a transposed one as its adjoint convolution,
``learn.proxies``; 1-D and 3-D ones read as 2-D, ``learn.features.conv_dims_as_2d``) and as the raw kernels, against
their measured times.

Reads a warehouse where the kernels were benchmarked (e.g. the ``cpu_design_space_operators`` profile's on this
VM) and a bundle whose tables lack them; each such kernel is predicted both ways under the bundle's load at its
stress level. Prints markdown: MAPE and median ratio (predicted / measured) per kind and stress level, and each
kernel's.

    .venv/bin/python results/cpu/proxy_check.py WAREHOUSE.duckdb --bundle cpu > results/cpu/proxy_check.md
"""

from __future__ import annotations

import argparse
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.learn import features
from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.predict import predict_kernels_under
from hase_dagster.learn.training import kernel_from_row


def kind_of(kernel: Kernel) -> str | None:
    """``ConvTranspose``, ``Conv 1-D`` or ``Conv 3-D`` for the convolutions this check is about; None otherwise."""
    if kernel.domain == "com.microsoft.nchwc" or len(kernel.inputs) < 2:
        return None
    rank = len(kernel.inputs[0].shape) - 2
    if kernel.op_type == "ConvTranspose":
        return f"ConvTranspose {rank}-D"
    return f"Conv {rank}-D" if kernel.op_type in ("Conv", "FusedConv") and rank in (1, 3) else None


def raw_predictions(regressor: Any, kernels: list[Kernel], load: dict[str, float]) -> np.ndarray:
    """The regressor's mean for the kernels as they are: no proxy, a 1-D or 3-D shape read as its last four dims."""
    keep = features.conv_dims_as_2d
    features.conv_dims_as_2d = lambda first_in, first_out, kernel_shape, strides: (  # type: ignore[assignment]
        first_in,
        first_out,
        kernel_shape,
        strides,
    )
    try:
        return regressor.predict_kernels([k.to_dict() for k in kernels], [load])[0]["mean_ms"]
    finally:
        features.conv_dims_as_2d = keep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warehouse")
    parser.add_argument("--bundle", default="cpu")
    args = parser.parse_args()
    bundle = load_bundle(args.bundle)
    regressor = bundle.predictor.regressor
    connection = duckdb.connect(args.warehouse, read_only=True)
    rows = connection.sql(
        "select k.*, b.stress_level, b.mean_ms as measured_ms from kernel_benchmarks b "
        "join kernels k using (instance_id) where b.status = 'ok'"
    ).df()
    rows = rows.drop_duplicates(["instance_id", "stress_level"])
    records = []
    for level, group in rows.groupby("stress_level"):
        kernels = [kernel_from_row(r) for r in group.to_dict("records")]
        chosen = [(k, m) for k, m in zip(kernels, group.measured_ms) if kind_of(k)]
        if not chosen:
            continue
        load = bundle.levels[float(level)]
        now = predict_kernels_under(regressor, [k for k, _ in chosen], [load])[0]
        raw = raw_predictions(regressor, [k for k, _ in chosen], load)
        for (kernel, measured), prediction, plain in zip(chosen, now, raw, strict=True):
            records.append(
                {
                    "stress": level, "kind": kind_of(kernel), "family": kernel.family, "node": kernel.node_name,
                    "model": kernel.variant_id, "measured_ms": measured, "hase_ms": prediction.mean_ms,
                    "raw_ms": float(plain),
                }
            )  # fmt: skip
    frame = pd.DataFrame(records)
    for column in ("hase", "raw"):
        frame[f"{column}_ratio"] = frame[f"{column}_ms"] / frame.measured_ms

    def scores(group: pd.DataFrame) -> pd.Series:
        return pd.Series(
            {
                "kernels": len(group),
                "Hase MAPE %": round(100 * (group.hase_ratio - 1).abs().mean(), 1),
                "raw MAPE %": round(100 * (group.raw_ratio - 1).abs().mean(), 1),
                "Hase median ratio": round(float(np.median(group.hase_ratio)), 2),
                "raw median ratio": round(float(np.median(group.raw_ratio)), 2),
                "measured ms": round(group.measured_ms.sum(), 3),
                "Hase ms": round(group.hase_ms.sum(), 3),
                "raw ms": round(group.raw_ms.sum(), 3),
            }
        )

    print(f"Bundle `{bundle.name}` ({bundle.document.get('device')}), warehouse `{args.warehouse}`\n")
    print(pd.DataFrame([{"": "all", **scores(frame)}]).to_markdown(index=False))
    print("\n" + frame.groupby("stress").apply(scores, include_groups=False).to_markdown())
    print("\n" + frame.groupby("kind").apply(scores, include_groups=False).to_markdown())
    idle = frame[frame.stress == 0].sort_values(["kind", "model"])
    print("\nIdle, each kernel:\n")
    print(idle[["kind", "model", "node", "measured_ms", "hase_ms", "raw_ms"]].round(4).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
