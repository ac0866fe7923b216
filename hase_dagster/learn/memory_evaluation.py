"""Predicted peak memory (``analysis.peak_memory``) against the memory each model's session held
in the benchmarks (``model_benchmarks.peak_memory_mb``): per variant and batch size, the MAPE and
the worst cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.peak_memory import predict_peak_memory
from warehouse.store import Warehouse


@dataclass
class MemoryEvaluation:
    cases: pd.DataFrame  # one row per (variant, batch size): measured (median over stress levels) and predicted
    mape_pct: float
    markdown: str


def measured_memory(store: Warehouse, ep: str) -> pd.DataFrame:
    """Median measured peak memory per (variant, batch size) on ``ep`` over its benchmark rows
    (stress levels), with the source and the rows it comes from; empty for tables from before
    the memory columns."""
    return store.query(
        """SELECT variant_id, batch_size, median(peak_memory_mb) AS measured_mb, any_value(memory_source) AS source,
                  count(*) AS rows, any_value(memory_arena) AS arena
           FROM model_benchmarks
           WHERE ep = ? AND status = 'ok' AND peak_memory_mb IS NOT NULL
           GROUP BY variant_id, batch_size ORDER BY variant_id""",
        [ep],
    )


def evaluate_memory(store: Warehouse, ep: str, kernels: dict[str, list[Kernel]]) -> MemoryEvaluation:
    """Every measured variant's predicted peak against its measurement.

    Args:
        store: the warehouse with ``model_benchmarks`` (memory columns) and ``kernels``.
        ep: ``cpu`` or ``cuda``.
        kernels: each variant's kernels (``learn.training.kernels_by_variant``).
    """
    measured = measured_memory(store, ep)
    rows = []
    for row in measured.to_dict("records"):
        if row["variant_id"] not in kernels:
            continue
        predicted = predict_peak_memory(kernels[row["variant_id"]], ep)
        rows.append(
            {
                **row,
                "predicted_mb": predicted.total_mb,
                "weights_mb": predicted.weights_bytes / 1e6,
                "activations_mb": predicted.activation_peak_bytes / 1e6,
                "workspace_mb": predicted.workspace_bytes / 1e6,
            }
        )
    cases = pd.DataFrame(rows)
    if cases.empty:
        text = (
            f"## Peak memory on {ep}\n\n_No benchmark rows with measured memory "
            "(tables from before the memory columns, or no model benchmarks)._"
        )
        return MemoryEvaluation(cases, float("nan"), text)
    cases["error_pct"] = (cases["predicted_mb"] / cases["measured_mb"] - 1) * 100
    mape = float(np.mean(np.abs(cases["error_pct"])))
    columns = ["variant_id", "batch_size", "measured_mb", "predicted_mb", "error_pct", "weights_mb", "activations_mb",
               "workspace_mb", "source", "rows"]  # fmt: skip
    worst = cases.reindex(cases["error_pct"].abs().sort_values(ascending=False).index).head(5)
    arena = "; ".join(sorted(set(cases["arena"].dropna())))
    text = "\n\n".join(
        [
            f"## Peak memory on {ep}",
            f"Predicted (weights + peak of live activations over the kernels' order + workspace + session) against "
            f"the memory each model's session held in the benchmarks (median over stress levels; source "
            f"{', '.join(sorted(set(cases['source'])))}; ORT allocator settings {arena or 'n/a'}). "
            f"MAPE {mape:.1f}% over {len(cases)} variant x batch cases; within +-10%: "
            f"{float(np.mean(np.abs(cases['error_pct']) <= 10)) * 100:.0f}%.",
            "### Worst five\n\n" + worst[columns].round(2).to_markdown(index=False),
            "### Every case\n\n" + cases[columns].round(2).to_markdown(index=False),
        ]
    )
    return MemoryEvaluation(cases, mape, text)
