"""The learning half: kernel regressor, predictions for every zoo model, and the evaluation report."""

import base64
import json
from datetime import UTC, datetime

import dagster as dg
import pandas as pd

from assets.analysis import POOL, model_dags
from assets.measurement import kernel_benchmarks, model_benchmarks
from hase_dagster.core.config import load_config
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.evaluation import evaluate, scatter_plot, write_report
from hase_dagster.learn.predict import predict_model
from hase_dagster.learn.reference_rows import CalibrationError, refresh_reference_rows
from hase_dagster.learn.training import Predictor, kernels_by_variant, load_at_level, predictor_path, train_predictor
from resources.hase import HaseResource
from resources.prometheus import PrometheusResource

GROUP = "learning"
UI_PLOT_WIDTH_PX = 640  # the evaluation plot as the UI shows it (metadata "scatter")


@dg.asset(
    deps=[kernel_benchmarks],
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "xgboost"},
    check_specs=[dg.AssetCheckSpec("reference_rows_calibrated", asset="reference_kernel_rows")],
    description="The design-space probe rows of the profile's reference tables (another machine's), scaled to this "
    "machine's speed by the kernels both timed; the regressor trains on them beside this machine's rows.",
)
def reference_kernel_rows(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    profile = hase.profile()
    ep = profile.execution_provider
    try:
        rows, calibration = refresh_reference_rows(
            hase.warehouse(), ep, profile.reference_tables, hase.paths().root / "reference" / "tables.duckdb"
        )
    except CalibrationError as exc:
        # Not fatal: the regressor trains on this machine's rows alone, and the failed check says why.
        context.log.warning(f"no reference rows: {exc}")
        return dg.MaterializeResult(
            metadata={"ep": ep, "rows": 0, "reference_tables": profile.reference_tables},
            check_results=[
                dg.AssetCheckResult(
                    check_name="reference_rows_calibrated",
                    passed=False,
                    severity=dg.AssetCheckSeverity.WARN,
                    metadata={"reason": str(exc)},
                )
            ],
        )
    if calibration is None:
        return dg.MaterializeResult(
            metadata={"ep": ep, "rows": 0, "reference_tables": "none"},
            check_results=[
                dg.AssetCheckResult(
                    check_name="reference_rows_calibrated", passed=True, metadata={"reason": "no reference tables"}
                )
            ],
        )
    context.log.info(calibration.describe(rows))
    spread = {}
    if len(rows):
        spread = {
            "kernels": int(rows["instance_id"].nunique()),
            "probes": int(rows["architecture"].str.split(",").explode().nunique()),
            "speed_ratio_p10_p90": f"{rows['speed_ratio'].quantile(0.1):.2f} - {rows['speed_ratio'].quantile(0.9):.2f}",
        }
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "reference_tables": profile.reference_tables,
            "rows": len(rows),
            **spread,
            "shared_timings": calibration.pairs,
            "median_speed_ratio": calibration.median_ratio,
            "ratio_cross_validated_error_pct": calibration.cross_validated_error_pct,
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="reference_rows_calibrated",
                passed=True,
                metadata={"shared_timings": calibration.pairs},
            )
        ],
    )


