"""Convolution implementations compared (issue 14 B): im2col + GEMM in PyTorch (eager and under
torch.compile), JAX (lax.conv_general_dilated and an im2col), torch's conv2d (the reference) and ORT's
Conv as Hase times it, on the profile's device, every result checked against conv2d."""

import shutil

import dagster as dg

from assets.analysis import POOL
from assets.device import device_partitions
from resources.hase import HaseResource

GROUP = "convolution"


class ConvImplementationsConfig(dg.Config):
    """The grid to measure. Empty fields: on a CPU the small grid (3 cases) in fp32, about 30 s of
    work on 2 cores; on a GPU the full grid (27 cases) in fp32, fp16 and bf16."""

    grid: str = ""  # full | small | tiny
    precisions: list[str] = []  # fp32, tf32, fp16, bf16
    implementations: list[str] = []  # default: all of hase_dagster.measure.conv_impls.IMPLEMENTATIONS


@dg.asset(
    # One partition per device, as the device profile (whose job runs it): a profile measures its own device.
    partitions_def=device_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"pytorch", "jax", "onnx"},
    check_specs=[dg.AssetCheckSpec("matches_conv2d", asset="conv_implementations")],
    description="One convolution, six implementations, the same device: device and host time, first-call "
    "compile time, peak memory, TFLOPS and % of conv2d over input 32/64/128 px x kernel 3/5/7 x three channel "
    "configurations; every output checked against float64 conv2d (shape, error within the precision's "
    "tolerance). Report with table, log-scale plot and who wins where.",
)
def conv_implementations(
    context: dg.AssetExecutionContext, config: ConvImplementationsConfig, hase: HaseResource
) -> dg.MaterializeResult:
    from hase_dagster.learn.conv_report import write_report
    from hase_dagster.measure.conv_impls import environment, grid, run_grid

    device = context.partition_key
    profile = hase.profile()
    if device != profile.device:
        raise dg.Failure(
            f"partition {device!r} is measured by a profile on {device}; this run's profile {profile.name!r} "
            f"measures {profile.device}: materialize partition {profile.device!r}"
        )
    gpu = device == "cuda"
    grid_name = config.grid or ("full" if gpu else "small")
    precisions = config.precisions or (["fp32", "fp16", "bf16"] if gpu else ["fp32"])
    out_dir = hase.paths().root / "conv_implementations" / device
    # A materialization measures afresh (the command line resumes instead).
    shutil.rmtree(out_dir, ignore_errors=True)
    rows, _ = run_grid(
        grid(grid_name), precisions, device, out_dir, config.implementations or None, log=context.log.info
    )
    env = environment(device)
    report = write_report(rows, out_dir, env, f"conv_implementations asset, grid {grid_name}, {','.join(precisions)}")
    winners = report.winners
    table = (
        winners[["precision", "case", "winner", "winner_ms", "runner_up", "margin_x", "conv2d_algorithm"]]
        .round(4)
        .to_markdown(index=False)
        if not winners.empty
        else "_none_"
    )
    failures = report.failures
    return dg.MaterializeResult(
        metadata={
            "device": device,
            "grid": grid_name,
            "precisions": ", ".join(precisions),
            "rows": report.summary["rows"],
            "rows_ran": report.summary["ran"],
            "report": dg.MetadataValue.path(str(report.markdown)),
            "plot": dg.MetadataValue.path(str(report.plot)) if report.plot else "",
            "findings": dg.MetadataValue.md("\n".join(f"- {note}" for note in report.findings)),
            "winners": dg.MetadataValue.md(table),
            "time_per_case": dg.MetadataValue.md(report.ui_plot_markdown()),
            "environment": dg.MetadataValue.json(env),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="matches_conv2d",
                passed=not failures and report.summary["ran"] > 0,
                metadata={
                    "failed_rows": dg.MetadataValue.json(failures),
                    "rows_checked": report.summary["ran"],
                },
            )
        ],
    )


conv_assets = [conv_implementations]
