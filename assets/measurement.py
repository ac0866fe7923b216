"""The measurement half: every kernel and every whole model timed at each stress level.

Partitions: stress level (static, from ``hase.yaml``) x batch size (dynamic, shared with analysis).
"""

import time
import warnings
from pathlib import Path

import dagster as dg
import pandas as pd

from assets.analysis import POOL, kernel_onnx, onnx_models
from assets.partitions import measurement_partitions, stress_and_batch_of
from hase_dagster.core.ort_runtime import OptimizationLevel, device_name
from hase_dagster.learn.training import networks
from hase_dagster.measure.benchmark import BenchmarkTarget, default_progress, run_benchmarks
from resources.hase import HaseResource
from resources.stressor import StressorResource

GROUP = "measurement"
# Beta in Dagster 1.13 and the only way to map stress x batch partitions onto batch ones; its warning
# printed once per code-location load (39 times a `make dev`) says nothing a user can act on.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)
    _BY_BATCH = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="batch_size")


def _summary(frame: pd.DataFrame, key: str) -> dict[str, dg.MetadataValue | int | float | str]:
    ok = frame[frame["status"] == "ok"]
    slowest = ok.nlargest(5, "mean_ms")[[key, "mean_ms", "p90_ms", "n"]] if len(ok) else ok
    failed = frame[frame["status"] != "ok"][[key, "error"]]
    return {
        "rows": len(frame),
        "failed": len(failed),
        "median_latency_ms": float(ok["median_ms"].median()) if len(ok) else float("nan"),
        "slowest": dg.MetadataValue.md(slowest.to_markdown(index=False) if len(slowest) else "_none_"),
        "failures": dg.MetadataValue.md(failed.to_markdown(index=False) if len(failed) else "_none_"),
    }


def _measure_partition(
    context: dg.AssetExecutionContext,
    hase: HaseResource,
    stressor: StressorResource,
    targets: list[BenchmarkTarget],
    table: str,
    optimization: OptimizationLevel,
    progress_every: int,
    measure_memory: bool = False,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Time ``targets`` under the partition's stress level and replace the partition's rows of
    ``table``; return the rows and the collector's speed."""
    level, batch = stress_and_batch_of(context)
    profile = hase.profile()
    timing = profile.kernel_timing if table == "kernel_benchmarks" else profile.model_timing
    with stressor.under_load(profile.device, level, profile.telemetry) as loaded:
        steady = "n/a" if loaded.stressor.steady_load is None else f"{loaded.stressor.steady_load:.0f}%"
        context.log.info(
            f"stressor at {level:.2f} on {profile.device} (pid {loaded.stressor.pid}); steady load {steady}"
        )
        sampler = loaded.sampler
        started = time.monotonic()
        rows = run_benchmarks(
            targets,
            profile.execution_provider,
            sampler,
            timing,
            profile.telemetry,
            profile.ort,
            level=optimization,
            progress=default_progress(context.log.info, every=progress_every),
            measure_memory=measure_memory,
            # On the CUDA EP a kernel can abort the process (ORT's CUDA failure 800 on cudaFreeHost,
            # results/gpu-general/README.md): it then costs its own row, not the partition's.
            isolated=table == "kernel_benchmarks" and profile.execution_provider == "cuda",
        )
        seconds = time.monotonic() - started
    speed = {"seconds": round(seconds, 1), "per_minute": round(len(rows) / seconds * 60, 1)}
    context.log.info(f"{len(rows)} timed in {speed['seconds']} s: {speed['per_minute']:.0f} per minute")

    frame = pd.DataFrame(rows).assign(
        stress_level=level,
        batch_size=batch,
        device=device_name(profile.device),
        ep=profile.execution_provider,
        run_id=context.run_id,
    )
    partition = {"stress_level": level, "batch_size": batch, "ep": profile.execution_provider}
    hase.warehouse().replace_partition(table, partition, frame)
    return frame, speed


@dg.asset(
    deps=[dg.AssetDep(kernel_onnx, partition_mapping=_BY_BATCH)],
    partitions_def=measurement_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"onnx", "duckdb"},
    check_specs=[dg.AssetCheckSpec("every_kernel_measured", asset="kernel_benchmarks")],
    description="Every distinct kernel of the batch size timed alone under the partition's stress level.",
)
def kernel_benchmarks(
    context: dg.AssetExecutionContext, hase: HaseResource, stressor: StressorResource
) -> dg.MaterializeResult:
    level, batch = stress_and_batch_of(context)
    ep = hase.profile().execution_provider
    # An instance that only held-out models use is timed at idle alone: it never trains the
    # regressor, and the idle time is all the load-blind baseline needs.
    kernels = hase.warehouse().query(
        """SELECT m.instance_id, m.family, m.path, any_value(k.inputs_json) AS inputs_json,
                  any_value(k.outputs_json) AS outputs_json, any_value(k.attributes_json) AS attributes_json,
                  any_value(k.flops) AS flops, any_value(k.input_bytes) AS input_bytes,
                  any_value(k.output_bytes) AS output_bytes, any_value(k.weight_bytes) AS weight_bytes,
                  any_value(k.op_type) AS op_type, any_value(k.domain) AS domain,
                  coalesce(any_value(k.precision), 'fp32') AS precision
           FROM kernel_models m JOIN kernels k USING (instance_id, ep, batch_size) JOIN model_files f USING (variant_id)
           WHERE m.batch_size = ? AND m.ep = ? GROUP BY ALL
           HAVING ? = 0 OR bool_or(NOT f.held_out) ORDER BY m.family, m.instance_id""",
        [batch, ep, level],
    )
    if kernels.empty:
        extracted = hase.warehouse().query(
            "SELECT count(*) AS n FROM kernel_models WHERE batch_size = ? AND ep = ?", [batch, ep]
        )
        if level == 0 or not int(extracted["n"].iloc[0]):
            raise dg.Failure(f"no kernel models for batch size {batch} on {ep}: materialize kernel_onnx first")
        # Every model of the batch is held out (a user's own networks): their kernels are timed at idle alone.
        context.log.info(f"batch {batch}: every kernel belongs to held-out models, timed at idle only")
        return dg.MaterializeResult(
            metadata={"kernels": 0, "held_out_only": True},
            check_results=[dg.AssetCheckResult(check_name="every_kernel_measured", passed=True)],
        )
    targets = [
        BenchmarkTarget(Path(row.path), {k: v for k, v in row._asdict().items() if k not in ("path", "Index")})
        for row in kernels.itertuples()
    ]
    # Kernels run as extracted: their graph is already ORT's optimized one.
    frame, speed = _measure_partition(
        context, hase, stressor, targets, "kernel_benchmarks", "disable", progress_every=25
    )
    failed = frame.loc[frame["status"] != "ok", "error"].tolist()
    return dg.MaterializeResult(
        metadata={**_summary(frame, "family"), **speed},
        check_results=[
            dg.AssetCheckResult(
                check_name="every_kernel_measured",
                passed=not failed,
                metadata={"errors": dg.MetadataValue.json(failed)},
            )
        ],
    )


