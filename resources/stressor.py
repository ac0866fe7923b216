"""The accelerator resource: owns the stressor process, so no background load outlives a run."""

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from pydantic import PrivateAttr

from hase_dagster.core.config import TelemetryOptions
from hase_dagster.measure.load import LoadedDevice, under_load
from hase_dagster.measure.stressor import Stressor


class StressorResource(dg.ConfigurableResource):
    """Starts the stressor at a level, waits for steady load, and stops it however the step ends.

    ``teardown_after_execution`` stops anything still running when the step fails or is cancelled;
    the stressor process also dies with its parent (PR_SET_PDEATHSIG) if the run process is killed.
    """

    startup_timeout_s: float = 120.0
    steady_timeout_s: float = 15.0
    _active: list[Stressor] = PrivateAttr(default_factory=list)

    @contextmanager
    def under_load(self, device: str, level: float, telemetry: TelemetryOptions) -> Iterator[LoadedDevice]:
        """:func:`hase_dagster.measure.load.under_load`, with the stressor tracked for teardown."""
        with under_load(
            device, level, telemetry, self.startup_timeout_s, self.steady_timeout_s, self._active.append
        ) as loaded:
            try:
                yield loaded
            finally:  # under_load stops the stressor on its way out
                self._active.remove(loaded.stressor)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        for stressor in list(self._active):
            stressor.stop()
        self._active.clear()