@dg.asset(
    deps=[kernel_benchmarks, model_benchmarks, reference_kernel_rows],
    group_name=GROUP,
    pool=POOL,
    kinds={"xgboost", "scikitlearn"},
    check_specs=[dg.AssetCheckSpec("held_out_rows_mape_within_limit", asset="latency_regressor", blocking=True)],
    description="Per-kernel latency regressor (best of FLOPs baseline, RandomForest, XGBoost) and model composition.",
)
def latency_regressor(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    profile = hase.profile()
    ep = profile.execution_provider
    predictor = train_predictor(hase.warehouse(), ep, cross_fit=profile.cross_fit_composition)
    path = predictor.save(predictor_path(hase.paths().root, ep))
    metrics = predictor.regressor.metrics
    comparison = pd.DataFrame(
        [
            {
                "kind": kind,
                "held_out_rows_mape_median": result["held_out_rows"]["mape"],
                "within_10_pct": result["held_out_rows"]["within_10"],
                "mape_mean_target": result["held_out_rows_by_target"]["mean_ms"],
                "mape_p90_target": result["held_out_rows_by_target"]["p90_ms"],
                "held_out_architectures_mape": result["held_out_architectures"].get("overall", {}).get("mape"),
            }
            for kind, result in metrics["comparison"].items()
        ]
    )
    best = metrics["comparison"][metrics["best"]]
    per_family = pd.DataFrame(sorted(best["held_out_rows"]["per_family"].items()), columns=["family", "mape_pct"])
    held_out_mape = best["held_out_rows"]["mape"]
    limit = load_config(hase.config_path or None).max_held_out_rows_mape_pct
    context.log.info(f"best {metrics['best']}: held-out rows MAPE {held_out_mape:.1f}% on {ep}")
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "path": dg.MetadataValue.path(str(path)),
            "best": metrics["best"],
            "training_rows": metrics["training_rows"],
            "held_out_rows_mape_pct": held_out_mape,
            "comparison": dg.MetadataValue.md(comparison.to_markdown(index=False)),
            "held_out_architectures": dg.MetadataValue.json(best["held_out_architectures"]),
            "mape_per_family": dg.MetadataValue.md(per_family.to_markdown(index=False)),
            "composition": dg.MetadataValue.json(predictor.composition.to_json()),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="held_out_rows_mape_within_limit",
                passed=held_out_mape <= limit,
                metadata={"mape_pct": held_out_mape, "limit_pct": limit},
            )
        ],
    )


@dg.asset(
    deps=[latency_regressor, model_dags],
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb"},
    description="Predicted latency of every zoo model variant at each benchmarked load and at the current "
    "load Prometheus reports (re-run by prometheus_load_sensor when the load changes bucket).",
)
def latency_predictions(
    context: dg.AssetExecutionContext, hase: HaseResource, prometheus: PrometheusResource
) -> dg.MaterializeResult:
    ep = hase.profile().execution_provider
    store = hase.warehouse()
    predictor = Predictor.load(predictor_path(hase.paths().root, ep))
    levels = store.query("SELECT DISTINCT stress_level FROM kernel_benchmarks WHERE ep = ? ORDER BY 1", [ep])
    loads = {f"level={level:.2f}": load_at_level(store, ep, level) for level in levels["stress_level"]}
    try:
        loads["prometheus"] = prometheus.current_load(predictor.regressor.load_fields)
    except HaseError as exc:
        context.log.warning(f"no current-load prediction: {exc}")
    files = store.query(
        "SELECT variant_id, batch_size, coalesce(precision, 'fp32') AS precision FROM model_files"
    ).set_index("variant_id")
    batch_of, precision_of = files["batch_size"], files["precision"]
    rows = []
    now = datetime.now(UTC).replace(tzinfo=None)
    for variant, kernels in kernels_by_variant(store, ep).items():
        for source, load in loads.items():
            batch = int(batch_of.get(variant, 0)) or None
            prediction = predict_model(
                variant, kernels, predictor.regressor, predictor.composition, load, source, batch
            )
            rows.append(
                {
                    "variant_id": variant,
                    "ep": ep,
                    "batch_size": batch or 0,
                    "precision": str(precision_of.get(variant, "fp32")),
                    "load_source": source,
                    "load_util": load[predictor.regressor.load_fields[0]],
                    "predicted_ms": prediction.predicted_ms,
                    "p90_ms": prediction.p90_ms,
                    "critical_path_ms": prediction.critical_path_ms,
                    "sequential_sum_ms": prediction.sequential_sum_ms,
                    "kernels": prediction.coverage["kernels"],
                    "fallback_kernels": prediction.coverage["fallback"],
                    "warnings": json.dumps(prediction.warnings),
                    "predicted_at": now,
                    "run_id": context.run_id,
                }
            )
    frame = pd.DataFrame(rows)
    store.replace_partition("latency_predictions", {"ep": ep}, frame)
    shown = frame[
        [
            "variant_id",
            "precision",
            "load_source",
            "load_util",
            "predicted_ms",
            "p90_ms",
            "critical_path_ms",
            "fallback_kernels",
        ]
    ]
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "predictions": len(frame),
            "loads": list(loads),
            "table": dg.MetadataValue.md(shown.round(3).to_markdown(index=False)),
        }
    )