@dg.asset(
    deps=[dg.AssetDep(onnx_models, partition_mapping=_BY_BATCH)],
    partitions_def=measurement_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"onnx", "duckdb"},
    description="Whole-model latency of every model variant under the stress level: the ground truth.",
)
def model_benchmarks(
    context: dg.AssetExecutionContext, hase: HaseResource, stressor: StressorResource
) -> dg.MaterializeResult:
    _, batch = stress_and_batch_of(context)
    files = hase.warehouse().query(
        """SELECT variant_id, model_name, input_size, coalesce(precision, 'fp32') AS precision, path, family
           FROM model_files WHERE batch_size = ? ORDER BY variant_id""",
        [batch],
    )
    if files.empty:
        raise dg.Failure(f"no ONNX models for batch size {batch}: materialize onnx_models first")
    # Design-space probes train kernels only: timed whole only when the profile asks.
    models = files if hase.profile().time_design_probes else networks(files)
    if models.empty:
        # A partition of probes alone (a kernel-sampling round): nothing to time whole, and that is fine.
        context.log.info(f"{len(files)} design-space probe(s) at batch {batch}: not timed whole (time_design_probes)")
        return dg.MaterializeResult(metadata={"models": 0, "design_probes_not_timed": len(files)})
    targets = [
        BenchmarkTarget(
            Path(row.path),
            {
                "variant_id": row.variant_id,
                "model_name": row.model_name,
                "input_size": row.input_size,
                "precision": row.precision,
            },
        )
        for row in models.itertuples()
    ]
    # A user runs the model as exported, so ORT optimizes it (ORT_ENABLE_ALL) as it would for them.
    frame, speed = _measure_partition(
        context, hase, stressor, targets, "model_benchmarks", "all", progress_every=1, measure_memory=True
    )
    metadata = {**_summary(frame, "variant_id"), **speed}
    metadata["latency"] = dg.MetadataValue.md(
        frame[["variant_id", "precision", "mean_ms", "median_ms", "p90_ms", "n"]].to_markdown(index=False)
    )
    return dg.MaterializeResult(metadata=metadata)


measurement_assets = [kernel_benchmarks, model_benchmarks]
