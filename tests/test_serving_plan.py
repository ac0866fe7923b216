"""The serving simulator against cases with known answers, the planner's output and its YAML errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hase_dagster.core.errors import HaseError
from hase_dagster.core.serving_spec import BatchingConfig, PlanSpec, load_plan_spec, pick_ready
from hase_dagster.learn.serving_plan import (
    TableExecTime,
    configs_from_plan_json,
    interpolate_batches,
    plan,
    triton_config,
    write_plan,
)
from hase_dagster.learn.serving_sim import ServiceTime, SimModel, simulate


def constant(mean_ms: float, per_item_ms: float = 0.0):
    """A deterministic execution time: ``mean_ms + per_item_ms * batch`` (p90 = mean)."""

    def exec_time(model: str, batch: int, load: str) -> tuple[float, float]:
        value = mean_ms + per_item_ms * batch
        return value, value

    return exec_time


def test_md1_mean_latency_matches_pollaczek_khinchine() -> None:
    # M/D/1: Poisson arrivals at 250/s, 3 ms of service: mean wait rho*D / (2 (1 - rho)) = 4.5 ms.
    service = ServiceTime(constant(3.0))
    outcome = simulate([SimModel("a", 250.0, 100.0)], {"a": BatchingConfig(1, 0.0, 1)}, service, 120.0, seed=3)["a"]
    rho, d = 250.0 * 3.0 / 1000.0, 3.0
    expected = d + rho * d / (2 * (1 - rho))
    assert np.mean(outcome.latencies_ms) == pytest.approx(expected, rel=0.04)
    assert outcome.summary()["utilization"] == pytest.approx(rho, rel=0.03)


def test_deterministic_arrivals_fill_batches_or_wait_the_delay() -> None:
    # A request every 10 ms, batches of 4 at most, 25 ms delay, 2 ms runs: the oldest request of each
    # batch waits 25 ms (three requests have come by then), so batches are 3, and latencies are
    # 27 / 17 / 7 ms for the first, second and third request of each batch.
    arrivals = {"a": np.arange(0.0, 300.0, 10.0)}
    service = ServiceTime(constant(2.0))
    outcome = simulate(
        [SimModel("a", 100.0, 50.0)], {"a": BatchingConfig(4, 25.0, 1)}, service, 0.3, arrivals_ms=arrivals
    )["a"]
    assert outcome.batch_sizes == [3] * 10
    assert outcome.latencies_ms[:6].tolist() == pytest.approx([27.0, 17.0, 7.0, 27.0, 17.0, 7.0])
    # A full batch goes at once: with max batch 2 the second request ends the wait.
    outcome = simulate(
        [SimModel("a", 100.0, 50.0)], {"a": BatchingConfig(2, 25.0, 1)}, service, 0.3, arrivals_ms=arrivals
    )["a"]
    assert outcome.batch_sizes == [2] * 15
    assert outcome.latencies_ms[:2].tolist() == pytest.approx([12.0, 2.0])


def test_priority_goes_first_when_both_wait() -> None:
    # "low" gets a request at t=0 that waits up to 2 ms for a second one; "high" one at t=1 ms that goes
    # at once; runs take 5 ms.
    arrivals = {"low": np.array([0.0]), "high": np.array([1.0])}
    service = ServiceTime(constant(5.0))
    configs = {"low": BatchingConfig(2, 2.0, 2), "high": BatchingConfig(1, 0.0, 1)}
    models = [SimModel("low", 1.0, 100.0), SimModel("high", 1.0, 100.0)]
    out = simulate(models, configs, service, 0.01, arrivals_ms=arrivals)
    # low becomes ready at 2 ms, but high is ready at 1 ms and the device is free: high runs 1-6 ms.
    assert out["high"].latencies_ms.tolist() == pytest.approx([5.0])
    assert out["low"].latencies_ms.tolist() == pytest.approx([11.0])
    assert pick_ready({"low": (1, 0.0), "high": (1, 1.0)}, {**configs, "low": BatchingConfig(1, 0.0, 2)}, 3.0) == "high"


def test_cotenant_bursts_follow_the_measured_schedule() -> None:
    from hase_dagster.learn.serving_sim import cotenant_run_ms

    # Always busy: one burst on arrival and one per slice boundary crossed (d + burst x (1 + floor(d / slice))).
    assert cotenant_run_ms(0.1, 3.0, 1.0, 0.95, 1.75, 20.0) == pytest.approx(1.05)
    assert cotenant_run_ms(9.8, 0.0, 1.0, 0.95, 1.75, 20.0) == pytest.approx(9.8 + 6 * 0.95)
    # Busy the first half of each 20 ms: a run starting in the idle half waits nothing; one starting
    # at 9.5 ms waits one burst, which ends in the idle half.
    assert cotenant_run_ms(3.0, 12.0, 0.5, 0.95, 1.75, 20.0) == pytest.approx(3.0)
    assert cotenant_run_ms(3.0, 9.5, 0.5, 0.95, 1.75, 20.0) == pytest.approx(3.95)
    assert cotenant_run_ms(3.0, 9.5, 0.0, 0.95, 1.75, 20.0) == pytest.approx(3.0)


def test_cotenant_keeps_the_predicted_loaded_mean() -> None:
    # Idle 2 ms; 5 ms predicted under stress 1: two bursts (1.9 ms) explain part, the work stretches
    # to 3.1 ms for the rest.
    table = {"level=0.0": {"m": {1: (2.0, 2.0)}}, "level=1.0": {"m": {1: (5.0, 6.0)}}}
    service = ServiceTime(TableExecTime(table), "level=1.0", share=1.0)
    assert service.mean_ms("m", 1) == pytest.approx(5.0)
    rng = np.random.default_rng(0)
    samples = np.array([service.sample("m", 1, rng, t) for t in np.linspace(0, 200, 500)])
    assert samples == pytest.approx(5.0)
    # At half load the wait depends on where in the co-tenant's cycle a run starts: bimodal.
    half = ServiceTime(TableExecTime({**table, "level=0.5": {"m": {1: (3.0, 4.0)}}}), "level=0.5", share=0.5)
    times = np.array([half.sample("m", 1, rng, t) for t in np.linspace(0, 200, 500, endpoint=False)])
    assert times.mean() == pytest.approx(half.mean_ms("m", 1), rel=0.03)
    assert times.min() < 2.9 < times.max()


def test_overload_leaves_requests_unserved_and_misses_the_slo() -> None:
    service = ServiceTime(constant(10.0))
    outcome = simulate([SimModel("a", 200.0, 50.0)], {"a": BatchingConfig(1, 0.0, 1)}, service, 5.0, drain_s=0.5)["a"]
    assert np.isinf(outcome.latencies_ms).any()
    assert not outcome.slo_met
    assert outcome.goodput_per_s < 100.0


def test_interpolation_between_and_beyond_predicted_batches() -> None:
    points = {1: (2.0, 3.0), 4: (5.0, 6.0)}
    assert interpolate_batches(points, 2) == pytest.approx((3.0, 4.0))
    assert interpolate_batches(points, 8) == pytest.approx((10.0, 12.0))


SPEC = {
    "device": "cpu",
    "load": "level=0.5",
    "batch_sizes": [1, 2, 4, 8],
    "models": [
        {"name": "cnn", "path": "cnn.onnx", "slo_ms": 60, "priority": 1, "rate_per_s": 60},
        {"name": "enc", "path": "enc.onnx", "slo_ms": 150, "percentile": 90, "priority": 2, "rate_per_s": 40},
    ],
}
TABLE = {
    "level=0.0": {
        "cnn": {1: (8, 9), 2: (12, 13), 4: (20, 22), 8: (36, 40)},
        "enc": {1: (6, 7), 4: (15, 17), 8: (27, 30)},
    },
    "level=0.5": {
        "cnn": {1: (12, 15), 2: (17, 20), 4: (28, 32), 8: (50, 56)},
        "enc": {1: (9, 11), 4: (21, 24), 8: (38, 42)},
    },
}


def test_plan_batches_where_batch_one_cannot_keep_up(tmp_path: Path) -> None:
    result = plan(PlanSpec.model_validate(SPEC), TableExecTime(TABLE), share=0.5)
    by_name = {m.name: m for m in result.models}
    # 60/s of 12 ms runs plus 40/s of 9 ms runs is 1.08 of the device at batch 1: batching is needed.
    assert by_name["cnn"].max_batch > 1 or by_name["enc"].max_batch > 1
    assert all(m.attainable for m in result.models)
    assert by_name["cnn"].p99_ms <= 60 and by_name["enc"].p90_ms <= 150
    assert by_name["cnn"].p50_ms <= by_name["cnn"].p90_ms <= by_name["cnn"].p99_ms
    written = write_plan(result, tmp_path)
    assert {p.name for p in written} == {"plan.json", "plan.md", "config.pbtxt"}
    assert configs_from_plan_json(tmp_path / "plan.json") == result.configs
    text = (tmp_path / "cnn" / "config.pbtxt").read_text()
    assert re.search(rf"^max_batch_size: {by_name['cnn'].max_batch}$", text, re.M)
    delay_us = int(round(by_name["cnn"].max_queue_delay_ms * 1000))
    block = re.search(r"dynamic_batching \{\n(.*?)\n\}", text, re.S)
    assert block is not None
    assert block.group(1).splitlines() == [
        f"  preferred_batch_size: [ {by_name['cnn'].max_batch} ]",
        f"  max_queue_delay_microseconds: {delay_us}",
        "  priority_levels: 2",
        "  default_priority_level: 1",
    ]
    # A CPU plan: CPU instances, and no CUDA stream priority.
    assert "kind: KIND_CPU" in text and "PRIORITY_MAX" not in text
    gpu = triton_config(by_name["cnn"], 2, "cuda")
    assert "kind: KIND_GPU" in gpu and "optimization { priority: PRIORITY_MAX }" in gpu
    assert "PRIORITY_MAX" not in triton_config(by_name["enc"], 2, "cuda")


def test_plan_says_unattainable_when_even_one_run_exceeds_the_slo() -> None:
    spec = PlanSpec.model_validate({**SPEC, "models": [{**SPEC["models"][0], "slo_ms": 5}]})
    result = plan(spec, TableExecTime(TABLE), share=0.5)
    assert not result.models[0].attainable
    assert result.models[0].max_batch == 1


def test_plan_states_its_ort_runtime(tmp_path: Path) -> None:
    spec = PlanSpec.model_validate(
        {**SPEC, "device": "cuda", "runtime": {"sessions": "per-batch", "cudnn_conv_algo_search": "HEURISTIC"}}
    )
    result = plan(spec, TableExecTime(TABLE), share=0.5)
    assert result.runtime == {"sessions": "per-batch", "cudnn_conv_algo_search": "HEURISTIC"}
    write_plan(result, tmp_path)
    assert json.loads((tmp_path / "plan.json").read_text())["runtime"] == result.runtime
    assert "ORT sessions: per-batch, cudnn_conv_algo_search HEURISTIC." in (tmp_path / "plan.md").read_text()
    text = (tmp_path / "cnn" / "config.pbtxt").read_text()
    # Triton's onnxruntime backend takes ORT's integer enum (1: HEURISTIC).
    assert 'parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }' in text
    assert "one ORT session per batch size" in text
    # The default on cuda: one session per batch size (the H100's fix for the cuDNN re-plan at every change
    # of batch size), ORT's EXHAUSTIVE search (enum 0); the plan and config.pbtxt say so.
    default = plan(PlanSpec.model_validate({**SPEC, "device": "cuda"}), TableExecTime(TABLE), share=0.5)
    assert default.runtime == {"sessions": "per-batch", "cudnn_conv_algo_search": "EXHAUSTIVE"}
    write_plan(default, tmp_path / "default")
    assert (
        "ORT sessions: per-batch, cudnn_conv_algo_search EXHAUSTIVE." in (tmp_path / "default" / "plan.md").read_text()
    )
    text = (tmp_path / "default" / "cnn" / "config.pbtxt").read_text()
    assert 'string_value: "0" } }' in text and "one ORT session per batch size" in text
    # Shared stays selectable on cuda: no per-batch note then.
    shared = plan(
        PlanSpec.model_validate({**SPEC, "device": "cuda", "runtime": {"sessions": "shared"}}),
        TableExecTime(TABLE),
        0.5,
    )
    assert shared.runtime == {"sessions": "shared", "cudnn_conv_algo_search": "EXHAUSTIVE"}
    assert "per batch size" not in triton_config(shared.models[0], 2, "cuda", runtime=shared.runtime)
    # The CPU EP, which showed no stall, keeps one shared session, and its config has no CUDA parameter.
    cpu = plan(PlanSpec.model_validate(SPEC), TableExecTime(TABLE), share=0.5)
    assert cpu.runtime == {"sessions": "shared", "cudnn_conv_algo_search": "EXHAUSTIVE"}
    assert "cudnn_conv_algo_search" not in triton_config(cpu.models[0], 2, "cpu", runtime=cpu.runtime)
    # The default follows the device even when a spec read for the CPU is copied onto cuda (as the
    # serving_plan asset does with the profile's EP).
    moved = PlanSpec.model_validate(SPEC).model_copy(update={"device": "cuda"})
    assert plan(moved, TableExecTime(TABLE), share=0.5).runtime["sessions"] == "per-batch"


def test_triton_config_single_priority_has_no_stream_priority() -> None:
    result = plan(PlanSpec.model_validate({**SPEC, "models": [SPEC["models"][0]]}), TableExecTime(TABLE), 0.5)
    text = triton_config(result.models[0], 1, "cuda")
    assert "priority_levels: 1" in text and "optimization" not in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("models: [", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("models: []\n", "models: List should have at least 1 item"),
        ("models:\n  - {name: a, path: a.onnx, slo_ms: -1, rate_per_s: 1}\n", "models.0.slo_ms"),
        ("models:\n  - {name: a, path: a.onnx, slo_ms: 5, rate_per_s: 1, percentile: 95}\n", "percentile"),
        ("models:\n  - {name: a, path: a.onnx, slo_ms: 5, rate_per_s: 1}\nbogus: 1\n", "bogus"),
        (
            "models:\n  - {name: a, path: a.onnx, slo_ms: 5, rate_per_s: 1}\nruntime: {sessions: many}\n",
            "runtime.sessions",
        ),
        (
            "models:\n  - {name: a, path: a.onnx, slo_ms: 5, rate_per_s: 1}\n"
            "  - {name: a, path: b.onnx, slo_ms: 5, rate_per_s: 1}\n",
            "repeated: a",
        ),
    ],
)
def test_bad_plan_yaml_is_one_error_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(content)
    with pytest.raises(HaseError, match=re.escape(message)):
        load_plan_spec(path)


def test_hase_plan_cli_bad_yaml_prints_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("models:\n  - {name: a, path: a.onnx, slo_ms: 5}\n")
    done = subprocess.run(
        [sys.executable, "-m", "hase_dagster.orchestration.cli", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("hase: error: ") and "rate_per_s" in done.stderr


def test_hase_plan_cli_from_a_table(tmp_path: Path) -> None:
    import yaml

    spec = {**SPEC, "exec_ms": {m: {b: list(v) for b, v in t.items()} for m, t in TABLE["level=0.5"].items()}}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hase_dagster.orchestration.cli",
            "plan",
            str(path),
            "--out",
            str(out),
            "--json",
            "--sessions",
            "per-batch",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "cnn" / "config.pbtxt").exists() and (out / "enc" / "config.pbtxt").exists()
    assert '"max_batch"' in done.stdout
    # --sessions overrides the YAML's runtime (absent here: the CPU's default, shared); the search stays
    # ORT's default.
    runtime = json.loads((out / "plan.json").read_text())["runtime"]
    assert runtime == {"sessions": "per-batch", "cudnn_conv_algo_search": "EXHAUSTIVE"}


def test_serving_plan_asset_writes_a_plan_per_stress_level(test_config: Path, tmp_path: Path) -> None:
    import dagster as dg
    import yaml
    from test_serving_executor import tiny_model

    from assets.serving import serving_plan
    from resources.hase import HaseResource

    levels = yaml.safe_load(test_config.read_text())["stress_levels"]
    for name in ("cnn", "enc"):
        tiny_model(tmp_path / f"{name}.onnx")
    spec = {**SPEC, "exec_ms": {m: {b: list(v) for b, v in t.items()} for m, t in TABLE["level=0.0"].items()}}
    plan_yaml = tmp_path / "plan.yaml"
    plan_yaml.write_text(yaml.safe_dump(spec))
    hase = HaseResource(config_path=str(test_config), data_directory=str(tmp_path / "data"))
    result = dg.materialize(
        [serving_plan],
        resources={"hase": hase},
        run_config={"ops": {"serving_plan": {"config": {"plan_yaml": str(plan_yaml)}}}},
    )
    assert result.success
    for level in levels:
        folder = tmp_path / "data" / "serving_plan" / f"level-{level:g}"
        assert configs_from_plan_json(folder / "plan.json").keys() == {"cnn", "enc"}
        assert (folder / "enc" / "config.pbtxt").read_text().startswith('name: "enc"')
    (check,) = result.get_asset_check_evaluations()
    assert check.passed


def test_empirical_batch_times_take_the_nearest_batch_and_scale_beyond_the_largest() -> None:
    from hase_dagster.learn.serving_sim import EmpiricalServiceTime

    service = EmpiricalServiceTime({"m": {1: [2.0], 4: [5.0]}})
    rng = np.random.default_rng(0)
    assert [service.sample("m", b, rng) for b in (1, 2, 3, 4, 8)] == [2.0, 2.0, 5.0, 5.0, 10.0]
    with pytest.raises(HaseError, match="no measured batch times for other"):
        service.sample("other", 1, rng)


def test_a_bundle_for_another_device_is_refused(tmp_path: Path) -> None:
    from hase_dagster.learn.serving_plan import hase_exec_time

    if not (Path(__file__).resolve().parents[1] / "results" / "bundles" / "h100").is_dir():
        pytest.skip("no shipped h100 bundle")
    spec = PlanSpec.model_validate({**SPEC, "predictor": "h100"})  # device cpu, an H100 bundle
    with pytest.raises(HaseError, match="predicts for cuda, but the plan's device is cpu"):
        hase_exec_time(spec, tmp_path, "http://127.0.0.1:9")
