"""The serving executor on the CPU EP with tiny models, its Prometheus metrics, and the Grafana dashboard's
queries against a real Prometheus scraping them."""

from __future__ import annotations

import json
import math
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from prometheus_client import generate_latest, start_http_server
from test_prometheus import free_port, prometheus_binary, start_prometheus, wait_for  # noqa: F401 (a fixture)

from hase_dagster.core.errors import HaseError
from hase_dagster.core.metrics import ALL_FIELDS
from hase_dagster.core.ort_runtime import _providers
from hase_dagster.core.serving_spec import BatchingConfig, ServingRuntime
from hase_dagster.measure import grafana_dashboard
from hase_dagster.measure.serving import (
    METRIC_NAMES,
    ServedSession,
    ServingMetrics,
    poisson_schedule,
    serve,
)


def tiny_model(path: Path, batch: int | str = "batch", width: int = 256) -> Path:
    """A MatMul + Relu model with a symbolic (or fixed) batch dimension."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((width, width)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["mm"]), helper.make_node("Relu", ["mm"], ["output"])],
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, width])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ServedSession]:
    folder = tmp_path_factory.mktemp("serving")
    return {
        "high": ServedSession("high", tiny_model(folder / "high.onnx"), "cpu"),
        "low": ServedSession("low", tiny_model(folder / "low.onnx", width=512), "cpu"),
    }


def test_executor_serves_every_request_in_batches(sessions: dict[str, ServedSession]) -> None:
    configs = {"high": BatchingConfig(4, 5.0, 1), "low": BatchingConfig(8, 20.0, 2)}
    schedule = poisson_schedule({"high": 200.0, "low": 150.0}, 1.0, seed=1)
    metrics = ServingMetrics()
    records = serve(sessions, configs, schedule, 1.0, drain_s=1.0, slo_ms={"high": 50.0, "low": 100.0}, metrics=metrics)
    assert len(records) == len(schedule)
    assert all(math.isfinite(r.done_ms) for r in records)
    for name, config in configs.items():
        mine = [r for r in records if r.model == name]
        assert all(1 <= r.batch <= config.max_batch for r in mine)
        assert all(r.arrival_ms <= r.start_ms < r.done_ms for r in mine)
        # With a delay and these rates batches fill beyond one request.
        assert np.mean([r.batch for r in mine]) > 1.5
        # Nobody waits much longer than the delay plus a run or two of the other model.
        assert max(r.start_ms - r.arrival_ms for r in mine) < config.max_queue_delay_ms + 30
    text = generate_latest(metrics.registry).decode()
    answered = sum(float(v) for v in re.findall(r'^hase_serving_requests_total\{model="\w+"\} (\S+)$', text, re.M))
    assert answered == len(records)
    counts = re.findall(r'^hase_serving_request_latency_ms_count\{model="(\w+)"\} (\S+)$', text, re.M)
    assert {m: float(c) for m, c in counts} == {n: sum(r.model == n for r in records) for n in configs}


def test_executor_priority_serves_the_high_model_first(sessions: dict[str, ServedSession]) -> None:
    # Both queues fill at once (all requests at t=0): the high-priority model's batches all run first.
    schedule = [(0.0, "low")] * 6 + [(0.0, "high")] * 6
    configs = {"high": BatchingConfig(2, 0.0, 1), "low": BatchingConfig(2, 0.0, 2)}
    records = serve(sessions, configs, schedule, 0.05, drain_s=2.0)
    last_high = max(r.done_ms for r in records if r.model == "high")
    first_low = min(r.start_ms for r in records if r.model == "low")
    assert last_high <= first_low + 1e-6


def test_executor_counts_requests_left_in_the_queue_as_unserved(sessions: dict[str, ServedSession]) -> None:
    # Batch 1 and a 0.01 s drain: 20000 requests in 0.2 s (10 us apart) cannot all be served.
    schedule = [(float(i) * 0.01, "low") for i in range(20000)]
    records = serve(sessions, {"high": BatchingConfig(1, 0, 1), "low": BatchingConfig(1, 0, 2)}, schedule, 0.2, 0.01)
    assert len(records) == 20000
    assert any(math.isinf(r.done_ms) for r in records)


def test_per_batch_sessions_run_each_batch_size_on_its_own_session(tmp_path: Path) -> None:
    path = tiny_model(tmp_path / "m.onnx")
    shared = ServedSession("m", path, "cpu")
    per_batch = ServedSession("m", path, "cpu", runtime=ServingRuntime(sessions="per-batch"))
    shared.warm_up([1, 3, 5], runs=1)
    per_batch.warm_up([1, 3, 5], runs=1)
    assert shared.session_count == 1
    assert len({id(shared.session_for(b)) for b in (1, 3, 5)}) == 1
    # One session per batch size, the first one reused for the first size; asking again gives the same one.
    assert per_batch.session_count == 3
    assert per_batch.session_for(1) is per_batch.session
    assert len({id(per_batch.session_for(b)) for b in (1, 3, 5)}) == 3
    assert per_batch.session_for(3) is per_batch.session_for(3)
    # Each session computes the same model: equal outputs for the same input.
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)
    (expected,) = shared.session.run(None, {"input": x})
    (got,) = per_batch.session_for(3).run(None, {"input": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # And the executor serves with them as with one session.
    schedule = poisson_schedule({"m": 300.0}, 0.3, seed=2)
    records = serve({"m": per_batch}, {"m": BatchingConfig(5, 3.0, 1)}, schedule, 0.3, drain_s=1.0)
    assert len(records) == len(schedule) and all(math.isfinite(r.done_ms) for r in records)
    assert per_batch.session_count == len({1, 3, 5} | {r.batch for r in records})


def test_the_runtime_cudnn_search_reaches_the_cuda_provider_options(tmp_path: Path) -> None:
    served = ServedSession(
        "m", tiny_model(tmp_path / "m.onnx"), "cpu", runtime=ServingRuntime(cudnn_conv_algo_search="HEURISTIC")
    )
    providers = _providers("cuda", served.options)
    assert providers[0] == ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"})
    assert ServedSession("m", tmp_path / "m.onnx", "cpu").options.cudnn_conv_algo_search == "EXHAUSTIVE"


def test_sessions_default_by_ep(tmp_path: Path) -> None:
    # Per-batch sessions on CUDA (the H100's fix for the cuDNN re-plan at every change of batch size),
    # one shared session on the CPU EP; a runtime that names its sessions keeps them.
    path = tiny_model(tmp_path / "m.onnx")
    assert ServingRuntime().for_device("cuda").sessions == "per-batch"
    assert ServingRuntime(sessions="shared").for_device("cuda").sessions == "shared"
    cpu = ServedSession("m", path, "cpu")
    assert cpu.runtime.sessions == "shared"
    cpu.warm_up([1, 2], runs=1)
    assert cpu.session_count == 1
    chosen = ServedSession("m", path, "cpu", runtime=ServingRuntime(sessions="per-batch"))
    chosen.warm_up([1, 2], runs=1)
    assert chosen.session_count == 2


def test_a_fixed_batch_model_is_refused(tmp_path: Path) -> None:
    session = ServedSession("fixed", tiny_model(tmp_path / "fixed.onnx", batch=4), "cpu")
    with pytest.raises(HaseError, match="symbolic batch"):
        session.runner(2)


def test_dashboard_json_is_the_sdks_model_and_the_committed_file() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    committed = grafana_dashboard.DEFAULT_OUT / "hase-serving.json"
    assert committed.read_text() == grafana_dashboard.dashboard_json(), "regenerate: python -m " + (
        "hase_dagster.measure.grafana_dashboard"
    )
    data = json.loads(committed.read_text())
    parsed = Dashboard.from_json(data)
    assert json.loads(json.dumps(parsed, cls=JSONEncoder)) == data
    assert len(parsed.panels) == len(grafana_dashboard.PANELS)
    assert all(p.datasource.uid == "hase-prometheus" for p in parsed.panels)


def test_dashboard_queries_name_only_published_metrics() -> None:
    published = set(ALL_FIELDS)
    for name in METRIC_NAMES:
        published |= {name, f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_total"}
    named = set()
    for expr in grafana_dashboard.queries():
        named |= set(re.findall(r"\b(?:hase_\w+|DCGM_\w+|HOST_\w+)\b", expr))
    assert named and named <= published, named - published


@pytest.mark.usefixtures("prometheus_binary")
def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    sessions: dict[str, ServedSession], tmp_path: Path
) -> None:
    from hase_dagster.measure.exporter import serve_metrics
    from hase_dagster.measure.prometheus import PrometheusClient

    metrics = ServingMetrics()
    for name, slo in (("high", 50.0), ("low", 100.0)):
        metrics.slo.labels(model=name).set(slo)
        for batch in (1, 2):
            metrics.predicted.labels(model=name, batch=str(batch)).set(0.5 * batch)
        for quantile in ("p50", "p99"):
            metrics.predicted_e2e.labels(model=name, quantile=quantile).set(3.0)
    serving_port, exporter_port = free_port(), free_port()
    httpd, thread = start_http_server(serving_port, addr="127.0.0.1", registry=metrics.registry)
    stop = threading.Event()
    exporter = threading.Thread(
        target=serve_metrics,
        args=("cpu", ["HOST_CPU_UTIL", "HOST_MEM_USED_MB"]),
        kwargs={"port": exporter_port, "interval_s": 0.5, "stop": stop},
        daemon=True,
    )
    exporter.start()
    server = None
    try:
        server = start_prometheus([f"127.0.0.1:{serving_port}", f"127.0.0.1:{exporter_port}"], tmp_path)
        configs = {"high": BatchingConfig(4, 2.0, 1), "low": BatchingConfig(4, 5.0, 2)}
        slo = {"high": 50.0, "low": 100.0}
        # Requests over 3 s, so rate() over the dashboard's window has at least two scrapes of counts.
        serve(sessions, configs, poisson_schedule({"high": 60.0, "low": 40.0}, 3.0, 2), 3.0, 1.0, slo, metrics)
        client = PrometheusClient(url=server.url)
        for expr in grafana_dashboard.queries():
            wait_for(f"data for {expr}", lambda e=expr: client.query(e), timeout_s=15.0, every_s=0.5)
    finally:
        if server is not None:
            server.stop()
        stop.set()
        exporter.join(timeout=5)
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_serve_bench_and_report_on_tiny_models(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    for name in ("cnn", "enc"):
        tiny_model(tmp_path / f"{name}.onnx")
    spec = {
        "device": "cpu",
        "batch_sizes": [1, 2, 4],
        "models": [
            {"name": "cnn", "path": "cnn.onnx", "slo_ms": 20, "priority": 1, "rate_per_s": 80},
            {"name": "enc", "path": "enc.onnx", "slo_ms": 40, "percentile": 90, "priority": 2, "rate_per_s": 60},
        ],
        "exec_ms": {"cnn": {1: [0.2, 0.3], 4: [0.5, 0.6]}, "enc": {1: [0.2, 0.3], 4: [0.5, 0.6]}},
    }
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "serve-bench", str(tmp_path / "plan.yaml")]
    command += ["--config", "planner,batch1,grid", "--grid-batches", "1,4", "--duration", "0.5", "--drain", "0.5"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["config"] for r in runs] == ["planner", "batch1", "grid", "grid", "grid", "grid"]
    assert {r["configs"]["cnn"]["max_batch"] for r in runs if r["config"] == "grid"} == {1, 4}
    assert all(r["measured"]["cnn"]["requests"] > 10 and r["simulated_measured_exec"] for r in runs)
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) - 1 == sum(r["measured"][m]["requests"] for r in runs for m in ("cnn", "enc"))
    # A second call finds every run done and serves nothing more; request rows of a run that never
    # reached runs.jsonl (a bench stopped between the two writes) are dropped.
    with (out / "requests.csv").open("a") as handle:
        handle.write("s0-r1-unfinished,cnn,1.0,2.0,3.0,2.0,1\n")
    again = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and len((out / "runs.jsonl").read_text().splitlines()) == len(runs)
    assert (out / "requests.csv").read_text().splitlines() == rows
    report = subprocess.run(
        [sys.executable, "-m", "hase_dagster.orchestration.cli", "serving-report", str(out), "--write"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert "grid best of 4" in report.stdout and (out / "report.md").read_text() == report.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_serve_bench_with_one_line_and_no_stressor_left(tmp_path: Path, sig: signal.Signals) -> None:
    import subprocess
    import sys

    import psutil
    import yaml
    from test_stressor import _gone

    tiny_model(tmp_path / "m.onnx")
    spec = {"models": [{"name": "m", "path": "m.onnx", "slo_ms": 20, "rate_per_s": 50}], "exec_ms": {"m": {1: [1, 1]}}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(spec))
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "serve-bench", str(tmp_path / "plan.yaml")]
    command += ["--config", "batch1", "--stress", "0.5", "--duration", "60", "--out", str(tmp_path / "out")]
    # As a user's shell starts it: Ctrl-C handled. A suite started in the background (nohup, `&`) runs
    # with SIGINT ignored, and a child inherits an ignored SIGINT through exec.
    bench = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        stressors = wait_for(
            "the stressor to start",
            lambda: [p for p in psutil.Process(bench.pid).children() if "stressor" in " ".join(p.cmdline())],
            timeout_s=60.0,
        )
        time.sleep(1.0)  # serving
        bench.send_signal(sig)
        _, stderr = bench.communicate(timeout=30)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode == 2
    assert stderr.count("\n") == 1 and stderr.startswith("hase: error: interrupted"), stderr
    assert all(_gone(p.pid) for p in stressors)