@dg.asset(
    deps=[latency_regressor],
    group_name=GROUP,
    pool=POOL,
    kinds={"pandas", "duckdb"},
    description="Predicted vs measured latency of every zoo model at every stress level, with held-out "
    "architectures and two baselines; markdown report and scatter plot.",
)
def evaluation_report(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    ep = hase.profile().execution_provider
    store = hase.warehouse()
    shipped = Predictor.load(predictor_path(hase.paths().root, ep))
    result = evaluate(store, ep, shipped)
    out_dir = hase.paths().reports(ep)
    image = write_report(result, out_dir, f"Hase on {ep}", hase.paths().optimized(ep))
    cases = result.cases.drop(columns=["error_pct"]).assign(
        error_pct=result.cases["error_pct"], ep=ep, run_id=context.run_id
    )
    store.replace_partition("evaluation_cases", {"ep": ep}, cases)
    overall = result.summary[result.summary["stress_level"] == "all"].set_index("setting")
    # The UI shows a markdown image at its own size, and its metadata dialog is narrower than the
    # report's plot: a 640 px copy with the panels stacked fits.
    fitted = scatter_plot(result.cases, out_dir / "evaluation-ui.png", f"Hase on {ep}", width_px=UI_PLOT_WIDTH_PX)
    encoded = base64.b64encode(fitted.read_bytes()).decode()
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "report": dg.MetadataValue.path(str(out_dir / "evaluation.md")),
            "plot": dg.MetadataValue.path(str(image)),
            **{
                ("mean_mape_pct" if setting == "trained_on_all" else f"{setting}_mean_mape_pct"): float(value)
                for setting, value in overall["mean_mape_pct"].items()
            },
            "summary": dg.MetadataValue.md(result.summary.round(2).to_markdown(index=False)),
            "precision_speedups": dg.MetadataValue.md(
                result.speedups.round(3).to_markdown(index=False)
                if result.speedups is not None and len(result.speedups)
                else "_no fp16 or int8 variant measured_"
            ),
            "scatter": dg.MetadataValue.md(f"![predicted vs measured](data:image/png;base64,{encoded})"),
        }
    )


@dg.asset(
    # fusion_rules (assets.static_detection) by key: the bundle carries the rules that asset writes.
    deps=[latency_regressor, dg.AssetKey("fusion_rules")],
    group_name=GROUP,
    pool=POOL,
    kinds={"xgboost", "json"},
    check_specs=[dg.AssetCheckSpec("bundle_predicts_as_its_predictor", asset="predictor_bundle", blocking=True)],
    description="The profile's trained predictor as a portable bundle (predictor, fusion rules where the "
    "fusion_rules asset wrote them, load table, provenance, evaluation figures, checksums), for "
    "`hase predict --predictor` on machines without the device.",
)
def predictor_bundle(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    from hase_dagster.learn.bundles import bundle_rules_path, export_bundle, local_provenance, read_bundle

    profile = hase.profile()
    ep = profile.execution_provider
    paths = hase.paths()
    predictor = Predictor.load(predictor_path(paths.root, ep))
    name = f"{profile.name or ep}-local"
    rules = bundle_rules_path(paths.root, ep)
    provenance = {**local_provenance(ep), "profile": profile.name}
    folder = export_bundle(hase.warehouse(), ep, predictor, paths.bundles / name, name, rules, provenance)
    bundle = read_bundle(folder)
    # The bundle must predict what its predictor predicts on the same kernels.
    store = hase.warehouse()
    kernels = next(iter(kernels_by_variant(store, ep).items()), None)
    same = True
    if kernels is not None:
        load = bundle.load_for("idle")[0]
        ours = predict_model(kernels[0], kernels[1], predictor.regressor, predictor.composition, load, "", None)
        theirs = predict_model(
            kernels[0], kernels[1], bundle.predictor.regressor, bundle.predictor.composition, load, "", None
        )
        same = abs(ours.predicted_ms - theirs.predicted_ms) <= 1e-6 * max(ours.predicted_ms, 1e-9)
    headline = bundle.document["evaluation"].get("headline", {})
    context.log.info(f"bundle {name} written to {folder}; fusion rules: {rules or 'none'}")
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "path": dg.MetadataValue.path(str(folder)),
            "fusion_rules": str(rules) if rules else "none (static detection unavailable)",
            "bytes": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()),
            "evaluation": dg.MetadataValue.json(headline),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="bundle_predicts_as_its_predictor",
                passed=same,
                metadata={"variant": str(kernels[0]) if kernels else ""},
            )
        ],
    )


