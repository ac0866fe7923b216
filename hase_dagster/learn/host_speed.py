"""A prediction for a host whose core runs at another speed than the bundle's timings met (issue 11).

On the CPU EP the whole run is the host's: an idle prediction becomes ``predicted x (1 + CPU_HOST_ELASTICITY x
(r / r0 - 1))``; a loaded one is left as it is, since a reading taken beside a co-tenant on the same cores reads the
contention the load terms already price.

A run at batch 1-4 on a GPU is partly host-bound: the host dispatches kernels and the GPU waits. When the host core
runs slower (the two states of the measured GPU hosts, :mod:`hase_dagster.measure.host_speed`), so does that part. A
composition fitted on whole-model timings predicts the host's typical state; given a loop reading ``r`` of the host
the prediction is for, and the reading ``r0`` typical of the host the composition's timings came from
(``Composition.host_loop_ms``), a prediction becomes

    predicted x (1 + h x (r / r0 - 1)),  h = min(1, HOST_SHARE_GAIN x (1 - gpu_busy_share)) x idle / predicted,

h being the run's host-bound share: the idle run's host-bound milliseconds over this run's, since under load the
wait for the co-tenant is GPU-side time (``idle / predicted``, the idle prediction over this one, is 1 at idle).
On set AM (an H200, two passes) the runs at stress 1.0 and batch 4-128 repeated within 6% while the loop read up
to 1.9x slower.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hase_dagster.core.errors import HaseError
from hase_dagster.learn.predict import ModelPrediction

# The busy share (the standalone kernels' idle sum over the prediction) understates how host-bound a small run is:
# each standalone kernel's time holds its own launch, and CUPTI on the H200 put 0.25-0.75 ms of kernels in runs of
# 1.30-1.56 ms. Fitted on an H200 host's pass-to-pass timings with readings (results/gpu-general/host-speed): 3.0 on
# the generator networks and 3.25 on the hand-written ones, each the best for the other family (10.3 -> 5.9%,
# 11.2 -> 6.8% MAPE); fixed at 3.0 before timm networks checked it held out (10.7 -> 7.6%, 59 -> 78% within +-10%).
HOST_SHARE_GAIN = 3.0

# How a CPU run's time moves with the loop reading (log-log, pass to pass): 0.85 on the project's 2-core VM, four
# networks at batch 1, six passes (results/gpu-general/host-speed, cpu-vm-2026-11-29), measured before it was used.
CPU_HOST_ELASTICITY = 0.85


def host_bound_share(gpu_busy_share: float, gain: float = HOST_SHARE_GAIN, idle_share: float = 1.0) -> float:
    """The share of a run that moves with the host core's speed, in [0, 1].

    Args:
        gpu_busy_share: the idle run's share its kernels keep the GPU busy (``ModelPrediction.gpu_busy_share``).
        gain: how much the busy share understates the host-bound part (see :data:`HOST_SHARE_GAIN`).
        idle_share: the idle prediction over this run's (1 at idle, less under load).
    """
    return min(1.0, max(0.0, gain * (1.0 - gpu_busy_share))) * min(1.0, max(0.0, idle_share))


def reading_factor(share: float, reading_ms: float, reference_ms: float) -> float:
    """What a prediction is multiplied by when ``share`` of it moves with the host and the loop reads ``reading_ms``
    where its timings read ``reference_ms`` (plain arithmetic: pandas Series work elementwise too)."""
    return 1.0 + share * (reading_ms / reference_ms - 1.0)


def host_speed_factor(gpu_busy_share: float, reading_ms: float, reference_ms: float, idle_share: float = 1.0) -> float:
    """What a GPU prediction is multiplied by for a host reading ``reading_ms`` where its timings read
    ``reference_ms`` (``idle_share`` as in :func:`host_bound_share`)."""
    return reading_factor(host_bound_share(gpu_busy_share, idle_share=idle_share), reading_ms, reference_ms)


def idle_share_of(prediction: ModelPrediction) -> float:
    """The idle prediction over ``prediction``'s, at most 1 (1 where the idle prediction is not known)."""
    if prediction.idle_predicted_ms is None or not prediction.predicted_ms > 0:
        return 1.0
    return min(1.0, prediction.idle_predicted_ms / prediction.predicted_ms)


