"""What a run waits for when another process shares the GPU by time slices (issue 11, item 3).

Measured on the H100 (``results/gpu-general/wait_study.json``: synthetic models of 0.1 to 10 ms, run
back to back as a user runs them, against the project's stressor at 0 to 1): a run that arrives while
the co-tenant holds the GPU waits out the co-tenant's burst, and a run longer than its own slice
waits again at each slice boundary it crosses. At stress 1.0 a run of ``d`` ms of GPU work takes

    d + burst x (1 + floor(d / slice))

(0.1 ms runs pay one burst, about 0.95 ms; a 9.8 ms run pays six). At a partial load the co-tenant
is busy a share of each period, and runs that fall into its idle part wait nothing, so the mean and
the p90 over many back-to-back runs come from a short simulation of that schedule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hase_dagster.measure.stressor import PERIOD_S


@dataclass(frozen=True)
class TimeSlicing:
    """A co-tenant that holds the GPU in bursts, busy for a share of each period.

    Attributes:
        burst_ms: how long a run waits when it finds the co-tenant on the GPU.
        slice_ms: how long a run keeps the GPU before the co-tenant takes a turn.
        period_ms: the co-tenant's busy-then-idle cycle (the stressor's duty-cycle period).
        saturated_util: the GPU utilisation (%) a co-tenant busy all the time reads; a reading is
            taken as that share of the period busy.
    """

    burst_ms: float = 0.95
    slice_ms: float = 1.75
    period_ms: float = PERIOD_S * 1000.0
    saturated_util: float = 95.0

    def busy_share(self, util: float) -> float:
        """The share of each period the co-tenant is busy, from a utilisation reading in %."""
        if not math.isfinite(util) or util <= 0:
            return 0.0
        return min(1.0, util / self.saturated_util)

    def run_times(self, gpu_ms: float, busy_share: float, min_runs: int = 400, periods: int = 12) -> np.ndarray:
        """Back-to-back runs of ``gpu_ms`` of GPU work against a co-tenant busy ``busy_share`` of each
        period, from phase 0; the time of each run, in ms (at least ``min_runs`` runs and
        ``periods`` periods)."""
        return _run_times(gpu_ms, busy_share, self.burst_ms, self.slice_ms, self.period_ms, min_runs, periods)

    def expected_wait(self, gpu_ms: float, util: float) -> tuple[float, float]:
        """What a run of ``gpu_ms`` pays on top of its work under a co-tenant reading ``util`` %:
        the mean and the p90 of the extra time, in ms."""
        share = self.busy_share(util)
        if gpu_ms <= 0 or share <= 0:
            return 0.0, 0.0
        # Rounded so that a sweep or a fit reuses simulations; the wait moves little within 1%.
        key = (_round_relative(gpu_ms), round(share, 2))
        return _cached_wait(*key, self.burst_ms, self.slice_ms, self.period_ms)


def _round_relative(value: float, digits: int = 2) -> float:
    return float(f"{value:.{digits}g}") if value < 1 else round(value, 2)


@lru_cache(maxsize=8192)
def _cached_wait(gpu_ms: float, share: float, burst: float, slice_ms: float, period: float) -> tuple[float, float]:
    times = _run_times(gpu_ms, share, burst, slice_ms, period, 400, 12)
    return float(times.mean() - gpu_ms), float(np.percentile(times, 90) - gpu_ms)


def cotenant_run_ms(
    work_ms: float, start_ms: float, share: float, burst_ms: float, slice_ms: float, period_ms: float
) -> float:
    """The wall time of ``work_ms`` of device work started at ``start_ms`` against a co-tenant busy
    the first ``share`` of every ``period_ms`` (the stressor's duty cycle; its period starts at 0).

    The schedule measured on the H100: a run that finds the co-tenant busy waits out its burst, and
    after every slice of its own work inside the busy part it waits another burst; in the idle part
    it runs undisturbed.

    Args:
        work_ms: the run's own device work.
        start_ms: when it starts, on the co-tenant's clock.
        share: the co-tenant's busy share of each period (clamped to 0..1).
        burst_ms: what one wait for the co-tenant costs.
        slice_ms: the work a run keeps the device for before the co-tenant's turn.
        period_ms: the co-tenant's period.

    Returns:
        The run's wall time in ms (``work_ms`` when the co-tenant is never busy).
    """
    busy = min(max(share, 0.0), 1.0) * period_ms
    if busy <= 0 or work_ms <= 0:
        return max(work_ms, 0.0)
    return _cotenant_end_ms(start_ms, work_ms, busy, burst_ms, slice_ms, period_ms) - start_ms


def _cotenant_end_ms(t: float, work_ms: float, busy: float, burst: float, slice_ms: float, period: float) -> float:
    """When a run of ``work_ms`` started at ``t`` ends, the co-tenant busy the first ``busy`` ms of
    every ``period`` (both positive); :func:`cotenant_run_ms` says the schedule."""
    eps = 1e-9
    left, waited = work_ms, False
    always_busy = busy >= period
    while left > eps:
        phase = t % period
        if period - phase < eps:  # a rounding error short of the next period
            phase = 0.0
        if always_busy or phase < busy - eps:
            if not waited:  # the co-tenant holds the GPU: wait out its burst
                t += burst
                waited = True
                continue
            step = min(left, slice_ms)
            left -= step
            t += step
            if left > eps and (always_busy or (t % period) < busy - eps):
                t += burst  # the slice ended inside the busy part: the co-tenant's turn
        else:
            step = min(left, period - phase)
            left -= step
            t += step
            waited = False
    return t


def _run_times(
    gpu_ms: float, share: float, burst: float, slice_ms: float, period: float, min_runs: int, periods: int
) -> np.ndarray:
    busy = min(max(share, 0.0), 1.0) * period
    if busy <= 0 or gpu_ms <= 0:
        return np.array([max(gpu_ms, 0.0)])
    t = 0.0
    times: list[float] = []
    horizon = periods * period
    # A hard cap keeps a near-zero run length from looping for long.
    while (len(times) < min_runs or t < horizon) and len(times) < 20_000:
        start = t
        t = _cotenant_end_ms(start, gpu_ms, busy, burst, slice_ms, period)
        times.append(t - start)
    return np.asarray(times)


def fit_time_slicing(
    saturated: Iterable[tuple[float, float]],
    bursts_ms: Iterable[float] = tuple(np.arange(0.5, 1.51, 0.05)),
    slices_ms: Iterable[float] = tuple(np.arange(0.5, 4.01, 0.25)),
) -> TimeSlicing:
    """Burst and slice lengths that best explain runs against a saturating co-tenant.

    Args:
        saturated: (idle ms, mean ms at full load) of runs timed back to back.
        bursts_ms: burst lengths tried.
        slices_ms: slice lengths tried.

    Returns:
        The :class:`TimeSlicing` whose ``d + burst x (1 + floor(d / slice))`` has the least squared
        relative error.
    """
    points = [(d, m) for d, m in saturated if d > 0 and m > 0]
    if not points:
        raise ValueError("no run to fit the time slicing on")
    idle = np.array([d for d, _ in points])
    loaded = np.array([m for _, m in points])

    def error(burst: float, slice_ms: float) -> float:
        predicted = idle + burst * (1 + np.floor(idle / slice_ms))
        return float(np.mean((predicted / loaded - 1) ** 2))

    burst, slice_ms = min(((b, s) for b in bursts_ms for s in slices_ms), key=lambda bs: error(*bs))
    return TimeSlicing(burst_ms=round(float(burst), 3), slice_ms=round(float(slice_ms), 3))
