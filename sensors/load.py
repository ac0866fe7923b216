"""Re-run the latency predictions when the device's load settles in another bucket.

The sensor is debounced so that Hase's own work and a load that wavers around a bucket edge do not
flood the accelerator pool with prediction runs:

- hysteresis: the load leaves its bucket only when it is ``hysteresis_pct`` points beyond an edge;
- a minimum interval between two requests;
- no request while a Hase run (analysis, benchmark, learning, prediction) is queued or running, or
  ended less than ``settle_s`` ago: the load it puts on the device is not other work's load;
- at most one pending prediction run (a queued or running one is itself a Hase run).
"""

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from hase_dagster.core.errors import MissingMetricsError, PrometheusUnavailableError
from hase_dagster.core.metrics import LOAD_FIELD
from resources.hase import HaseResource
from resources.prometheus import PrometheusResource

# The jobs whose runs load the device Hase measures (assets/jobs.py).
HASE_JOBS = ("analysis_job", "benchmark_job", "learning_job", "latency_predictions_job")
PENDING = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def load_bucket(util: float, width: float = 25.0) -> int:
    """The bucket of a utilisation in percent: ``[0, width)`` is 0, ``[width, 2*width)`` is 1, ...

    With the default width, 0-100 % gives buckets 0..4 (exactly 100 % is bucket 4); values outside
    0-100 % (a sampling overshoot) are clamped into the first or last bucket.
    """
    if not width > 0:
        raise ValueError(f"bucket width must be positive, got {width}")
    if math.isnan(util):
        raise ValueError("utilisation is NaN")
    return int(min(max(util, 0.0), 100.0) // width)


def bucket_with_hysteresis(util: float, last: int | None, width: float = 25.0, hysteresis: float = 5.0) -> int:
    """The bucket of ``util``, except that it stays ``last`` while ``util`` is within ``hysteresis``
    points of ``last``'s range ``[last*width, (last+1)*width)``: a load wavering around an edge keeps
    its bucket.

    Args:
        util: utilisation in percent.
        last: the bucket the load was in, or None (no hysteresis then).
        width: bucket width in percent.
        hysteresis: how far beyond an edge, in percentage points, the load must go to change bucket.

    Returns:
        The bucket the load is in now.
    """
    bucket = load_bucket(util, width)
    if last is None or bucket == last:
        return bucket
    if last * width - hysteresis <= util < (last + 1) * width + hysteresis:
        return last
    return bucket


@dataclass(frozen=True)
class Cursor:
    """What the sensor remembers between evaluations: the bucket of the last request and when it was made."""

    bucket: int | None = None
    requested_at: float | None = None

    @staticmethod
    def parse(text: str | None) -> "Cursor":
        """The cursor in ``text``; an empty or unreadable cursor is a fresh one."""
        try:
            raw = json.loads(text) if text else {}
            bucket, at = raw.get("bucket"), raw.get("requested_at")
        except (ValueError, TypeError, AttributeError):
            return Cursor()
        return Cursor(bucket if isinstance(bucket, int) else None, float(at) if isinstance(at, (int, float)) else None)


def hase_run_in_the_way(instance: dg.DagsterInstance, now: float, settle_s: float) -> str | None:
    """Why a load reading now would include Hase's own load, or None: a Hase run is queued or running
    (naming a pending prediction run first), or one ended less than ``settle_s`` ago."""
    pending = instance.get_runs(filters=dg.RunsFilter(statuses=PENDING), limit=50)
    hase_pending = [r for r in pending if r.job_name in HASE_JOBS]
    for run in sorted(hase_pending, key=lambda r: r.job_name != "latency_predictions_job"):
        if run.job_name == "latency_predictions_job":
            return f"a prediction run is already pending (run {run.run_id}, {run.status.value})"
        return f"a Hase run holds the device ({run.job_name}, run {run.run_id}, {run.status.value})"
    since = dg.RunsFilter(
        updated_after=datetime.fromtimestamp(now - settle_s, tz=UTC),
        statuses=[s for s in dg.DagsterRunStatus if s not in PENDING],
    )
    for record in instance.get_run_records(filters=since, limit=50):
        run = record.dagster_run
        ended = record.end_time or record.update_timestamp.timestamp()
        if run.job_name in HASE_JOBS and now - ended < settle_s:
            return (
                f"a Hase run ended {max(0.0, now - ended):.0f} s ago ({run.job_name}, run {run.run_id}); "
                f"its load leaves the reading after {settle_s:.0f} s"
            )
    return None


def build_load_sensor(
    min_request_interval_s: float = 300.0,
    hysteresis_pct: float = 5.0,
    settle_s: float = 30.0,
    bucket_width_pct: float = 25.0,
    clock: Callable[[], float] = time.time,
    name: str = "prometheus_load_sensor",
) -> dg.SensorDefinition:
    """The load sensor with its debounce settings (module docstring).

    Args:
        min_request_interval_s: least time between two requested prediction runs.
        hysteresis_pct: percentage points beyond a bucket edge the load must go to change bucket.
        settle_s: how long after a Hase run ended its load may still be in the reading.
        bucket_width_pct: width of a load bucket in percent.
        clock: the time in seconds since the epoch (a test's clock in tests).
        name: the sensor's name.

    Returns:
        A sensor that requests ``latency_predictions_job``.
    """

    @dg.sensor(
        name=name,
        job_name="latency_predictions_job",
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def load_sensor(
        context: dg.SensorEvaluationContext, prometheus: PrometheusResource, hase: HaseResource
    ) -> dg.RunRequest | dg.SkipReason:
        """Request ``latency_predictions_job`` when the profile device's load (``HOST_CPU_UTIL`` on a CPU,
        ``DCGM_FI_DEV_GPU_UTIL`` on a GPU, read from Prometheus) settles in another bucket, and on the
        first evaluation; debounced as the module docstring says. Every skip says why."""
        field = LOAD_FIELD[hase.profile().device]
        try:
            util = prometheus.current_load([field])[field]
        except (PrometheusUnavailableError, MissingMetricsError) as exc:
            return dg.SkipReason(f"no load reading, no run: {exc}")
        now = clock()
        busy = hase_run_in_the_way(context.instance, now, settle_s)
        if busy:
            return dg.SkipReason(f"load {util:.1f}% not used: {busy}")
        cursor = Cursor.parse(context.cursor)
        bucket = bucket_with_hysteresis(util, cursor.bucket, bucket_width_pct, hysteresis_pct)
        if bucket == cursor.bucket:
            return dg.SkipReason(
                f"load steady in bucket {bucket} ({util:.1f}%, within {hysteresis_pct:g} points of its edges)"
            )
        if cursor.requested_at is not None and now - cursor.requested_at < min_request_interval_s:
            return dg.SkipReason(
                f"load moved to bucket {bucket} ({util:.1f}%), but the last request was "
                f"{now - cursor.requested_at:.0f} s ago (at least {min_request_interval_s:.0f} s between requests)"
            )
        context.update_cursor(json.dumps({"bucket": bucket, "util": util, "requested_at": now}))
        return dg.RunRequest(
            run_key=f"load-bucket-{bucket}-{time.time_ns()}",
            tags={"hase/load_bucket": str(bucket), "hase/load_util": f"{util:.1f}"},
        )

    return load_sensor


prometheus_load_sensor = build_load_sensor()