# Above this cross-validated error of the speed ratio, the calibrated bundle's kernel times are not to be trusted.
MAX_CALIBRATION_ERROR_PCT = 10.0


@dg.asset(
    deps=[kernel_benchmarks],
    group_name=GROUP,
    pool=POOL,
    kinds={"xgboost", "json"},
    check_specs=[dg.AssetCheckSpec("calibration_cross_validated", asset="calibrated_bundle")],
    description="The profile's calibrate_bundle (a bundle trained on its reference_tables) carried to this device: "
    "each kernel's time x the speed ratio learned from the kernels both devices timed, for `hase predict "
    "--predictor` (nothing when the profile names no calibrate_bundle).",
)
def calibrated_bundle(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    from hase_dagster.learn.bundles import calibrate_bundle, load_bundle, tables_kernel_benchmarks

    profile = hase.profile()
    ep = profile.execution_provider
    if not profile.calibrate_bundle or not profile.reference_tables:
        return dg.MaterializeResult(
            metadata={"ep": ep, "bundle": "none"},
            check_results=[
                dg.AssetCheckResult(
                    check_name="calibration_cross_validated",
                    passed=True,
                    metadata={"reason": "the profile names no calibrate_bundle"},
                )
            ],
        )
    paths = hase.paths()
    source = load_bundle(profile.calibrate_bundle, paths.root)
    local = hase.warehouse().query("SELECT * FROM kernel_benchmarks WHERE ep = ?", [ep])
    reference = tables_kernel_benchmarks(profile.reference_tables, ep)
    name = f"{profile.name or ep}-calibrated"
    where = {"profile": profile.name, "reference_tables": profile.reference_tables}
    folder, calibration = calibrate_bundle(source, local, reference, paths.bundles / name, name, provenance=where)
    error = calibration.cross_validated_error_pct
    context.log.info(
        f"bundle {name} ({calibration.device}) from {source.name}: {calibration.pairs} shared kernel timings, "
        f"median ratio {calibration.median_ratio:.3f}, cross-validated error {error:.1f}%"
    )
    figures = {
        "pairs": calibration.pairs,
        "median_speed_ratio": calibration.median_ratio,
        "cross_validated_error_pct": calibration.cross_validated_error_pct,
    }
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "bundle": name,
            "source_bundle": source.name,
            "device": calibration.device,
            "path": dg.MetadataValue.path(str(folder)),
            **figures,
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="calibration_cross_validated",
                passed=error <= MAX_CALIBRATION_ERROR_PCT,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={**figures, "max_error_pct": MAX_CALIBRATION_ERROR_PCT},
            )
        ],
    )


learning_assets = [
    reference_kernel_rows,
    latency_regressor,
    latency_predictions,
    evaluation_report,
    predictor_bundle,
    calibrated_bundle,
]
