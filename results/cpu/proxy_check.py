"""Kernel-level check of learn.proxies (issue 11): a bundle's regressor predicts kernels it never measured, through
proxies and as the trees' plain fallback, against those kernels' measured times.

Reads a warehouse where the kernels were benchmarked (e.g. the ``cpu_design_space_operators`` profile's on this
VM) and a bundle whose tables lack their families; every kernel that ``proxy_kernels`` rewrites is predicted both
ways under the bundle's load at its stress level. Prints markdown: MAPE and median ratio (predicted / measured)
per proxy kind and stress level, and each kernel's.

    .venv/bin/python results/cpu/proxy_check.py WAREHOUSE.duckdb --bundle cpu > results/cpu/proxy_check.md
"""

from __future__ import annotations

import argparse
import re

import duckdb
import numpy as np
import pandas as pd

from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.predict import predict_kernels_under
from hase_dagster.learn.proxies import proxy_kernels
from hase_dagster.learn.training import kernel_from_row


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
        proxied = [(k, m) for k, m in zip(kernels, group.measured_ms) if proxy_kernels(k, regressor.knows)]
        if not proxied:
            continue
        load = bundle.levels[float(level)]
        with_proxy = predict_kernels_under(regressor, [k for k, _ in proxied], [load])[0]
        plain = regressor.predict_kernels([k.to_dict() for k, _ in proxied], [load])[0]["mean_ms"]
        for (kernel, measured), proxy, fallback in zip(proxied, with_proxy, plain, strict=True):
            kind = re.sub(r" \(\d+ steps.*| over \d+ rows.*", "", proxy.proxy)
            records.append(
                {
                    "stress": level, "kind": kind, "family": kernel.family, "node": kernel.node_name,
                    "model": kernel.variant_id, "measured_ms": measured, "proxy_ms": proxy.mean_ms,
                    "fallback_ms": float(fallback),
                }
            )  # fmt: skip
    frame = pd.DataFrame(records)
    for column in ("proxy", "fallback"):
        frame[f"{column}_ratio"] = frame[f"{column}_ms"] / frame.measured_ms

    def scores(group: pd.DataFrame) -> pd.Series:
        return pd.Series(
            {
                "kernels": len(group),
                "proxy MAPE %": round(100 * (group.proxy_ratio - 1).abs().mean(), 1),
                "fallback MAPE %": round(100 * (group.fallback_ratio - 1).abs().mean(), 1),
                "proxy median ratio": round(float(np.median(group.proxy_ratio)), 2),
                "fallback median ratio": round(float(np.median(group.fallback_ratio)), 2),
                "measured ms": round(group.measured_ms.sum(), 3),
                "proxy ms": round(group.proxy_ms.sum(), 3),
                "fallback ms": round(group.fallback_ms.sum(), 3),
            }
        )

    print(f"Bundle `{bundle.name}` ({bundle.document.get('device')}), warehouse `{args.warehouse}`\n")
    print(pd.DataFrame([{"": "all", **scores(frame)}]).to_markdown(index=False))
    print("\n" + frame.groupby("stress").apply(scores, include_groups=False).to_markdown())
    print("\n" + frame.groupby("kind").apply(scores, include_groups=False).to_markdown())
    idle = frame[frame.stress == 0].sort_values(["kind", "model"])
    print("\nIdle, each kernel:\n")
    print(idle[["kind", "model", "node", "measured_ms", "proxy_ms", "fallback_ms"]].round(4).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
