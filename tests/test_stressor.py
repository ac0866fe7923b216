"""The stressor loads the CPU for real and never outlives its run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from hase_dagster.core.config import TelemetryOptions
from hase_dagster.core.errors import HaseError
from hase_dagster.measure.stressor import Stressor
from hase_dagster.measure.telemetry import HostMetrics
from resources.stressor import StressorResource


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return all(p.status() == psutil.STATUS_ZOMBIE for p in psutil.process_iter() if _pgid(p) == pgid)


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except ProcessLookupError:
        return None


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def test_cpu_stressor_raises_load_and_stops() -> None:
    """At full intensity the stressor's workers, one per core, burn CPU time, the host's utilisation the telemetry
    reads holds at least their share, and all stop with it. Measured on the workers themselves, not as a rise over an
    idle reading: the machine that runs the suite need not be idle."""
    cores = len(os.sched_getaffinity(0))
    with Stressor("cpu", 1.0) as stressor:
        pid = stressor.pid
        assert pid is not None
        workers = psutil.Process(pid).children()
        assert len(workers) == cores
        before = _cpu_seconds(workers)
        metrics = HostMetrics()
        time.sleep(1.0)
        util = metrics.read()["HOST_CPU_UTIL"]
        burned = _cpu_seconds(workers) - before
    share = 100 * burned / cores
    assert burned > 0.3 * cores, burned
    assert util >= share - 15, (util, share)
    assert _gone(pid) and all(_gone(w.pid) for w in workers)


def test_intensity_outside_unit_interval_is_refused() -> None:
    with pytest.raises(HaseError, match=r"\[0, 1\]"):
        Stressor("cpu", 1.5)


def test_stressor_is_gone_after_a_failing_asset() -> None:
    seen: dict[str, int] = {}

    @dg.asset
    def failing_measurement(stressor: StressorResource) -> None:
        with stressor.under_load("cpu", 0.5, TelemetryOptions(fields=["HOST_CPU_UTIL"])) as loaded:
            seen["pid"] = loaded.stressor.pid
            raise RuntimeError("kernel exploded")

    result = dg.materialize([failing_measurement], resources={"stressor": StressorResource()}, raise_on_error=False)
    assert not result.success
    assert _gone(seen["pid"]) and _group_gone(seen["pid"])


def test_stressor_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = (
        "import time, sys\n"
        "from hase_dagster.measure.stressor import Stressor\n"
        "s = Stressor('cpu', 0.5); s.start(); print(s.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    stressor_pid = int(parent.stdout.readline())
    assert psutil.pid_exists(stressor_pid)
    workers = [w.pid for w in psutil.Process(stressor_pid).children()]
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone(stressor_pid) and all(_gone(w) for w in workers)
