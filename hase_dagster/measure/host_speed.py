"""The host core's speed as a timing thread sees it: a fixed pure-Python loop (issue 11, batch 1 and 4).

On the GPU hosts Hase was measured on, a host-bound run (batch 1-4) takes one of two speeds that switch within
seconds, and this loop runs 1.6-1.7x slower exactly while the run does (results/gpu-general/README.md, "What the
slow host state is"); on an H200 host its reading beside a timing followed the timing's moves between passes with
correlation 0.82-0.94 (results/gpu-general/host-speed). ``hase predict --host-reading`` scales a prediction's
host-bound share by it (:mod:`hase_dagster.learn.host_speed`).

The reading depends on the interpreter (CPython's loop speed differs between versions): compare readings taken by
the same Python major.minor, which :func:`interpreter` names.
"""

from __future__ import annotations

import platform
import statistics
import time
from typing import TYPE_CHECKING

from hase_dagster.core.errors import MissingMetricsError

if TYPE_CHECKING:
    from hase_dagster.measure.prometheus import PrometheusClient

LOOP_ITERATIONS = 20_000
# The gauge ``hase exporter`` serves the reading under (a few loops every interval), and the window
# ``hase predict --host-reading prometheus`` averages it over: a state lasts 0.1-15 s.
HOST_LOOP_METRIC = "HASE_HOST_LOOP_MS"
PROMETHEUS_WINDOW = "30s"


def loop_ms(iterations: int = LOOP_ITERATIONS) -> float:
    """The time of a fixed pure-Python loop, in ms: it follows the core's clock and nothing on the GPU."""
    started = time.perf_counter_ns()
    total = 0
    for i in range(iterations):
        total += i
    return (time.perf_counter_ns() - started) / 1e6


def host_loop_reading(seconds: float = 0.5, at_least: int = 5) -> float:
    """The mean :func:`loop_ms` over ``seconds`` of back-to-back readings on this thread (at least ``at_least``).

    A state lasts 0.1-15 s, so a window of readings gives the mixture a timing of the same length would meet.
    """
    readings: list[float] = []
    end = time.perf_counter() + seconds
    while len(readings) < at_least or time.perf_counter() < end:
        readings.append(loop_ms())
    return statistics.fmean(readings)


def interpreter() -> str:
    """The Python major.minor the readings were taken with (``3.12``)."""
    return ".".join(platform.python_version_tuple()[:2])


def host_reading_from_prometheus(client: PrometheusClient) -> float:
    """The exporter's loop reading averaged over :data:`PROMETHEUS_WINDOW` (the mean over series: several exporters
    of one host read the same cores).

    Raises:
        PrometheusUnavailableError: Prometheus does not answer or rejects the query.
        MissingMetricsError: no exporter's reading is scraped.
    """
    series = client.query(f"avg_over_time({HOST_LOOP_METRIC}[{PROMETHEUS_WINDOW}])")
    values = [v for v in (float(s["value"][1]) for s in series) if v > 0]
    if not values:
        raise MissingMetricsError(
            f"Prometheus at {client.url} has no series for {HOST_LOOP_METRIC} over the last {PROMETHEUS_WINDOW}: "
            "is `hase exporter` running on the host and scraped?"
        )
    return statistics.fmean(values)
