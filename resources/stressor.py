"""The accelerator resource: owns the stressor process, so no background load outlives a run."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dagster as dg
from pydantic import PrivateAttr

from hase_dagster.stressor import Stressor


class StressorResource(dg.ConfigurableResource):
    """Starts the stressor at a level, waits for steady load, and stops it however the step ends.

    ``teardown_after_execution`` stops anything still running when the step fails or is cancelled;
    the stressor process also dies with its parent (PR_SET_PDEATHSIG) if the run process is killed.
    """

    startup_timeout_s: float = 120.0
    steady_timeout_s: float = 15.0
    _active: list[Stressor] = PrivateAttr(default_factory=list)

    @contextmanager
    def running(self, device: str, intensity: float, read_load: Callable[[], float]) -> Iterator[Stressor]:
        stressor = Stressor(device, intensity, self.startup_timeout_s)
        self._active.append(stressor)
        try:
            stressor.start()
            if intensity > 0:
                stressor.steady_load = stressor.wait_until_steady(read_load, timeout_s=self.steady_timeout_s)
            yield stressor
        finally:
            stressor.stop()
            self._active.remove(stressor)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        for stressor in list(self._active):
            stressor.stop()
        self._active.clear()
