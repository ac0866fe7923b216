"""Carry every batch size end to end: analysis first, then every stress level's benchmarks."""

import dagster as dg

from assets.jobs import analysis_job, benchmark_job
from assets.partitions import batch_size_partitions, stress_level_partitions

# The last asset of each job: when it has the partition, the job is done for it.
ANALYSED = dg.AssetKey("model_dags")
MEASURED = dg.AssetKey("model_benchmarks")


@dg.sensor(
    jobs=[analysis_job, benchmark_job], minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING
)
def batch_size_backfill_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """For every batch-size partition: request ``analysis_job`` until it is analysed, then
    ``benchmark_job`` for each stress level not yet measured. Run keys make each request once; a
    failed run is retried from the UI, not in a loop."""
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
    if not requests:
        return dg.SensorResult(skip_reason="every batch size is analysed and benchmarked at every stress level")
    return dg.SensorResult(run_requests=requests)
