"""The Prometheus path against a real Prometheus server: exporter -> Prometheus -> resource -> sensor.

A session fixture installs the Debian ``prometheus`` package if needed (install-prometheus.sh), serves a
test-controlled ``HOST_CPU_UTIL`` gauge and runs Prometheus on free loopback ports with temp storage.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import dagster as dg
import pytest
import requests
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from hase_dagster.core.errors import MissingMetricsError, PrometheusUnavailableError
from hase_dagster.measure.exporter import serve_metrics
from hase_dagster.measure.host_speed import host_reading_from_prometheus
from hase_dagster.measure.prometheus import PrometheusClient
from resources.hase import HaseResource
from resources.prometheus import PrometheusResource
from sensors.load import bucket_with_hysteresis, build_load_sensor, load_bucket, prometheus_load_sensor

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = REPO / "hase_dagster" / "prometheus"
PROMETHEUS_BIN = Path("/usr/bin/prometheus")

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 15.0, every_s: float = 0.1) -> T:
    """Call ``probe`` until it returns something truthy (exceptions count as not yet); fail naming
    ``what`` and the last result or error after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = probe()
        except Exception as exc:  # not up yet
            last = exc
        else:
            if result:
                return result
            last = result
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def start_prometheus(targets: list[str], workdir: Path) -> PrometheusServer:
    """Prometheus on a free loopback port scraping ``targets`` every second; returns once every target is up."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{"job_name": "hase", "static_configs": [{"targets": targets}]}],
            }
        )
    )
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            str(PROMETHEUS_BIN),
            f"--config.file={config}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={workdir / 'data'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process)
    resource = PrometheusResource(url=server.url)

    def all_up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(
                f"prometheus exited with {process.returncode}: {(workdir / 'prometheus.log').read_text()[-2000:]}"
            )
        series = resource.query("up")
        return len(series) == len(targets) and all(s["value"][1] == "1" for s in series)

    try:
        wait_for(f"Prometheus to scrape {targets}", all_up)
    except BaseException:
        server.stop()
        raise
    return server


@dataclass
class Stack:
    prometheus: PrometheusServer
    gauge: Gauge  # HOST_CPU_UTIL{device="cpu"} as scraped by ``prometheus``

    @property
    def resource(self) -> PrometheusResource:
        return PrometheusResource(url=self.prometheus.url)

    def set_load(self, value: float) -> None:
        """Set the gauge and wait until Prometheus has scraped it."""
        self.gauge.set(value)
        wait_for(
            f"HOST_CPU_UTIL == {value} in Prometheus",
            lambda: self.resource.current_load(["HOST_CPU_UTIL"])["HOST_CPU_UTIL"] == value,
        )


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    if not PROMETHEUS_BIN.exists():
        subprocess.run([str(PROMETHEUS_DIR / "install-prometheus.sh")], check=True, timeout=600)
    if not PROMETHEUS_BIN.exists():
        pytest.skip(
            f"SKIPPING THE REAL-PROMETHEUS TESTS: {PROMETHEUS_BIN} is missing and could not be installed "
            "(install-prometheus.sh needs root or passwordless sudo; see its warning above)"
        )
    return PROMETHEUS_BIN


@pytest.fixture(scope="session")
def stack(prometheus_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    registry = CollectorRegistry()
    gauge = Gauge("HOST_CPU_UTIL", "test-controlled load", ["device"], registry=registry).labels(device="cpu")
    gauge.set(10.0)
    port = free_port()
    httpd, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        server = start_prometheus([f"127.0.0.1:{port}"], tmp_path_factory.mktemp("prometheus"))
        try:
            yield Stack(server, gauge)
        finally:
            server.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture()
def hase(test_config: Path) -> HaseResource:
    """The test profile: device cpu, so the sensor reads HOST_CPU_UTIL."""
    return HaseResource(config_path=str(test_config))


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# -- the resource ------------------------------------------------------------------------------------


def test_current_load_returns_the_scraped_gauge_value(stack: Stack) -> None:
    stack.set_load(42.5)
    assert stack.resource.current_load(["HOST_CPU_UTIL"]) == {"HOST_CPU_UTIL": 42.5}
    series = stack.resource.query("HOST_CPU_UTIL")
    assert [s["metric"]["device"] for s in series] == ["cpu"]


def test_missing_metric_is_named(stack: Stack) -> None:
    with pytest.raises(MissingMetricsError, match="DCGM_FI_DEV_GPU_UTIL") as info:
        stack.resource.current_load(["HOST_CPU_UTIL", "DCGM_FI_DEV_GPU_UTIL"])
    assert "HOST_CPU_UTIL" not in str(info.value)


def test_prometheus_down_names_the_url() -> None:
    url = closed_port_url()
    with pytest.raises(PrometheusUnavailableError, match=url.replace(".", r"\.")):
        PrometheusResource(url=url).current_load(["HOST_CPU_UTIL"])


def test_a_rejected_query_is_reported(stack: Stack) -> None:
    with pytest.raises(PrometheusUnavailableError, match="rejected the query"):
        stack.resource.query("sum(")


# -- the sensor --------------------------------------------------------------------------------------


def evaluate(
    prometheus: PrometheusResource,
    hase: HaseResource,
    cursor: str | None,
    sensor: dg.SensorDefinition = prometheus_load_sensor,
    instance: dg.DagsterInstance | None = None,
) -> tuple[object, str | None]:
    context = dg.build_sensor_context(
        cursor=cursor,
        resources={"prometheus": prometheus, "hase": hase},
        instance=instance or dg.DagsterInstance.ephemeral(),
    )
    result = sensor(context)
    return result, context.cursor


class FakeClock:
    """Seconds since the epoch that a test moves by hand (the minimum interval is minutes)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


