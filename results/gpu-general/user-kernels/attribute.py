"""Split a bundle's error on held-out networks into its kernels' and its composition's: ORT's real kernels of each
network (a profile run's ``kernels`` table), each timed standalone at idle (``kernel_benchmarks``), against the bundle's
regressor on the same kernels, and the whole model's measured time against the composition. Prints markdown.

    .venv/bin/python results/gpu-general/user-kernels/attribute.py results/gpu-general/user-kernels/tables \
        --bundle results/bundles/h100
    .venv/bin/python results/gpu-general/user-kernels/attribute.py results/cpu/user-kernels/tables --bundle B  # CPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from hase_dagster.learn.predict import idle_load, predict_kernels_under, predict_model_under
from hase_dagster.learn.training import Predictor, kernel_from_row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path)
    parser.add_argument("--bundle", type=Path, default=Path("results/bundles/h100"))
    parser.add_argument("--top", type=int, default=8, help="families listed per network")
    parser.add_argument("--detail", default="Conv", help="the family listed instance by instance (largest error first)")
    args = parser.parse_args()
    predictor = Predictor.load(args.bundle / "predictor")
    regressor, composition = predictor.regressor, predictor.composition
    kernels = pd.read_parquet(args.tables / "kernels.parquet")
    timed = pd.read_parquet(args.tables / "kernel_benchmarks.parquet")
    timed = timed[(timed.status == "ok") & (timed.stress_level == 0.0)]
    # A kernel timed on the host clock (its file killed the device clock's child) includes its launch and sync,
    # 0.06-0.1 ms, which the regressor's device-clock predictions do not: such kernels are left out of the
    # comparison and counted apart.
    # On the CPU EP the host clock is the only one and the regressor predicts it: every kernel is compared.
    on_host = (timed.clock == "host") & (timed.ep != "cpu")
    host_clocked = set(zip(timed.instance_id[on_host], timed.batch_size[on_host]))
    timed = timed[~on_host]
    measured_ms = timed.groupby(["instance_id", "batch_size"]).mean_ms.mean()
    models = pd.read_parquet(args.tables / "model_benchmarks.parquet")
    models = models[models.status == "ok"].set_index(["variant_id", "stress_level"])
    load = {f: 0.0 for f in regressor.load_fields}
    summary, by_family, detail = [], [], []
    for variant, rows in kernels.groupby("variant_id"):
        rows = rows.sort_values("kernel_order")
        variant_kernels = [kernel_from_row(r) for r in rows.to_dict("records")]
        batch = int(rows.batch_size.iloc[0])
        factors, regressor.graph_factors = regressor.graph_factors, None  # standalone, as the kernels were timed
        standalone = predict_kernels_under(regressor, variant_kernels, [idle_load(regressor, load)])[0]
        regressor.graph_factors = factors
        frame = pd.DataFrame(
            {
                "family": [k.family for k in variant_kernels],
                "predicted_ms": [p.mean_ms for p in standalone],
                "measured_ms": [measured_ms.get((k.instance_id, batch), float("nan")) for k in variant_kernels],
            }
        )
        whole = {}
        for level in (0.0, 0.5, 1.0):
            if (variant, level) not in models.index:
                continue
            row = models.loc[(variant, level)]
            background = {f: float(row.get(f"bg_{f}", 0.0) or 0.0) for f in regressor.load_fields}
            background[regressor.load_fields[0]] = float(row[f"bg_{regressor.load_fields[0]}"]) if level else 0.0
            predicted = predict_model_under(variant, variant_kernels, regressor, composition, [(background, "")], batch)
            whole[level] = (float(row.mean_ms), predicted[0].predicted_ms)
        summary.append(
            {
                "network": variant,
                "kernels": len(frame),
                "timed": int(frame.measured_ms.notna().sum()),
                "host-clocked": sum((k.instance_id, batch) in host_clocked for k in variant_kernels),
                "kernel sum measured ms": round(frame.measured_ms.sum(), 3),
                "kernel sum predicted ms": round(frame.predicted_ms[frame.measured_ms.notna()].sum(), 3),
                "kernels error %": round(
                    (frame.predicted_ms[frame.measured_ms.notna()].sum() / frame.measured_ms.sum() - 1) * 100, 1
                ),
                **{
                    f"model @{level} measured / predicted ms": f"{m:.2f} / {p:.2f} ({(p / m - 1) * 100:+.0f}%)"
                    for level, (m, p) in whole.items()
                },
            }
        )
        for kernel, row in zip(variant_kernels, frame.itertuples()):
            if kernel.family != args.detail:
                continue
            weight = kernel.inputs[1].shape if len(kernel.inputs) > 1 else ()
            detail.append(
                {
                    "network": variant,
                    "input": str(tuple(kernel.inputs[0].shape[1:])),
                    "weight": str(tuple(weight)),
                    "group": kernel.attributes.get("group", 1),
                    "stride": (kernel.attributes.get("strides") or [1])[0],
                    "bias": len(kernel.inputs) > 2,
                    "measured_ms": row.measured_ms,
                    "predicted_ms": row.predicted_ms,
                    "tflops": kernel.flops / row.measured_ms / 1e9 if row.measured_ms else float("nan"),
                }
            )
        families = frame.dropna(subset=["measured_ms"]).groupby("family")[["measured_ms", "predicted_ms"]].sum()
        families["count"] = frame.groupby("family").size()
        families["excess_ms"] = families.predicted_ms - families.measured_ms
        families["error %"] = (families.predicted_ms / families.measured_ms - 1) * 100
        families = families.reindex(families.excess_ms.abs().sort_values(ascending=False).index).head(args.top)
        for family, r in families.round(3).iterrows():
            by_family.append({"network": variant, "family": family, **r.to_dict()})
    print("## Kernels and whole models (idle kernels timed standalone on the device clock; host-clocked ones apart)\n")
    print(pd.DataFrame(summary).to_markdown(index=False))
    print("\n## Families with the largest error in ms, per network\n")
    print(pd.DataFrame(by_family).to_markdown(index=False))
    if detail:
        shapes = pd.DataFrame(detail)
        keys = ["network", "input", "weight", "group", "stride", "bias"]
        grouped = shapes.groupby(keys).agg(
            count=("measured_ms", "size"),
            measured_ms=("measured_ms", "mean"),
            predicted_ms=("predicted_ms", "mean"),
            tflops=("tflops", "mean"),
        )
        grouped["excess_ms"] = (grouped.predicted_ms - grouped.measured_ms) * grouped["count"]
        grouped["error %"] = (grouped.predicted_ms / grouped.measured_ms - 1) * 100
        grouped["size_ms"] = grouped.excess_ms.abs()  # over- and under-predictions alike
        grouped = grouped.reset_index().sort_values(["network", "size_ms"], ascending=[True, False])
        top = grouped.groupby("network").head(args.top).drop(columns="size_ms")
        print(f"\n## {args.detail} instances with the largest error in ms, per network (measured per instance, mean)\n")
        print(top.round(3).to_markdown(index=False))
    print("\n" + json.dumps({"bundle": str(args.bundle), "tables": str(args.tables)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
