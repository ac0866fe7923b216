"""The CPU evaluation of a `make run` warehouse, as predicted and at each model timing's own host loop reading.

Every CPU model timing now carries ``host_loop_ms`` (``Timing.host_loop_ms``), and a CPU composition the median
reading of the idle model timings it was fitted on (``learn.training.with_host_reference``); ``hase predict
--host-reading`` moves an idle CPU prediction by ``1 + CPU_HOST_ELASTICITY x (r / r0 - 1)`` and leaves a loaded
one. This applies the same to the evaluation's cases (``evaluation_cases``: each setting's predictor) and prints
markdown, by setting and stress level.

    .venv/bin/python results/cpu/host-reading/score_cpu_readings.py .hase_data/hase.duckdb
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from hase_dagster.learn.host_speed import CPU_HOST_ELASTICITY, reading_factor
from hase_dagster.learn.predict import Composition
from hase_dagster.learn.reports import error_cell
from hase_dagster.learn.training import measured_models, with_host_reference
from warehouse.store import Warehouse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warehouse", type=Path)
    args = parser.parse_args()
    store = Warehouse(args.warehouse)
    models = measured_models(store, "cpu")
    reference = with_host_reference(Composition(), models[~models["held_out"].astype(bool)]).host_loop_ms
    if reference is None:
        parser.error("no idle CPU model timing in this warehouse carries host_loop_ms")
    cases = store.query("SELECT * FROM evaluation_cases WHERE ep = 'cpu' AND setting != 'unseen_precision'")
    # the evaluation now stores these itself (empty in warehouses older than it): taken from the timings here
    cases = cases.drop(columns=["host_loop_ms", "predicted_at_reading_ms"], errors="ignore").merge(
        models[["variant_id", "stress_level", "batch_size", "host_loop_ms"]],
        on=["variant_id", "stress_level", "batch_size"],
    )
    idle = cases["stress_level"] == 0
    factor = reading_factor(CPU_HOST_ELASTICITY, cases["host_loop_ms"], reference)
    cases["at_reading_pct"] = (
        cases["predicted_mean_ms"] * factor.where(idle, 1.0) / cases["measured_mean_ms"] - 1
    ) * 100
    # Exploratory, not shipped: a loaded case against the median reading of the trained-on timings at its own
    # stress level (beside the stressor the loop reads the contention as well as the host's state).
    trained = models[~models["held_out"].astype(bool)]
    level_reference = cases["stress_level"].map(trained.groupby("stress_level")["host_loop_ms"].median())
    level_factor = reading_factor(CPU_HOST_ELASTICITY, cases["host_loop_ms"], level_reference)
    cases["at_level_reading_pct"] = (
        cases["predicted_mean_ms"] * factor.where(idle, level_factor) / cases["measured_mean_ms"] - 1
    ) * 100
    print(
        f"Reference {reference:.4f} ms (median idle reading of the trained-on model timings), elasticity "
        f"{CPU_HOST_ELASTICITY}; loaded cases are left as predicted. The last column (exploratory) also moves a "
        "loaded case, against the median reading of the trained-on timings at its stress level.\n"
    )
    groups = [(key, group) for key, group in cases.groupby(["setting", "stress_level"])]
    groups += [((setting, "all"), group) for setting, group in cases.groupby("setting")]
    rows = [
        {
            "setting": setting,
            "stress": level,
            "cases": len(group),
            "loop ms (median)": round(group["host_loop_ms"].median(), 3),
            "as predicted": error_cell(group["error_pct"]),
            "at the reading": error_cell(group["at_reading_pct"]),
            "loaded too, at its level's reference": error_cell(group["at_level_reading_pct"]),
        }
        for (setting, level), group in groups
    ]
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