def test_sensor_requests_a_run_only_when_the_load_bucket_changes(stack: Stack, hase: HaseResource) -> None:
    clock = FakeClock()
    sensor = build_load_sensor(clock=clock)
    stack.set_load(10.0)
    first, cursor = evaluate(stack.resource, hase, None, sensor)
    assert isinstance(first, dg.RunRequest)
    assert first.tags["hase/load_bucket"] == "0" and first.tags["hase/load_util"] == "10.0"
    assert json.loads(cursor)["bucket"] == 0

    steady, same_cursor = evaluate(stack.resource, hase, cursor, sensor)
    assert isinstance(steady, dg.SkipReason)
    assert steady.skip_message == "load steady in bucket 0 (10.0%, within 5 points of its edges)"
    assert same_cursor == cursor

    stack.set_load(90.0)
    clock.now += 301  # past the minimum interval between requests
    moved, new_cursor = evaluate(stack.resource, hase, cursor, sensor)
    assert isinstance(moved, dg.RunRequest)
    assert moved.tags == {"hase/load_bucket": "3", "hase/load_util": "90.0"}
    assert moved.run_key != first.run_key
    assert json.loads(new_cursor)["bucket"] == 3


def test_sensor_does_not_flap_on_a_load_oscillating_around_a_bucket_edge(
    stack: Stack, hase: HaseResource, instance: dg.DagsterInstance
) -> None:
    """The load wavers 22% <-> 28% around the 25% edge for 8 evaluations: one request (the first
    evaluation), not one per crossing. The sensor before the debounce requested 9 runs here."""
    requests, cursor = [], None
    for util in [22.0, 28.0] * 4 + [22.0]:
        stack.set_load(util)
        result, cursor = evaluate(stack.resource, hase, cursor, instance=instance)
        if isinstance(result, dg.RunRequest):
            requests.append(result.tags["hase/load_util"])
        else:
            assert isinstance(result, dg.SkipReason) and result.skip_message
    assert requests == ["22.0"]


def test_sensor_waits_the_minimum_interval_then_requests_a_load_that_left_its_bucket(
    stack: Stack, hase: HaseResource, instance: dg.DagsterInstance
) -> None:
    clock = FakeClock()
    sensor = build_load_sensor(clock=clock, min_request_interval_s=300)
    stack.set_load(10.0)
    first, cursor = evaluate(stack.resource, hase, None, sensor, instance)
    assert isinstance(first, dg.RunRequest)
    stack.set_load(60.0)  # well beyond the edges: bucket 2
    clock.now += 100
    early, cursor_after = evaluate(stack.resource, hase, cursor, sensor, instance)
    assert isinstance(early, dg.SkipReason) and "last request was 100 s ago" in early.skip_message
    assert cursor_after == cursor
    clock.now += 201
    later, _ = evaluate(stack.resource, hase, cursor, sensor, instance)
    assert isinstance(later, dg.RunRequest) and later.tags["hase/load_bucket"] == "2"


def _run_of(instance: dg.DagsterInstance, job_name: str, status: dg.DagsterRunStatus) -> dg.DagsterRun:
    @dg.op
    def noop() -> None:
        pass

    @dg.job(name=job_name)
    def job() -> None:
        noop()

    return instance.create_run_for_job(job, status=status)


@pytest.mark.parametrize(
    ("job_name", "reason"),
    [
        ("benchmark_job", "a Hase run holds the device"),
        ("latency_predictions_job", "a prediction run is already pending"),
    ],
)
def test_sensor_requests_nothing_while_a_hase_run_is_pending(
    stack: Stack, hase: HaseResource, instance: dg.DagsterInstance, job_name: str, reason: str
) -> None:
    clock = FakeClock()
    sensor = build_load_sensor(clock=clock, settle_s=30)
    stack.set_load(90.0)
    run = _run_of(instance, job_name, dg.DagsterRunStatus.STARTED)
    held, cursor = evaluate(stack.resource, hase, None, sensor, instance)
    assert isinstance(held, dg.SkipReason) and reason in held.skip_message and run.run_id in held.skip_message
    assert cursor is None

    instance.report_run_failed(run)  # the run ended: its load is still in the reading for settle_s
    settling, _ = evaluate(stack.resource, hase, None, sensor, instance)
    assert isinstance(settling, dg.SkipReason) and "a Hase run ended" in settling.skip_message
    clock.now = time.time() + 31
    free, _ = evaluate(stack.resource, hase, None, sensor, instance)
    assert isinstance(free, dg.RunRequest) and free.tags["hase/load_bucket"] == "3"


