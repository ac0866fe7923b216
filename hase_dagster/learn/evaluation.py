"""Predicted vs measured whole-model latency, per model and stress level, with baselines.

Four settings: ``trained_on_all`` (the predictor that ships, which has seen every training model),
``held_out_architecture`` (for each training architecture, a predictor trained without any kernel
instance or measurement of it), ``held_out_family`` (the same without its whole family),
``unseen_precision`` (an fp16/int8 variant whose precision no other training architecture has,
predicted by its architecture's held-out predictor: no kernel of that precision seen) and
``never_seen`` (the profile's held-out models, which no predictor trained on: the honest figure for
a new model). Design-space probes (family ``design_space``) are training samples: every predictor
trains on them and none is a test case. Baselines on the same cases:
``flops_proportional`` (model ms = c x FLOPs, c fitted per stress level on the other architectures)
and ``idle_kernel_sum`` (sum of the model's kernels measured alone on an idle device: what a
load-blind predictor says). Where a model timing carries its host loop reading and the setting's
composition a host reference, each case is also predicted at that reading (``hase predict --host-reading``,
:func:`hase_dagster.learn.host_speed.at_host_reading`), reported beside the figure as predicted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hase_dagster.learn.host_speed import CPU_HOST_ELASTICITY, at_host_reading, near_range
from hase_dagster.learn.memory_evaluation import evaluate_memory
from hase_dagster.learn.model_timings import TimedModel
from hase_dagster.learn.predict import ModelPrediction, predict_model
from hase_dagster.learn.training import (
    Predictor,
    RegressorMemo,
    background_load,
    kernels_by_variant,
    measured_models,
    networks,
    train_predictor,
)
from warehouse.store import Warehouse


@dataclass
class Evaluation:
    cases: pd.DataFrame  # one row per (setting, variant, stress level)
    summary: pd.DataFrame  # one row per (setting, stress level) and overall
    worst: pd.DataFrame
    markdown: str
    # One row per fp16/int8 variant, setting and stress level: measured and predicted speed-up over fp32.
    speedups: pd.DataFrame | None = None


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


def evaluate(
    store: Warehouse, ep: str, shipped: Predictor | None = None, timed_models: Sequence[TimedModel] = ()
) -> Evaluation:
    """Evaluate every measured model of ``ep`` at every stress level, in four settings:
    ``trained_on_all``, ``held_out_architecture`` and ``held_out_family`` for the training models,
    ``never_seen`` for held-out models. ``timed_models`` (networks outside the warehouse, of no
    family of its models) join every predictor's composition, the held-out ones' too."""
    models = measured_models(store, ep)
    kernels = kernels_by_variant(store, ep)
    # Design-space probes are in every predictor's training (through the store), never a case.
    models = networks(models[models["variant_id"].isin(kernels)])
    never_seen = models["held_out"].astype(bool)
    shipped = shipped or train_predictor(store, ep)
    kind, factors = shipped.regressor.kind, shipped.regressor.graph_factors
    # The held-out predictors' compositions are fitted as the shipped one was (in-sample or cross-fitted).
    cross_fit = shipped.composition.cross_fitted
    # A family of one architecture leaves out what that architecture's predictor does, and cross-fitting needs the
    # same pairs of exclusions again: each regressor is trained once.
    regressors: RegressorMemo = {}
    trained = models[~never_seen]
    by_architecture = {
        a: train_predictor(
            store,
            ep,
            exclude_architectures={a},
            kind=kind,
            graph_factors=factors,
            timed_models=timed_models,
            cross_fit=cross_fit,
            regressors=regressors,
        )
        for a in sorted(trained["architecture"].unique())
    }
    # Leave one family out only where another family remains to learn from.
    families = sorted(trained["family"].unique())
    by_family = (
        {
            f: train_predictor(
                store,
                ep,
                exclude_architectures=set(trained.loc[trained["family"] == f, "architecture"]),
                kind=kind,
                graph_factors=factors,
                timed_models=timed_models,
                cross_fit=cross_fit,
                regressors=regressors,
            )
            for f in families
        }
        if len(families) > 1
        else {}
    )
    idle_sums = _idle_kernel_sums(store, ep)
    # The precisions the other training architectures have, per architecture.
    precisions_of_others = {
        a: set(trained.loc[trained["architecture"] != a, "precision"]) for a in trained["architecture"].unique()
    }

    flops = {v: float(sum(k.flops for k in ks)) for v, ks in kernels.items()}
    rows = []
    predictions = {}
    for row in models.to_dict("records"):
        load = background_load(row)
        variant, level = row["variant_id"], float(row["stress_level"])
        others = trained[
            (trained["architecture"] != row["architecture"])
            & (trained["stress_level"] == level)
            & (trained["batch_size"] == row["batch_size"])
        ]
        if others.empty:
            others = trained[(trained["architecture"] != row["architecture"]) & (trained["stress_level"] == level)]
        per_flop = (
            float(np.median(others["mean_ms"] / others["variant_id"].map(flops))) if len(others) else float("nan")
        )
        settings: list[tuple[str, Predictor]] = (
            [("never_seen", shipped)]
            if row["held_out"]
            else [("trained_on_all", shipped), ("held_out_architecture", by_architecture[row["architecture"]])]
        )
        if not row["held_out"] and row["precision"] not in precisions_of_others[row["architecture"]]:
            # Left out with its architecture, its precision is left out too: another question than a
            # new architecture (kernels of a precision never seen), reported apart.
            settings = [("trained_on_all", shipped), ("unseen_precision", by_architecture[row["architecture"]])]
        elif not row["held_out"] and row["family"] in by_family:
            settings.append(("held_out_family", by_family[row["family"]]))
        for setting, predictor in settings:
            prediction = predict_model(
                variant,
                kernels[variant],
                predictor.regressor,
                predictor.composition,
                load,
                # "idle" first, as a bundle's idle load is named: the host-reading rule moves idle CPU runs only
                f"{'idle, ' if level == 0 else ''}measured background at stress {level:.2f}",
                int(row["batch_size"]),
            )
            predictions[(setting, variant, level)] = prediction
            raw = row.get("host_loop_ms")
            reading = float(raw) if raw is not None and raw > 0 else np.nan  # NaN where the timing has none
            rows.append(
                {
                    "setting": setting,
                    "variant_id": variant,
                    "architecture": row["architecture"],
                    "family": row["family"],
                    "precision": row["precision"],
                    "input_size": int(row["input_size"]),
                    "batch_size": int(row["batch_size"]),
                    "stress_level": level,
                    "measured_mean_ms": row["mean_ms"],
                    "measured_p90_ms": row["p90_ms"],
                    "predicted_mean_ms": prediction.predicted_ms,
                    "predicted_p90_ms": prediction.p90_ms,
                    "critical_path_ms": prediction.critical_path_ms,
                    "kernel_sum_ms": prediction.sequential_sum_ms,
                    "fallback_kernels": prediction.coverage["fallback"],
                    "flops_proportional_ms": per_flop * flops[variant],
                    "idle_kernel_sum_ms": float(idle_sums.get(variant, np.nan)),
                    "host_loop_ms": reading,
                    "predicted_at_reading_ms": _at_reading(prediction, reading, predictor),
                    "host_range_low_ms": prediction.host_range_ms[0] if prediction.host_range_ms else np.nan,
                    "host_range_high_ms": prediction.host_range_ms[1] if prediction.host_range_ms else np.nan,
                }
            )
    cases = pd.DataFrame(rows)
    cases["error_pct"] = (cases["predicted_mean_ms"] / cases["measured_mean_ms"] - 1) * 100
    cases["size"] = np.where(cases["measured_mean_ms"] < 2.0, "under_2ms", "2ms_and_more")
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
    summaries = {
        by: _summary(cases, by)
        for by in (
            "stress_level",
            "batch_size",
            "batch_and_stress",
            "size",
            "family",
            "architecture",
            "input_size",
            "precision",
        )
    }
    speedups = precision_speedups(cases, models)
    memory = evaluate_memory(store, ep, kernels).markdown
    sections = [
        _markdown(ep, cases, summaries, worst),
        host_reading_markdown(cases),
        _reference_rows_markdown(store, ep),
        _speedup_markdown(speedups),
        _kernel_precision_markdown(store, ep),
        memory,
    ]
    markdown = "\n\n".join(section for section in sections if section)
    return Evaluation(cases, summaries["stress_level"], worst, markdown, speedups)


def _at_reading(prediction: ModelPrediction, reading: float, predictor: Predictor) -> float:
    """A CPU case's prediction at its timing's host reading, or NaN where the timing has no reading (NaN) or the
    composition no reference. GPU cases get NaN: their load rule needs the idle twin a bundle's prediction
    carries, and readings taken around the window did not follow an H200 host (results/cpu-general/gpu-setAN)."""
    composition = predictor.composition
    if prediction.ep != "cpu" or not reading > 0 or composition.host_loop_ms is None:
        return float("nan")
    python = composition.host_loop_python or ""
    return at_host_reading(prediction, reading, composition.host_loop_ms, python, python).predicted_ms


def host_reading_markdown(cases: pd.DataFrame) -> str:
    """Each setting by stress level as predicted and at each timing's own host reading; empty without readings."""
    read = cases.dropna(subset=["predicted_at_reading_ms"])
    if read.empty:
        return ""
    read = read.assign(at_reading_pct=(read["predicted_at_reading_ms"] / read["measured_mean_ms"] - 1) * 100)
    measured, low, high = read["measured_mean_ms"], read["host_range_low_ms"], read["host_range_high_ms"]
    read = read.assign(near_range=near_range(measured, low, high), range_width=high / low - 1)
    rows = []
    for (setting, level), group in read.groupby(["setting", "stress_level"]):
        rows.append(
            {
                "setting": setting,
                "stress_level": level,
                "cases": len(group),
                "reading_ms_median": group["host_loop_ms"].median(),
                "as_predicted_mape_pct": group["error_pct"].abs().mean(),
                "as_predicted_within_10_pct": (group["error_pct"].abs() <= 10).mean() * 100,
                "at_reading_mape_pct": group["at_reading_pct"].abs().mean(),
                "at_reading_within_10_pct": (group["at_reading_pct"].abs() <= 10).mean() * 100,
                # NaN where the composition records no range (its timings carried no readings)
                "host_range_within_10_pct": group["near_range"].mean() * 100 if low.notna().any() else np.nan,
                "host_range_width_pct_median": group["range_width"].median() * 100,
            }
        )
    return (
        "## At each timing's host reading\n\n"
        "Every model timing reads the host core's loop before its warm-up and after its window "
        "(`host_loop_ms`); `hase predict --host-reading` scales a prediction from the composition's reference "
        f"(the median idle reading of the timings it was fitted on): a CPU prediction at idle by "
        f"1 + {CPU_HOST_ELASTICITY} (reading / reference - 1), a loaded one not at all. The figures above are as "
        "predicted, without a reading. `host_range` is each prediction's range over the host's fast and slow states "
        "(`host_range_ms`: the same rule at the 10th and 90th percentile readings of those timings); within 10% of it "
        "means some point of it is within 10% of the measured mean, as a prediction is within 10%.\n\n"
        + pd.DataFrame(rows).round(3).to_markdown(index=False)
    )


