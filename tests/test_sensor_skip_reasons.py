"""Every sensor tick that requests no run says why (issue 13: a tick showed SKIPPED with an empty reason).

Dagster marks a tick SKIPPED with the sensor's skip reason when the sensor returns no new run request:
a sensor that only adds partitions, or one whose requests all reuse run keys (Dagster drops those), left
the reason empty.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from resources.hase import HaseResource
from sensors.backfill import SENSOR_NAME, batch_size_backfill_sensor
from sensors.batch_sizes import batch_size_partitions_sensor


def _run_requested_by_the_backfill_sensor(instance: dg.DagsterInstance, run_key: str) -> dg.DagsterRun:
    @dg.op
    def noop() -> None:
        pass

    @dg.job(name="analysis_job")
    def job() -> None:
        noop()

    tags = {"dagster/sensor_name": SENSOR_NAME, "dagster/run_key": run_key, "dagster/partition": "1"}
    return instance.create_run_for_job(job, tags=tags, status=dg.DagsterRunStatus.STARTED)


def test_adding_partitions_names_what_it_added(test_config: Path) -> None:
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance, resources={"hase": HaseResource(config_path=str(test_config))}
        )
        result = batch_size_partitions_sensor(context)
        assert result.dynamic_partitions_requests and not result.run_requests
        assert result.skip_reason is not None
        assert "added batch-size partitions ['1', '2']" in result.skip_reason.skip_message


def test_the_backfill_sensor_names_the_runs_it_waits_for() -> None:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batch_size", ["1"])
        first = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert [r.run_key for r in first.run_requests] == ["analysis-1"]
        run = _run_requested_by_the_backfill_sensor(instance, "analysis-1")
        again = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert not again.run_requests  # Dagster would drop it, and show the tick SKIPPED with no reason
        assert again.skip_reason is not None
        message = again.skip_reason.skip_message
        assert "waiting for runs requested earlier" in message and "analysis-1" in message and run.run_id[:8] in message


def test_a_run_key_used_by_another_sensor_does_not_hold_this_one() -> None:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batch_size", ["1"])

        @dg.op
        def noop() -> None:
            pass

        @dg.job(name="analysis_job")
        def job() -> None:
            noop()

        tags = {"dagster/sensor_name": "someone_else", "dagster/run_key": "analysis-1"}
        instance.create_run_for_job(job, tags=tags, status=dg.DagsterRunStatus.STARTED)
        result = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert [r.run_key for r in result.run_requests] == ["analysis-1"]
