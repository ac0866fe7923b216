"""The Hase code location: one Definitions merged from the parts of the asset graph."""

import dagster as dg

from assets.analysis import analysis_assets
from assets.conv_implementations import conv_assets
from assets.device import device_assets, device_profile_job
from assets.jobs import analysis_job, benchmark_job, latency_predictions_job, learning_job
from assets.learning import learning_assets
from assets.measurement import measurement_assets
from assets.partitions import measurement_partitions
from assets.profiling import profiling_assets, profiling_comparison_job, profiling_job
from assets.serving import serving_assets
from assets.static_detection import static_detection_assets
from hase_dagster.core.config import load_config
from resources.sets import hase_resources
from sensors.backfill import batch_size_backfill_sensor
from sensors.batch_sizes import batch_size_partitions_sensor
from sensors.load import prometheus_load_sensor


@dg.schedule(cron_schedule="0 2 * * *", job=benchmark_job, execution_timezone="UTC")
def nightly_benchmarks(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
    """Re-benchmark every (stress level, batch size) partition each night: loads and drivers drift."""
    keys = measurement_partitions.get_partition_keys(dynamic_partitions_store=context.instance)
    return [
        dg.RunRequest(run_key=f"{context.scheduled_execution_time:%Y%m%d}-{key}", partition_key=key) for key in keys
    ]


# One Definitions at module scope (Dagster refuses several); the parts are merged inline.
defs = dg.Definitions.merge(
    dg.Definitions(
        assets=analysis_assets, jobs=[analysis_job], sensors=[batch_size_partitions_sensor, batch_size_backfill_sensor]
    ),
    dg.Definitions(assets=measurement_assets, jobs=[benchmark_job], schedules=[nightly_benchmarks]),
    dg.Definitions(
        assets=learning_assets, jobs=[learning_job, latency_predictions_job], sensors=[prometheus_load_sensor]
    ),
    dg.Definitions(assets=device_assets, jobs=[device_profile_job]),
    dg.Definitions(assets=conv_assets),
    dg.Definitions(assets=serving_assets),
    dg.Definitions(assets=static_detection_assets),
    dg.Definitions(assets=profiling_assets, jobs=[profiling_job, profiling_comparison_job]),
    dg.Definitions(resources=hase_resources(load_config().prometheus_url)),
)
