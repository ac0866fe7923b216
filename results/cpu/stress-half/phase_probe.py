"""Prototype CPU stressors for stress 0.5: duty-cycle workers locked to the shared monotonic clock, all in phase or
staggered by 1/N of the period, beside the shipped free-running ones (hase_dagster.measure.stressor); each arrangement
started twice, and the cpu profile's model timing taken three times per file under each.

    .venv/bin/python results/cpu/stress-half/phase_probe.py OUT.json FILE.onnx [...]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

from hase_dagster.core.config import load_config
from hase_dagster.core.profiles import select_profile
from hase_dagster.measure import stressor
from hase_dagster.measure.runner import ModelRunner

PERIOD_S = stressor.PERIOD_S


def locked_worker(core: int, intensity: float, offset: float, until: float) -> None:
    """Busy while the shared clock's phase (less ``offset`` periods) is below ``intensity``, asleep otherwise."""
    os.sched_setaffinity(0, {core})
    while time.monotonic() < until:
        now = time.monotonic()
        phase = (now / PERIOD_S - offset) % 1.0
        if phase < intensity:
            end = now + (intensity - phase) * PERIOD_S
            while time.monotonic() < end:
                pass
        else:
            time.sleep((1.0 - phase) * PERIOD_S)


def free_worker(core: int, intensity: float, until: float) -> None:
    """The shipped worker: its own duty cycle from its own start."""
    os.sched_setaffinity(0, {core})
    stressor._duty_cycle(intensity, stressor._spin, until)


def start(mode: str, intensity: float, seconds: float) -> list[multiprocessing.Process]:
    context = multiprocessing.get_context("fork")
    until = time.monotonic() + seconds
    cores = sorted(os.sched_getaffinity(0))
    workers = []
    for i, core in enumerate(cores):
        if mode == "free":
            worker = context.Process(target=free_worker, args=(core, intensity, until), daemon=True)
        else:
            offset = 0.0 if mode == "inphase" else i / len(cores)
            worker = context.Process(target=locked_worker, args=(core, intensity, offset, until), daemon=True)
        worker.start()
        workers.append(worker)
    time.sleep(0.5)
    return workers


def main() -> int:
    profile = select_profile(load_config(), "cpu")
    files = [Path(f) for f in sys.argv[2:]]
    rows = []
    for mode in ("inphase", "staggered", "free", "inphase", "staggered", "free"):
        workers = start(mode, 0.5, 1000)
        row: dict[str, object] = {"mode": mode, "level": 0.5}
        for path in files:
            runner = ModelRunner(path, "cpu", profile.ort, level="all")
            row[path.name] = [round(runner.time(profile.model_timing).mean_ms, 3) for _ in range(3)]
        for worker in workers:
            worker.kill()
            worker.join()
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(sys.argv[1]).write_text(json.dumps(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
