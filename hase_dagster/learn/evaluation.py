"""Predicted vs measured whole-model latency, per model and stress level, with baselines.

Three settings: ``trained_on_all`` (the predictor that ships, which has seen every zoo model),
``held_out_architecture`` (for each zoo architecture, a predictor trained without any kernel
instance or measurement of it) and ``never_seen`` (the profile's held-out models, which no
predictor trained on: the honest figure for a new model). Baselines on the same cases:
``flops_proportional`` (model ms = c x FLOPs, c fitted per stress level on the other architectures)
and ``idle_kernel_sum`` (sum of the model's kernels measured alone on an idle device: what a
load-blind predictor says).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hase_dagster.learn.training import Predictor, background_load, kernels_by_variant, measured_models, train_predictor
from hase_dagster.learn.predict import predict_model
from hase_dagster.learn.regressor import mape, within
from warehouse.store import Warehouse


@dataclass
class Evaluation:
    cases: pd.DataFrame  # one row per (setting, variant, stress level)
    summary: pd.DataFrame  # one row per (setting, stress level) and overall
    worst: pd.DataFrame
    markdown: str


def _kernel_errors(store: Warehouse, ep: str, variant: str, level: float, prediction: Any, top: int = 3) -> str:
    measured = store.query(
        """SELECT b.instance_id, b.family, b.median_ms FROM kernel_benchmarks b
           JOIN (SELECT DISTINCT instance_id, batch_size FROM kernels WHERE variant_id = ? AND ep = ?) k
           USING (instance_id, batch_size) WHERE b.ep = ? AND b.stress_level = ? AND b.status = 'ok'""",
        [variant, ep, ep, level],
    ).set_index("instance_id")
    errors = []
    for kernel in prediction.kernels:
        if kernel.instance_id in measured.index:
            truth = float(measured.loc[kernel.instance_id, "median_ms"])
            errors.append((abs(kernel.median_ms - truth), kernel.family, kernel.median_ms, truth))
    errors.sort(reverse=True)
    return "; ".join(f"{f} pred {p:.3f} vs {t:.3f} ms" for _, f, p, t in errors[:top])


def _idle_kernel_sums(store: Warehouse, ep: str) -> pd.Series:
    """Per variant, the sum of its kernels' idle means; only where every kernel was measured."""
    sums = store.query(
        """SELECT k.variant_id, sum(b.mean_ms) AS idle_sum_ms, count(b.mean_ms) AS measured, count(*) AS kernels
           FROM kernels k LEFT JOIN kernel_benchmarks b
             ON b.instance_id = k.instance_id AND b.ep = k.ep AND b.batch_size = k.batch_size
            AND b.stress_level = 0 AND b.status = 'ok'
           WHERE k.ep = ? GROUP BY 1""",
        [ep],
    ).set_index("variant_id")
    return sums["idle_sum_ms"].where(sums["measured"] == sums["kernels"])


def evaluate(store: Warehouse, ep: str, shipped: Predictor | None = None) -> Evaluation:
    """Evaluate every measured model of ``ep`` at every stress level, in three settings:
    ``trained_on_all`` and ``held_out_architecture`` for the zoo, ``never_seen`` for held-out models."""
    models = measured_models(store, ep)
    kernels = kernels_by_variant(store, ep)
    models = models[models["variant_id"].isin(kernels)]
    never_seen = models["held_out"].astype(bool)
    shipped = shipped or train_predictor(store, ep)
    held_out = {
        a: train_predictor(store, ep, exclude_architecture=a, kind=shipped.regressor.kind)
        for a in sorted(models.loc[~never_seen, "architecture"].unique())
    }
    idle_sums = _idle_kernel_sums(store, ep)
    flops = {v: float(sum(k.flops for k in ks)) for v, ks in kernels.items()}
    zoo = models[~never_seen]
    rows = []
    predictions = {}
    for row in models.to_dict("records"):
        load = background_load(row)
        variant, level = row["variant_id"], float(row["stress_level"])
        others = zoo[(zoo["architecture"] != row["architecture"]) & (zoo["stress_level"] == level)]
        per_flop = float(np.median(others["mean_ms"] / others["variant_id"].map(flops))) if len(others) else float("nan")
        settings = (
            (("never_seen", shipped),) if row["held_out"]
            else (("trained_on_all", shipped), ("held_out_architecture", held_out[row["architecture"]]))
        )
        for setting, predictor in settings:
            prediction = predict_model(variant, kernels[variant], predictor.regressor, predictor.composition, load,
                                       f"measured background at stress {level:.2f}", int(row["batch_size"]))
            predictions[(setting, variant, level)] = prediction
            rows.append({
                "setting": setting, "variant_id": variant, "architecture": row["architecture"],
                "input_size": int(row["input_size"]), "batch_size": int(row["batch_size"]), "stress_level": level,
                "measured_mean_ms": row["mean_ms"], "measured_p90_ms": row["p90_ms"],
                "predicted_mean_ms": prediction.predicted_ms, "predicted_p90_ms": prediction.p90_ms,
                "critical_path_ms": prediction.critical_path_ms, "kernel_sum_ms": prediction.sequential_sum_ms,
                "fallback_kernels": prediction.coverage["fallback"],
                "flops_proportional_ms": per_flop * flops[variant],
                "idle_kernel_sum_ms": float(idle_sums.get(variant, np.nan)),
            })
    cases = pd.DataFrame(rows)
    cases["error_pct"] = (cases["predicted_mean_ms"] / cases["measured_mean_ms"] - 1) * 100
    worst = (
        cases.assign(abs_error=cases["error_pct"].abs())
        .sort_values("abs_error", ascending=False)
        .groupby("setting", sort=False)
        .head(5)
        .drop(columns="abs_error")
    )
    worst["largest_kernel_errors"] = [
        _kernel_errors(store, ep, r.variant_id, r.stress_level, predictions[(r.setting, r.variant_id, r.stress_level)])
        for r in worst.itertuples()
    ]
    summaries = {by: _summary(cases, by) for by in ("stress_level", "batch_size", "input_size", "architecture")}
    return Evaluation(cases, summaries["stress_level"], worst, _markdown(ep, cases, summaries, worst))


