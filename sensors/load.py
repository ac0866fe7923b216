"""Re-run the latency predictions when the device's load moves to another bucket."""

import json
import math
import time

import dagster as dg

from hase_dagster.core.errors import MissingMetricsError, PrometheusUnavailableError
from hase_dagster.core.metrics import LOAD_FIELD
from resources.hase import HaseResource
from resources.prometheus import PrometheusResource


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


def _last_bucket(cursor: str | None) -> int | None:
    """The bucket stored in the cursor, or None when there is none (first evaluation, bad cursor)."""
    try:
        bucket = json.loads(cursor)["bucket"] if cursor else None
    except (ValueError, TypeError, KeyError):
        return None
    return bucket if isinstance(bucket, int) else None


@dg.sensor(
    job_name="latency_predictions_job", minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING
)
def prometheus_load_sensor(
    context: dg.SensorEvaluationContext, prometheus: PrometheusResource, hase: HaseResource
) -> dg.RunRequest | dg.SkipReason:
    """Request ``latency_predictions_job`` when the profile device's load (``HOST_CPU_UTIL`` on a CPU,
    ``DCGM_FI_DEV_GPU_UTIL`` on a GPU, read from Prometheus) changes bucket, and on the first evaluation.

    The last bucket is kept in the cursor. No run is ever requested without a load reading: when
    Prometheus does not answer or has no series for the field, the sensor skips and says why.
    """
    field = LOAD_FIELD[hase.profile().device]
    try:
        util = prometheus.current_load([field])[field]
    except (PrometheusUnavailableError, MissingMetricsError) as exc:
        return dg.SkipReason(f"no load reading, no run: {exc}")
    bucket = load_bucket(util)
    last = _last_bucket(context.cursor)
    if bucket == last:
        return dg.SkipReason(f"load steady in bucket {bucket} ({util:.1f}%)")
    context.update_cursor(json.dumps({"bucket": bucket, "util": util}))
    return dg.RunRequest(
        run_key=f"load-bucket-{bucket}-{time.time_ns()}",
        tags={"hase/load_bucket": str(bucket), "hase/load_util": f"{util:.1f}"},
    )
