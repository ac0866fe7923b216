"""How the composition does on tiny networks: the design-space probes' whole-model timings (a stem,
one or two cells and a head: 4-30 kernels, 0.02-10 ms) predicted by the predictor trained on the
merged H100 tables. The probes' kernels are in its training (in sample) and their model timings are
not in the composition fit, so this checks the per-run and per-kernel host terms on few-kernel
models, not the kernel regressor.

    .venv/bin/python results/gpu-general/design-space/probe_models.py results/gpu-general/tables \
        > results/gpu-general/design-space/probe_models.md
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> None:
    from hase_dagster.analysis.design_space import DESIGN_SPACE_FAMILY
    from hase_dagster.learn.predict import predict_model
    from hase_dagster.learn.regressor import mape, within
    from hase_dagster.learn.reports import import_tables
    from hase_dagster.learn.training import background_load, kernels_by_variant, measured_models, train_predictor

    with tempfile.TemporaryDirectory() as tmp:
        store = import_tables(Path(sys.argv[1]), Path(tmp) / "t.duckdb")
        predictor = train_predictor(store, "cuda", kind="xgboost")
        models = measured_models(store, "cuda")
        kernels = kernels_by_variant(store, "cuda")
    probes = models[(models["family"] == DESIGN_SPACE_FAMILY) & models["variant_id"].isin(kernels)]
    rows = []
    for row in probes.to_dict("records"):
        prediction = predict_model(
            row["variant_id"], kernels[row["variant_id"]], predictor.regressor, predictor.composition,
            background_load(row), "measured", int(row["batch_size"]),
        )  # fmt: skip
        rows.append(
            {
                "variant_id": row["variant_id"],
                "batch_size": int(row["batch_size"]),
                "stress_level": float(row["stress_level"]),
                "kernels": len(kernels[row["variant_id"]]),
                "measured_ms": row["mean_ms"],
                "predicted_ms": prediction.predicted_ms,
            }
        )
    cases = pd.DataFrame(rows)
    cases["error_pct"] = (cases["predicted_ms"] / cases["measured_ms"] - 1) * 100

    def summary(frame: pd.DataFrame) -> pd.Series:
        m, p = frame["measured_ms"].to_numpy(), frame["predicted_ms"].to_numpy()
        return pd.Series(
            {
                "cases": len(frame),
                "MAPE %": round(mape(p, m), 1),
                "within 10 %": round(within(p, m, 0.10), 0),
                "median error %": round(float(np.median(frame["error_pct"])), 1),
                "median measured ms": round(float(np.median(m)), 3),
            }
        )

    print("# Design-space probes as whole models (H100, composition not fitted on them)\n")
    print(f"Kernels per probe: {cases['kernels'].min()}-{cases['kernels'].max()}.\n")
    print(summary(cases).to_frame("all").T.to_markdown() + "\n")
    for by in ("batch_size", "stress_level"):
        print(cases.groupby(by).apply(summary, include_groups=False).to_markdown() + "\n")
    size = np.where(cases["measured_ms"] < 0.5, "under 0.5 ms", np.where(cases["measured_ms"] < 2, "0.5-2 ms", "2 ms+"))
    print(cases.groupby(size).apply(summary, include_groups=False).to_markdown() + "\n")


if __name__ == "__main__":
    main()