def _scores(frame: pd.DataFrame, column: str, truth: str = "measured_mean_ms") -> tuple[float, float]:
    ok = frame[column].notna()
    if not ok.any():
        return float("nan"), float("nan")
    return mape(frame.loc[ok, column].to_numpy(), frame.loc[ok, truth].to_numpy()), within(frame.loc[ok, column].to_numpy(), frame.loc[ok, truth].to_numpy())


def _summary(cases: pd.DataFrame, by: str = "stress_level") -> pd.DataFrame:
    """MAPE and share within +-10% of mean and p90, and both baselines, per setting and ``by``
    value, with an ``all`` row per setting."""
    out = []
    for setting, by_setting in cases.groupby("setting", sort=False):
        for value, group in [*by_setting.groupby(by), ("all", by_setting)]:
            mean_mape, mean_within = _scores(group, "predicted_mean_ms")
            p90_mape, p90_within = _scores(group, "predicted_p90_ms", "measured_p90_ms")
            flops_mape, _ = _scores(group, "flops_proportional_ms")
            idle_mape, _ = _scores(group, "idle_kernel_sum_ms")
            out.append({
                "setting": setting, by: value, "cases": len(group),
                "mean_mape_pct": mean_mape, "mean_within_10_pct": mean_within,
                "p90_mape_pct": p90_mape, "p90_within_10_pct": p90_within,
                "flops_proportional_mape_pct": flops_mape, "idle_kernel_sum_mape_pct": idle_mape,
            })
    return pd.DataFrame(out)


def _markdown(ep: str, cases: pd.DataFrame, summaries: dict[str, pd.DataFrame], worst: pd.DataFrame) -> str:
    table = lambda f: f.round(3).to_markdown(index=False) if len(f) else "_none_"  # noqa: E731
    columns = ["setting", "variant_id", "stress_level", "measured_mean_ms", "predicted_mean_ms", "error_pct",
               "measured_p90_ms", "predicted_p90_ms", "critical_path_ms", "fallback_kernels"]
    settings = (
        "Settings: `trained_on_all` is the predictor that ships, evaluated on the zoo it was trained on; "
        "`held_out_architecture` predicts each zoo architecture with a predictor trained without it; "
        "`never_seen` predicts the profile's held-out models, which no predictor ever trained on. "
        "Baselines on the same cases: FLOPs-proportional (ms per FLOP fitted per stress level on the other "
        "zoo architectures) and the load-blind sum of the model's kernels measured on an idle device."
    )
    parts = [f"# Hase evaluation on {ep}", settings]
    for by, frame in summaries.items():
        parts.append(f"## By {by.replace('_', ' ')} (MAPE and share within +-10%, in %)\n\n" + table(frame))
    parts += [
        "## Worst five per setting\n\n"
        + table(worst[["setting", "variant_id", "stress_level", "measured_mean_ms", "predicted_mean_ms", "error_pct",
                       "fallback_kernels", "largest_kernel_errors"]]),
        "## Every case\n\n" + table(cases[columns]),
    ]
    return "\n\n".join(parts)


def overlap_section(optimized_dir: str | os.PathLike[str]) -> str:
    """Markdown: from each variant's ORT profile, whether node executions overlapped, and so which
    estimate applies."""
    import json

    rows = []
    for path in sorted(Path(optimized_dir).glob("*.json")):
        overlap = json.loads(path.read_text()).get("overlap") or {}
        if overlap:
            rows.append({"variant_id": path.stem, **overlap})
    if not rows:
        return "## Execution overlap\n\n_no profiles with overlap data_"
    frame = pd.DataFrame(rows)
    sequential = bool((frame["overlapping_executions"] == 0).all())
    verdict = (
        "No node execution started before the previous one ended: ORT's sequential executor ran every kernel "
        "one after another, so `predicted_ms` (built on the sequential kernel sum) is the estimate that applies. "
        "`critical_path_ms` (longest dependent chain) applies only where independent branches overlap, i.e. with "
        "ORT's parallel executor (`execution_mode=ORT_PARALLEL`, CPU only), which Hase does not use for timing."
        if sequential
        else "Some node executions overlapped: the critical path bounds the latency from below."
    )
    return "## Execution overlap (ORT profile)\n\n" + frame.to_markdown(index=False) + "\n\n" + verdict


def scatter_plot(cases: pd.DataFrame, path: str | os.PathLike[str], title: str) -> Path:
    """Predicted vs measured mean latency, one colour per stress level, both settings side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(cases["setting"]))
    figure, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 5), squeeze=False)
    for axis, setting in zip(axes[0], settings):
        group = cases[cases["setting"] == setting]
        for level, points in group.groupby("stress_level"):
            axis.scatter(points["measured_mean_ms"], points["predicted_mean_ms"], label=f"stress {level:.2f}", s=30)
        low = float(min(group["measured_mean_ms"].min(), group["predicted_mean_ms"].min())) * 0.8
        high = float(max(group["measured_mean_ms"].max(), group["predicted_mean_ms"].max())) * 1.2
        line = np.array([low, high])
        axis.plot(line, line, "k-", lw=1)
        axis.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, label="+-10%")
        axis.set(xscale="log", yscale="log", xlabel="measured mean (ms)", ylabel="predicted mean (ms)", title=f"{title}: {setting}")
        axis.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
