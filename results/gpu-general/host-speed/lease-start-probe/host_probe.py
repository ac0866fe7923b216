"""Read the host's pure-Python loop every second from a lease's start, with the image's Python and no payload.

The loop is ``hase_dagster.measure.host_speed``'s (``loop_ms`` / ``host_loop_reading``), copied so that it runs
without the project installed.

    python3 host_probe.py SECONDS    # one line a second: seconds since start, loop ms, load average, mean cpu MHz
"""

from __future__ import annotations

import os
import statistics
import sys
import time


def loop_ms(iterations: int = 20_000) -> float:
    """The time of a fixed pure-Python loop, in ms."""
    started = time.perf_counter_ns()
    total = 0
    for i in range(iterations):
        total += i
    return (time.perf_counter_ns() - started) / 1e6


def host_loop_reading(seconds: float = 0.5, at_least: int = 5) -> float:
    """The mean :func:`loop_ms` over ``seconds`` of back-to-back readings (at least ``at_least``)."""
    readings: list[float] = []
    end = time.perf_counter() + seconds
    while len(readings) < at_least or time.perf_counter() < end:
        readings.append(loop_ms())
    return statistics.fmean(readings)


def main() -> int:
    started = time.time()
    total = float(sys.argv[1])
    print("python", sys.version.split()[0], "cpus", os.cpu_count(), flush=True)
    while time.time() - started < total:
        with open("/proc/cpuinfo") as cpuinfo:
            mhz = [float(line.split(":")[1]) for line in cpuinfo if line.startswith("cpu MHz")]
        with open("/proc/loadavg") as loadavg:
            load = loadavg.read().split()[0]
        reading, clock = host_loop_reading(), statistics.fmean(mhz)
        print(f"{time.time() - started:6.1f} s loop {reading:.3f} ms load {load} MHz {clock:.0f}", flush=True)
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
