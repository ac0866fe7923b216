"""Whole-model timings with the host core's speed read beside them, in passes (issue 11, batch 1 and 4).

On the H100 and H200 hosts a host-bound run (batch 1-4) takes one of two speeds, switching within seconds; a fixed
pure-Python loop on the timing thread runs 1.6-1.7x slower exactly while the network does (results/gpu-general/
README.md, "What the slow host state is"). This times each file for ``--seconds`` back to back, reading the loop
after every run on the same thread, and does so ``--passes`` times over all files (minutes apart, so each file meets
both states), writing per (pass, file): the runs' mean/median/p90 ms and the loop's mean ms over the same window.
The question it answers: does the loop read beside a timing tell how much slower than the fast state it ran?

    python3 results/gpu-general/host-speed/time_with_readings.py OUT.json FILE.onnx ... [--passes 3] [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from hase_dagster.core.config import OrtOptions
from hase_dagster.measure.host_speed import loop_ms
from hase_dagster.measure.runner import ModelRunner


def timed_window(runner: ModelRunner, seconds: float) -> dict[str, float]:
    """Runs back to back for ``seconds``, a loop reading after each: the runs' and the readings' statistics."""
    runs: list[float] = []
    loops: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        runs.append(runner.sample())
        loops.append(loop_ms())
    return {
        "mean_ms": statistics.fmean(runs),
        "median_ms": statistics.median(runs),
        "p90_ms": float(np.percentile(runs, 90)),
        "n": len(runs),
        "loop_mean_ms": statistics.fmean(loops),
        "loop_median_ms": statistics.median(loops),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--warmup-seconds", type=float, default=0.5)
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--ep", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    started = time.perf_counter()
    runners = {path: ModelRunner(path, args.ep, OrtOptions(), level="all") for path in args.files}
    rows: list[dict[str, object]] = []
    for number in range(args.passes):
        for path, runner in runners.items():
            if time.perf_counter() - started > args.budget_s:
                break
            warm_until = time.perf_counter() + args.warmup_seconds
            while time.perf_counter() < warm_until:
                runner.sample()
            rows.append({"pass": number, "model": path.name, **timed_window(runner, args.seconds)})
        args.out.write_text(json.dumps(rows, indent=1) + "\n")  # every pass: a cut call keeps what it timed
        print(f"pass {number}: {len(rows)} timings, {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
