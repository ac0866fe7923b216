"""The benchmark assets for one (stress level, batch size) partition, in-process, real ORT and DuckDB."""

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from assets.analysis import analysis_assets
from assets.measurement import measurement_assets
from hase_dagster.definitions import defs
from resources.hase import HaseResource
from resources.stressor import StressorResource
from tests.conftest import TEST_PROFILE, analysed_profile
from warehouse.store import Warehouse

PARTITION = dg.MultiPartitionKey({"stress_level": "0.50", "batch_size": "1"})


@pytest.fixture()
def resources(test_config: Path, tmp_path: Path) -> dict:
    hase = HaseResource(config_path=str(test_config), data_directory=str(tmp_path / "data"))
    return {"hase": hase, "stressor": StressorResource()}


@pytest.fixture()
def analysed(resources: dict) -> dg.DagsterInstance:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["1"])
    assert dg.materialize(analysis_assets, partition_key="1", resources=resources, instance=instance).success
    return instance


def _measure(resources: dict, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return dg.materialize(measurement_assets, partition_key=PARTITION, resources=resources, instance=instance)


def test_benchmarks_fill_and_replace_their_partition(resources: dict, analysed: dg.DagsterInstance) -> None:
    first = _measure(resources, analysed)
    assert first.success
    store: Warehouse = resources["hase"].warehouse()
    kernels = store.count("kernel_models", batch_size=1)
    assert store.count("kernel_benchmarks") == kernels > 20
    assert store.count("model_benchmarks") == 2
    rows = store.query("SELECT * FROM kernel_benchmarks")
    assert (rows["status"] == "ok").all() and (rows["stress_level"] == 0.5).all()
    assert (rows["mean_ms"] > 0).all() and (rows["start_ns"] < rows["end_ns"]).all()
    # Host metrics are measured; GPU metrics are absent on a CPU, not zero.
    assert rows["bg_HOST_CPU_UTIL"].notna().all() and rows["win_DCGM_FI_DEV_GPU_UTIL"].isna().all()
    # Every timing carries the host core's speed read beside it, kernels and whole models alike.
    models = store.query("SELECT host_loop_ms FROM model_benchmarks")
    assert (rows["host_loop_ms"] > 0).all() and (models["host_loop_ms"] > 0).all()
    assert _measure(resources, analysed).success
    assert store.count("kernel_benchmarks") == kernels and store.count("model_benchmarks") == 2


def test_a_failing_kernel_is_named_and_the_others_are_kept(resources: dict, analysed: dg.DagsterInstance) -> None:
    store: Warehouse = resources["hase"].warehouse()
    victim = Path(store.query("SELECT path FROM kernel_models WHERE family = 'Gelu' LIMIT 1")["path"][0])
    victim.write_bytes(b"not an onnx model any more")
    result = _measure(resources, analysed)
    rows = store.query("SELECT status, error, path FROM kernel_benchmarks")
    failed = rows[rows["status"] == "error"]
    assert len(failed) == 1 and victim.name in failed["error"].iloc[0]
    assert (rows["status"] == "ok").sum() == len(rows) - 1
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"every_kernel_measured": False}


def test_schedule_requests_every_partition() -> None:
    schedule = defs.resolve_schedule_def("nightly_benchmarks")
    when = datetime(2026, 11, 22, 2, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batch_size", ["1", "8"])
        requests = schedule(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
    expected = {f"{b}|{level}" for b in ("1", "8") for level in ("0.00", "0.50", "1.00")}
    assert {r.partition_key for r in requests} == expected
    assert len({r.run_key for r in requests}) == len(expected)


def test_backfill_sensor_carries_a_new_batch_size_end_to_end(resources: dict) -> None:
    from sensors.backfill import batch_size_backfill_sensor

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batch_size", ["1"])
        first = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert [(r.job_name, r.partition_key) for r in first.run_requests] == [("analysis_job", "1")]
        assert dg.materialize(analysis_assets, partition_key="1", resources=resources, instance=instance).success
        second = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert {(r.job_name, r.partition_key) for r in second.run_requests} == {
            ("benchmark_job", f"1|{level}") for level in ("0.00", "0.50", "1.00")
        }
        # Once every level is measured, learning is requested once, and again only after new benchmarks.
        for level in ("0.00", "0.50", "1.00"):
            measured = dg.AssetMaterialization("model_benchmarks", partition=f"1|{level}")
            instance.report_runless_asset_event(measured)
        third = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert [r.job_name for r in third.run_requests] == ["learning_job"]
        instance.report_runless_asset_event(dg.AssetMaterialization("latency_regressor"))
        assert not batch_size_backfill_sensor(dg.build_sensor_context(instance=instance)).run_requests
        instance.report_runless_asset_event(dg.AssetMaterialization("model_benchmarks", partition="1|0.50"))
        fourth = batch_size_backfill_sensor(dg.build_sensor_context(instance=instance))
        assert [r.job_name for r in fourth.run_requests] == ["learning_job"]
        assert fourth.run_requests[0].run_key != third.run_requests[0].run_key


def test_a_batch_of_held_out_models_alone_is_timed_whole_under_load(tmp_path: Path) -> None:
    """Held-out models' kernels are timed at idle alone; under load a batch of nothing else times them whole and
    does not fail for want of kernels (a user's own networks in a profile of their own)."""
    models = [{**m, "held_out": True} for m in TEST_PROFILE["profiles"]["tiny"]["models"]]
    hase, instance, analysis = analysed_profile(tmp_path, models)
    assert analysis.success
    resources = {"hase": hase, "stressor": StressorResource()}

    result = _measure(resources, instance)

    assert result.success
    store = hase.warehouse()
    assert store.count("kernel_benchmarks") == 0 and store.count("model_benchmarks") == 2
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks.get("every_kernel_measured") is True
