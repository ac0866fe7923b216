"""Why do one machine's idle batch-1 timings of the same file move up to 30% between passes? (issue 11)

The interleave study (results/gpu-general/interleave/) ruled out the timing order. This one separates the
session from the machine: in each pass every file is timed three ways, in an order that rotates between
passes: a fresh session with the CUDA EP's default cuDNN search (EXHAUSTIVE, as every set was timed), the
session made in pass 1 and kept alive, and a fresh session with HEURISTIC search. If the kept session holds
still while fresh ones move, the spread is the session's (the algorithms its search picked, where its memory
landed); if all three move together, it is the machine's (clocks, host). NVML's SM clock, GPU utilisation and
power are sampled every 5 ms during each timing, and the host's mean CPU MHz read before it.

    python3 results/cpu-general/idle_spread_study.py FOLDER OUT.json [--passes 3]

Writes OUT.json after every pass (a call cut short keeps the passes done).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import pynvml

from hase_dagster.core.config import OrtOptions, load_config
from hase_dagster.core.profiles import select_profile
from hase_dagster.measure.runner import ModelRunner


class NvmlSampler:
    """Samples (monotonic ns, SM MHz, GPU util %, power W) of GPU 0 every ``period_s`` in a thread."""

    def __init__(self, period_s: float = 0.005) -> None:
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self._period_s = period_s
        self.samples: list[tuple[int, float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            h = self._handle
            sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            power = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            self.samples.append((time.monotonic_ns(), float(sm), float(util), power))
            time.sleep(self._period_s)

    def window(self, start_ns: int, end_ns: int) -> dict[str, float | None]:
        """Mean and min SM clock, mean utilisation and power between two monotonic_ns readings."""
        inside = [s for s in self.samples if start_ns <= s[0] <= end_ns]
        if not inside:
            return {"sm_mhz_mean": None, "sm_mhz_min": None, "util_mean": None, "power_w_mean": None}
        n = len(inside)
        return {
            "sm_mhz_mean": sum(s[1] for s in inside) / n,
            "sm_mhz_min": min(s[1] for s in inside),
            "util_mean": sum(s[2] for s in inside) / n,
            "power_w_mean": sum(s[3] for s in inside) / n,
        }

    def __enter__(self) -> NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        pynvml.nvmlShutdown()


def cpu_mhz() -> float | None:
    """The mean 'cpu MHz' over the host's cores (None where /proc/cpuinfo has none)."""
    values = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines() if "cpu MHz" in line]
    return sum(values) / len(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--profile", default="gpu")
    args = parser.parse_args()
    profile = select_profile(load_config(), args.profile)
    timing = profile.model_timing
    exhaustive = profile.ort
    heuristic = OrtOptions(**(profile.ort.model_dump() | {"cudnn_conv_algo_search": "HEURISTIC"}))
    paths = sorted(args.folder.glob("*_b1.onnx"))
    kept: dict[str, ModelRunner] = {}
    records: list[dict[str, Any]] = []
    modes = ["fresh", "kept", "heuristic"]
    with NvmlSampler() as nvml:
        for number in range(1, args.passes + 1):
            order = modes[number % 3 :] + modes[: number % 3]
            for path in paths:
                for mode in order:
                    made = time.monotonic()
                    if mode == "kept":
                        if path.name not in kept:
                            kept[path.name] = ModelRunner(path, "cuda", exhaustive, level="all", clock=timing.clock)
                        runner = kept[path.name]
                    else:
                        options = heuristic if mode == "heuristic" else exhaustive
                        runner = ModelRunner(path, "cuda", options, level="all", clock=timing.clock)
                    session_s = time.monotonic() - made
                    mhz = cpu_mhz()
                    start = time.monotonic_ns()
                    result = runner.time(timing).to_dict()
                    window = nvml.window(start, time.monotonic_ns())
                    del runner  # a fresh session's memory goes before the next one is made
                    keep = ("mean_ms", "median_ms", "p90_ms", "min_ms", "n")
                    records.append(
                        {"pass": number, "model": path.name, "mode": mode, "session_s": session_s, "cpu_mhz": mhz}
                        | {k: result[k] for k in keep}
                        | window
                    )
            args.out.write_text(json.dumps(records, indent=1) + "\n")
            print(f"pass {number}: {len(records)} timings", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