def precision_speedups(cases: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """Per fp16/int8 variant, setting and stress level: its speed-up over its fp32 variant, measured
    (fp32 mean / its mean) and predicted (the same of the predictions in that setting), with its top-1
    agreement with fp32 on random inputs; empty where no variant has another precision.

    Args:
        cases: the evaluation's cases (``setting``, ``variant_id``, ``stress_level``, means).
        models: :func:`~hase_dagster.learn.training.measured_models` rows (``base_variant_id``,
            ``top1_agreement``).
    """
    columns = [
        "setting", "architecture", "precision", "batch_size", "stress_level", "variant_id",
        "measured_speedup", "predicted_speedup", "speedup_error_pct", "top1_agreement",
    ]  # fmt: skip
    if "precision" not in cases or not (cases["precision"] != "fp32").any():
        return pd.DataFrame(columns=columns)
    info = models.drop_duplicates("variant_id").set_index("variant_id")
    keyed = cases.set_index(["setting", "variant_id", "stress_level"])
    rows = []
    for case in cases[cases["precision"] != "fp32"].to_dict("records"):
        # An unseen precision's predictor is its architecture's held-out one: compare with that fp32 case.
        setting = "held_out_architecture" if case["setting"] == "unseen_precision" else case["setting"]
        base = (setting, info.loc[case["variant_id"], "base_variant_id"], case["stress_level"])
        if base not in keyed.index:
            continue
        fp32 = keyed.loc[base]
        measured = float(fp32["measured_mean_ms"]) / float(case["measured_mean_ms"])
        predicted = float(fp32["predicted_mean_ms"]) / float(case["predicted_mean_ms"])
        agreement = info.loc[case["variant_id"], "top1_agreement"]
        rows.append(
            {
                "setting": case["setting"],
                "architecture": case["architecture"],
                "precision": case["precision"],
                "batch_size": case["batch_size"],
                "stress_level": case["stress_level"],
                "variant_id": case["variant_id"],
                "measured_speedup": measured,
                "predicted_speedup": predicted,
                "speedup_error_pct": (predicted / measured - 1) * 100,
                "top1_agreement": float(agreement) if pd.notna(agreement) else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def kernel_precisions_of_variants(store: Warehouse, ep: str) -> pd.DataFrame:
    """Per fp16/int8 variant: its kernels by the precision they compute in (from their element types)
    and the provider ORT placed them on, with their count and their time measured alone at idle (sum of
    medians, where measured): which kernels really run in INT8 or FP16 and which fall back to fp32 or
    to another provider."""
    return store.query(
        """SELECT k.variant_id, f.precision AS model_precision, coalesce(k.precision, 'fp32') AS kernel_precision,
                  coalesce(n.provider, '') AS provider, count(*) AS kernels,
                  string_agg(DISTINCT k.op_type, ', ' ORDER BY k.op_type) AS ops, sum(b.median_ms) AS idle_ms
           FROM kernels k JOIN model_files f USING (variant_id)
           LEFT JOIN optimized_nodes n ON n.variant_id = k.variant_id AND n.ep = k.ep AND n.node_name = k.node_name
           LEFT JOIN kernel_benchmarks b ON b.instance_id = k.instance_id AND b.ep = k.ep
                 AND b.batch_size = k.batch_size AND b.stress_level = 0 AND b.status = 'ok'
           WHERE k.ep = ? AND coalesce(f.precision, 'fp32') <> 'fp32'
           GROUP BY ALL ORDER BY 1, 3, 4""",
        [ep],
    )


def _reference_rows_markdown(store: Warehouse, ep: str) -> str:
    """What the regressors trained on besides this warehouse's rows: the reference probe rows
    (``learn.reference_rows``), their count and speed ratios."""
    frame = store.query(
        """SELECT count(*) AS reference_rows, count(DISTINCT instance_id) AS kernels,
                  median(speed_ratio) AS median_speed_ratio, quantile_cont(speed_ratio, 0.1) AS p10_ratio,
                  quantile_cont(speed_ratio, 0.9) AS p90_ratio
           FROM reference_kernel_rows WHERE ep = ?""",
        [ep],
    )
    if not int(frame["reference_rows"].iloc[0]):
        return "## Reference rows\n\n_none: every predictor trained on this warehouse's own kernel rows only_"
    return (
        "## Reference rows\n\nEvery predictor above (the shipped one and each held-out one) also trained on "
        "design-space probe rows of the profile's reference tables, timed on another machine and scaled to "
        "this one's speed (this machine's time over the reference's, per row); probes are never test cases.\n\n"
        + frame.round(3).to_markdown(index=False)
    )


def _kernel_precision_markdown(store: Warehouse, ep: str) -> str:
    frame = kernel_precisions_of_variants(store, ep)
    if frame.empty:
        return "## Kernels of the fp16 and int8 variants\n\n_no fp16 or int8 variant catalogued_"
    return (
        "## Kernels of the fp16 and int8 variants\n\nWhat each variant's kernels compute in (int8 where an "
        "input is 8-bit, fp16 where one is float16, else fp32) and the provider ORT placed them on; `idle_ms` "
        "sums their medians timed alone at idle. On the CPU EP an fp16 model's convolutions run in fp32 "
        "between Casts.\n\n" + frame.round(3).to_markdown(index=False)
    )


def _speedup_markdown(speedups: pd.DataFrame | None) -> str:
    if speedups is None or speedups.empty:
        return "## Precision speed-ups\n\n_no fp16 or int8 variant measured_"
    return (
        "## Precision speed-ups\n\nPer fp16/int8 variant: its fp32 variant's mean latency over its own, measured and "
        "predicted in the same setting at the same stress level (above 1: faster than fp32), and its top-1 "
        "agreement with fp32 on random inputs (argmax of the output over 8 random batches; rows tied for the "
        "top left out).\n\n" + speedups.round(3).to_markdown(index=False)
    )


def error_measures(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE, the 50th and 95th percentiles of the absolute % error, the shares within +-5% and
    +-10% (all in %), and Spearman's rank correlation (NaN under 3 cases)."""
    from scipy.stats import spearmanr

    if len(measured) == 0:
        return {k: float("nan") for k in ("mape", "p50_abs", "p95_abs", "within_5", "within_10", "spearman")}
    error = np.abs(predicted / measured - 1) * 100
    spearman = float(spearmanr(predicted, measured).statistic) if len(measured) >= 3 else float("nan")
    return {
        "mape": float(error.mean()),
        "p50_abs": float(np.percentile(error, 50)),
        "p95_abs": float(np.percentile(error, 95)),
        "within_5": float((error <= 5).mean() * 100),
        "within_10": float((error <= 10).mean() * 100),
        "spearman": spearman,
    }


def _scores(frame: pd.DataFrame, column: str, truth: str = "measured_mean_ms") -> dict[str, float]:
    ok = frame[column].notna()
    return error_measures(frame.loc[ok, column].to_numpy(dtype=float), frame.loc[ok, truth].to_numpy(dtype=float))


def _summary(cases: pd.DataFrame, by: str = "stress_level") -> pd.DataFrame:
    """Per setting and ``by`` value (with an ``all`` row per setting): the error measures of the
    mean and of p90, and both baselines' MAPE on the mean. ``by`` may be ``batch_and_stress``."""
    cases = cases.assign(
        batch_and_stress=cases["batch_size"].astype(str) + " @ " + cases["stress_level"].map("{:.2f}".format)
    )
    out = []
    for setting, by_setting in cases.groupby("setting", sort=False):
        for value, group in [*by_setting.groupby(by), ("all", by_setting)]:
            mean = _scores(group, "predicted_mean_ms")
            p90 = _scores(group, "predicted_p90_ms", "measured_p90_ms")
            out.append(
                {
                    "setting": setting,
                    by: value,
                    "cases": len(group),
                    "mean_mape_pct": mean["mape"],
                    "mean_p50_abs_pct": mean["p50_abs"],
                    "mean_p95_abs_pct": mean["p95_abs"],
                    "mean_within_5_pct": mean["within_5"],
                    "mean_within_10_pct": mean["within_10"],
                    "mean_spearman": mean["spearman"],
                    "p90_mape_pct": p90["mape"],
                    "p90_within_10_pct": p90["within_10"],
                    "p90_spearman": p90["spearman"],
                    "flops_proportional_mape_pct": _scores(group, "flops_proportional_ms")["mape"],
                    "idle_kernel_sum_mape_pct": _scores(group, "idle_kernel_sum_ms")["mape"],
                }
            )
    return pd.DataFrame(out)


def _markdown(ep: str, cases: pd.DataFrame, summaries: dict[str, pd.DataFrame], worst: pd.DataFrame) -> str:
    table = lambda f: f.round(3).to_markdown(index=False) if len(f) else "_none_"  # noqa: E731
    columns = [
        "setting",
        "variant_id",
        "family",
        "batch_size",
        "stress_level",
        "measured_mean_ms",
        "predicted_mean_ms",
        "error_pct",
        "measured_p90_ms",
        "predicted_p90_ms",
        "critical_path_ms",
        "fallback_kernels",
    ]
    settings = (
        "Settings: `trained_on_all` is the predictor that ships, evaluated on the models it was trained on; "
        "`held_out_architecture` predicts each training architecture with a predictor trained without it; "
        "`held_out_family` predicts each one with a predictor trained without its whole family (residual CNN, "
        "mobile, dense/concat, vision transformer, text transformer, random NAS); `unseen_precision` predicts "
        "an fp16/int8 variant whose precision no other training architecture has with its architecture's "
        "held-out predictor, which saw no kernel of that precision; `never_seen` predicts the "
        "profile's held-out models, which no predictor ever trained on. Design-space probes (family "
        "`design_space`, carriers of sampled kernels) are in every predictor's training and no test case. "
        "Error measures: MAPE, the 50th and "
        "95th percentiles of the absolute error, the shares within +-5% and +-10% (all in %) and Spearman's "
        "rank correlation, for the mean and for p90. Baselines on the same cases: FLOPs-proportional (ms per "
        "FLOP fitted per batch size and stress level on the other training architectures) and the load-blind "
        "sum of the model's kernels measured on an idle device."
    )
    parts = [f"# Hase evaluation on {ep}", settings]
    for by, frame in summaries.items():
        parts.append(f"## By {by.replace('_', ' ')}\n\n" + table(frame))
    parts += [
        "## Worst five per setting\n\n"
        + table(
            worst[
                [
                    "setting",
                    "variant_id",
                    "batch_size",
                    "stress_level",
                    "measured_mean_ms",
                    "predicted_mean_ms",
                    "error_pct",
                    "fallback_kernels",
                    "largest_kernel_errors",
                ]
            ]
        ),
        "## Every case\n\n" + table(cases[columns]),
    ]
    return "\n\n".join(parts)


def write_report(
    result: Evaluation, out_dir: str | os.PathLike[str], title: str, optimized_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Write ``evaluation.md`` (with the execution-overlap section where the optimized graphs are at
    hand) and ``evaluation.png`` into ``out_dir``; return the plot's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    overlap = "\n\n" + overlap_section(optimized_dir) if optimized_dir is not None else ""
    (out / "evaluation.md").write_text(result.markdown + overlap)
    return scatter_plot(result.cases, out / "evaluation.png", title)


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


def scatter_plot(cases: pd.DataFrame, path: str | os.PathLike[str], title: str, width_px: int | None = None) -> Path:
    """Predicted vs measured mean latency, one colour per stress level, one panel per setting.

    Args:
        cases: the evaluation cases (``setting``, ``stress_level``, measured and predicted means).
        path: the PNG to write.
        title: the panels' title prefix.
        width_px: None for the report's plot (panels side by side, 660 px per panel); else the
            image's width in pixels, panels stacked (the UI shows a metadata image at its own size).

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(cases["setting"]))
    dpi = 110
    if width_px is None:
        rows, columns, size = 1, len(settings), (6.0 * len(settings), 5.0)
    else:
        rows, columns, size = len(settings), 1, (width_px / dpi, 0.75 * width_px / dpi * len(settings))
    figure, axes = plt.subplots(rows, columns, figsize=size, squeeze=False)
    for axis, setting in zip(axes.flat, settings):
        group = cases[cases["setting"] == setting]
        for level, points in group.groupby("stress_level"):
            axis.scatter(points["measured_mean_ms"], points["predicted_mean_ms"], label=f"stress {level:.2f}", s=30)
        low = float(min(group["measured_mean_ms"].min(), group["predicted_mean_ms"].min())) * 0.8
        high = float(max(group["measured_mean_ms"].max(), group["predicted_mean_ms"].max())) * 1.2
        line = np.array([low, high])
        axis.plot(line, line, "k-", lw=1)
        axis.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, label="+-10%")
        axis.set(
            xscale="log",
            yscale="log",
            xlabel="measured mean (ms)",
            ylabel="predicted mean (ms)",
            title=f"{title}: {setting}",
        )
        axis.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path