def test_a_run_of_another_job_does_not_hold_the_sensor(
    stack: Stack, hase: HaseResource, instance: dg.DagsterInstance
) -> None:
    _run_of(instance, "someone_elses_job", dg.DagsterRunStatus.STARTED)
    stack.set_load(40.0)
    result, _ = evaluate(stack.resource, hase, None, instance=instance)
    assert isinstance(result, dg.RunRequest)


@pytest.mark.parametrize(
    ("util", "last", "bucket"),
    [(22.0, None, 0), (28.0, 0, 0), (29.9, 0, 0), (30.0, 0, 1), (22.0, 1, 1), (19.9, 1, 0), (90.0, 0, 3), (0.0, 4, 0)],
)
def test_bucket_with_hysteresis(util: float, last: int | None, bucket: int) -> None:
    assert bucket_with_hysteresis(util, last) == bucket


def test_sensor_skips_when_prometheus_is_unreachable(hase: HaseResource) -> None:
    url = closed_port_url()
    cursor = json.dumps({"bucket": 1, "util": 30.0})
    result, after = evaluate(PrometheusResource(url=url, timeout_s=0.5), hase, cursor)
    assert isinstance(result, dg.SkipReason)
    assert "Prometheus" in result.skip_message and url in result.skip_message
    assert after == cursor


def test_sensor_skips_when_the_load_metric_is_missing(stack: Stack, test_config: Path) -> None:
    config = yaml.safe_load(test_config.read_text())
    config["profiles"]["tiny"]["device"] = "cuda"  # a GPU profile: its load field is not scraped here
    test_config.write_text(yaml.safe_dump(config))
    result, _ = evaluate(stack.resource, HaseResource(config_path=str(test_config)), None)
    assert isinstance(result, dg.SkipReason)
    assert "DCGM_FI_DEV_GPU_UTIL" in result.skip_message and stack.prometheus.url in result.skip_message


def test_sensor_loads_in_definitions_with_its_resources() -> None:
    @dg.op
    def noop() -> None:
        pass

    @dg.job(name="latency_predictions_job")
    def latency_predictions_job() -> None:
        noop()

    defs = dg.Definitions(
        jobs=[latency_predictions_job],
        sensors=[prometheus_load_sensor],
        resources={"prometheus": PrometheusResource(), "hase": HaseResource()},
    )
    dg.Definitions.validate_loadable(defs)
    sensor = defs.get_sensor_def("prometheus_load_sensor")
    assert sensor.job_name == "latency_predictions_job"
    assert sensor.minimum_interval_seconds == 30
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


@pytest.mark.parametrize(
    ("util", "bucket"),
    [
        (0.0, 0),
        (24.999, 0),
        (25.0, 1),
        (49.9, 1),
        (50.0, 2),
        (74.9, 2),
        (75.0, 3),
        (99.9, 3),
        (100.0, 4),
        (-1.0, 0),
        (100.5, 4),
    ],
)
def test_load_bucket_edges(util: float, bucket: int) -> None:
    assert load_bucket(util) == bucket


def test_load_bucket_width_and_bad_input() -> None:
    assert load_bucket(60.0, width=20.0) == 3
    assert load_bucket(100.0, width=20.0) == 5
    with pytest.raises(ValueError, match="width"):
        load_bucket(50.0, width=0)
    with pytest.raises(ValueError, match="NaN"):
        load_bucket(float("nan"))


# -- the real exporter -------------------------------------------------------------------------------


def test_real_exporter_is_scraped_by_prometheus(prometheus_binary: Path, tmp_path: Path) -> None:
    port = free_port()
    stop = threading.Event()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            serve_metrics("cpu", ["HOST_CPU_UTIL", "HOST_LOAD_1M"], port=port, interval_s=0.2, stop=stop)
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        wait_for("the exporter to serve", lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=1).ok)
        server = start_prometheus([f"127.0.0.1:{port}"], tmp_path)
        try:
            resource = PrometheusResource(url=server.url)
            load = wait_for(
                "HOST_CPU_UTIL from the real exporter", lambda: resource.current_load(["HOST_CPU_UTIL", "HOST_LOAD_1M"])
            )
            assert 0.0 <= load["HOST_CPU_UTIL"] <= 100.0 and load["HOST_LOAD_1M"] >= 0.0
            [series] = resource.query("HOST_CPU_UTIL")
            assert series["metric"]["device"] == "cpu"
            assert series["metric"]["instance"] == f"127.0.0.1:{port}"
            assert not resource.query('{__name__=~"DCGM_.*"}')  # never invented on a CPU
            # the host core's loop reading beside the telemetry, averaged as hase predict --host-reading reads it
            reading = wait_for(
                "the exporter's host loop reading", lambda: host_reading_from_prometheus(PrometheusClient(server.url))
            )
            assert 0.0 < reading < 1000.0
        finally:
            server.stop()
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and errors == []
    with pytest.raises(requests.ConnectionError):  # the exporter's port is closed again
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
