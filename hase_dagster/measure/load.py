"""A device under a controlled load: telemetry sampled, the stressor at a level and steady.

Every measurement under load (the benchmark assets, ``hase evaluate``) goes through
:func:`under_load`, so the order (telemetry first, stressor, wait for steady, stop both) is one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hase_dagster.core.config import TelemetryOptions
from hase_dagster.core.metrics import LOAD_FIELD
from hase_dagster.measure.stressor import Stressor
from hase_dagster.measure.telemetry import TelemetrySampler, metric_source


@dataclass(frozen=True)
class LoadedDevice:
    """The sampler that watches the device and the stressor that loads it."""

    sampler: TelemetrySampler
    stressor: Stressor

    def load_now(self) -> float:
        """The device's load field (GPU or CPU utilisation, %) read now."""
        return self.sampler.sample_now().values.get(LOAD_FIELD[self.stressor.device], 0.0)


@contextmanager
def under_load(
    device: str,
    level: float,
    telemetry: TelemetryOptions,
    startup_timeout_s: float = 120.0,
    steady_timeout_s: float = 15.0,
    on_start: Callable[[Stressor], None] | None = None,
) -> Iterator[LoadedDevice]:
    """Telemetry on, the stressor at ``level`` and steady (when ``level`` > 0); both stopped on exit.

    Args:
        device: ``cpu`` or ``cuda``.
        level: stress intensity in [0, 1].
        telemetry: which fields to sample and how often.
        startup_timeout_s: how long the stressor may take to say it is ready.
        steady_timeout_s: how long to wait for the load reading to settle.
        on_start: called with the stressor before it starts (a resource tracks it for teardown).

    Returns:
        A context whose value holds the running sampler and stressor; ``stressor.steady_load`` is the
        settled load reading (None at level 0).
    """
    with TelemetrySampler(metric_source(device, telemetry.fields), telemetry.interval_s) as sampler:
        stressor = Stressor(device, level, startup_timeout_s)
        if on_start is not None:
            on_start(stressor)
        loaded = LoadedDevice(sampler, stressor)
        with stressor:
            if level > 0:
                stressor.steady_load = stressor.wait_until_steady(loaded.load_now, timeout_s=steady_timeout_s)
            yield loaded
