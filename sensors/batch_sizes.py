"""Keep the batch-size partitions in step with the active profile."""

import dagster as dg

from assets.partitions import batch_size_partitions
from resources.hase import HaseResource


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def batch_size_partitions_sensor(context: dg.SensorEvaluationContext, hase: HaseResource) -> dg.SensorResult:
    """Add a partition for every batch size of the profile that the instance does not have yet."""
    wanted = [str(b) for b in hase.profile().batch_sizes]
    existing = set(context.instance.get_dynamic_partitions(batch_size_partitions.name))
    missing = [b for b in wanted if b not in existing]
    if not missing:
        return dg.SensorResult(skip_reason=f"all batch sizes {wanted} are partitions already")
    # No run here, so Dagster marks the tick SKIPPED: say what it did instead of an empty reason.
    return dg.SensorResult(
        dynamic_partitions_requests=[batch_size_partitions.build_add_request(missing)],
        skip_reason=f"added batch-size partitions {missing}; batch_size_backfill_sensor requests their runs",
    )