def loop_reference(readings: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The loop reading typical of a host (the median of ``readings``) and its fast and slow states (their 10th and
    90th percentiles, within the readings; one reading has no spread), for a composition's ``host_loop_ms`` and
    ``host_loop_range_ms``.

    Args:
        readings: loop readings of the host in ms (timing windows or model timings), at least one.

    Returns:
        The median and (fast, slow), in ms.
    """
    values = [float(ms) for ms in readings]
    middle = statistics.median(values)
    deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [middle] * 9
    return middle, (min(deciles[0], middle), max(deciles[-1], middle))


def host_share(prediction: ModelPrediction) -> float | None:
    """The share of ``prediction`` that moves with the host core's speed: a GPU run's host-bound share
    (:func:`host_bound_share`), a CPU run's :data:`CPU_HOST_ELASTICITY` at idle and 0 under load (beside a co-tenant
    on the same cores a reading measures the contention the load terms already price); None for another EP's
    prediction without a busy share."""
    if prediction.gpu_busy_share is not None:
        return host_bound_share(prediction.gpu_busy_share, idle_share=idle_share_of(prediction))
    if prediction.ep == "cpu":
        return CPU_HOST_ELASTICITY if prediction.load_source.startswith("idle") else 0.0
    return None


def host_range(
    prediction: ModelPrediction, reference_ms: float, loop_range_ms: tuple[float, float]
) -> list[float] | None:
    """``prediction`` on the host's fast and slow states: the predictions at the two ends of ``loop_range_ms``.

    A GPU host's core switches between two speeds (about 1.7x apart on the H200 host, for tens of seconds at a time:
    results/gpu-general/host-speed/after-load-probe), and which one a timing meets is not the model's doing. The
    range moves only the share that moves with the host (:func:`host_share`): a GPU-bound run's range is its
    prediction, and so is a loaded CPU run's.

    Args:
        prediction: a GPU prediction (it has a ``gpu_busy_share``) or a CPU one.
        reference_ms: the loop reading typical of the host the composition was fitted on.
        loop_range_ms: the 10th and 90th percentiles of that host's readings, the fast one first.

    Returns:
        ``[low, high]`` in ms (``low <= predicted_ms <= high`` when the reference lies in the range), or None for a
        prediction of another EP without a busy share.
    """
    share = host_share(prediction)
    if share is None:
        return None
    fast, slow = loop_range_ms
    return [prediction.predicted_ms * reading_factor(share, ms, reference_ms) for ms in (fast, slow)]


def near_range(measured_ms: Any, low_ms: Any, high_ms: Any, tolerance: float = 0.1) -> Any:
    """Whether some point of ``[low_ms, high_ms]`` is within ``tolerance`` of ``measured_ms`` (relative to it): for a
    range of one point, a prediction's own within-10% test (plain arithmetic: pandas Series work elementwise too)."""
    return (low_ms <= (1 + tolerance) * measured_ms) & (high_ms >= (1 - tolerance) * measured_ms)


def at_host_reading(
    prediction: ModelPrediction, reading_ms: float, reference_ms: float, reference_python: str, python: str
) -> ModelPrediction:
    """``prediction`` for a host whose loop reads ``reading_ms``.

    Args:
        prediction: a GPU bundle's prediction (it has a ``gpu_busy_share``) or a CPU one (scaled at idle only).
        reading_ms: the host's loop reading (:func:`hase_dagster.measure.host_speed.host_loop_reading`).
        reference_ms: the reading typical of the host the bundle's composition was fitted on.
        reference_python: the Python major.minor the reference was read with.
        python: the Python major.minor ``reading_ms`` was read with.

    Returns:
        The prediction with its mean and p90 scaled and a ``host_reading`` entry in its coverage saying by how much.

    Raises:
        HaseError: a GPU prediction without a busy share, or a reading that is not positive.
    """
    if not reading_ms > 0:
        raise HaseError(f"--host-reading must be a positive time in ms, got {reading_ms}")
    warnings = list(prediction.warnings)
    share = host_share(prediction)
    if share is None:
        raise HaseError(
            f"--host-reading scales the host-bound share of a run; {prediction.model} on {prediction.ep} has none"
        )
    if prediction.gpu_busy_share is None and not share:
        warnings.append(
            "--host-reading moves a CPU prediction at idle only: beside a co-tenant on the same cores the "
            "reading measures the contention the load terms already price; this one is left as it was"
        )
    factor = reading_factor(share, reading_ms, reference_ms)
    entry: dict[str, Any] = {
        "reading_ms": round(reading_ms, 4),
        "reference_ms": reference_ms,
        "host_bound_share": round(share, 4),
        "factor": round(factor, 4),
    }
    if python != reference_python:
        warnings.append(
            f"the host reading was taken with Python {python} and the bundle's reference with {reference_python}: "
            "the loop's speed differs between interpreters, so the factor is off by their ratio"
        )
    return replace(
        prediction,
        predicted_ms=prediction.predicted_ms * factor,
        p90_ms=prediction.p90_ms * factor,
        coverage={**prediction.coverage, "host_reading": entry},
        warnings=warnings,
    )
