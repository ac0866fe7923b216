"""Carry every batch size end to end: analysis first, then every stress level's benchmarks, then the
learning job once, so the regressor, predictions and evaluation cover the new batch size."""

import dagster as dg

from assets.jobs import analysis_job, benchmark_job, learning_job
from assets.partitions import batch_size_partitions, stress_level_partitions

# The last asset of each job: when it has the partition, the job is done for it.
ANALYSED = dg.AssetKey("model_dags")
MEASURED = dg.AssetKey("model_benchmarks")
LEARNED = dg.AssetKey("latency_regressor")
SENSOR_NAME = "batch_size_backfill_sensor"


@dg.sensor(
    name=SENSOR_NAME,
    jobs=[analysis_job, benchmark_job, learning_job],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def batch_size_backfill_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """For every batch-size partition: request ``analysis_job`` until it is analysed, then
    ``benchmark_job`` for each stress level not yet measured. Once everything is measured and a
    benchmark is newer than the regressor, request ``learning_job``. Run keys make each request once;
    a failed run is retried from the UI, not in a loop."""
    instance = context.instance
    analysed = instance.get_materialized_partitions(ANALYSED)
    measured = instance.get_materialized_partitions(MEASURED)
    requests = []
    for batch in instance.get_dynamic_partitions(batch_size_partitions.name):
        if batch not in analysed:
            requests.append(dg.RunRequest(job_name=analysis_job.name, partition_key=batch, run_key=f"analysis-{batch}"))
            continue
        for level in stress_level_partitions.get_partition_keys():
            key = dg.MultiPartitionKey({"stress_level": level, "batch_size": batch})
            if str(key) not in measured:
                requests.append(
                    dg.RunRequest(job_name=benchmark_job.name, partition_key=key, run_key=f"benchmark-{key}")
                )
    if requests:
        return only_new(instance, requests)
    measured_at = instance.get_latest_materialization_event(MEASURED)
    learned_at = instance.get_latest_materialization_event(LEARNED)
    if measured_at is not None and (learned_at is None or learned_at.timestamp < measured_at.timestamp):
        run_key = f"learning-after-{measured_at.timestamp:.6f}"
        return only_new(instance, [dg.RunRequest(job_name=learning_job.name, run_key=run_key)])
    return dg.SensorResult(
        skip_reason="every batch size is analysed and benchmarked at every stress level, and learned from"
    )


def only_new(instance: dg.DagsterInstance, requests: list[dg.RunRequest]) -> dg.SensorResult:
    """The requests whose run key this sensor has not used yet; when none is left, a skip that names
    the runs already requested (Dagster would drop those requests itself, and its tick would show
    SKIPPED with no reason)."""
    new, waiting = [], []
    for request in requests:
        tags = {"dagster/sensor_name": SENSOR_NAME, "dagster/run_key": str(request.run_key)}
        earlier = instance.get_runs(filters=dg.RunsFilter(tags=tags), limit=1)
        if earlier:
            waiting.append(f"{request.run_key} (run {earlier[0].run_id[:8]}, {earlier[0].status.value})")
        else:
            new.append(request)
    if new:
        return dg.SensorResult(run_requests=new)
    shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
    return dg.SensorResult(
        skip_reason=f"waiting for runs requested earlier ({shown}); a failed one is retried from the UI"
    )
