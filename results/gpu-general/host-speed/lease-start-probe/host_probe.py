"""Read the host's loop (``hase_dagster.measure.host_speed.host_loop_reading``) every second from a lease's start.

Needs only the repository on the path (that module imports nothing outside the standard library), so it runs with the
GPU image's Python before the payload is installed.

    PYTHONPATH=. python3 host_probe.py SECONDS    # a line a second: seconds since start, loop ms, load average, cpu MHz
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from hase_dagster.measure.host_speed import host_loop_reading


def main() -> int:
    started = time.time()
    total = float(sys.argv[1])
    print("python", sys.version.split()[0], "cpus", os.cpu_count(), flush=True)
    while time.time() - started < total:
        with open("/proc/cpuinfo") as cpuinfo:
            mhz = [float(line.split(":")[1]) for line in cpuinfo if line.startswith("cpu MHz")]
        with open("/proc/loadavg") as loadavg:
            load = loadavg.read().split()[0]
        reading, clock = host_loop_reading(0.5), statistics.fmean(mhz)
        print(f"{time.time() - started:6.1f} s loop {reading:.3f} ms load {load} MHz {clock:.0f}", flush=True)
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
