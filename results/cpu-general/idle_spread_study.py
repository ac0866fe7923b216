"""Why do one machine's idle batch-1 timings of the same file move up to 30% between passes? (issue 11)

The interleave study (results/gpu-general/interleave/) ruled out the timing order. This one separates the
session from the machine: in each pass every file is timed three ways, in an order that rotates between
passes: a fresh session with the CUDA EP's default cuDNN search (EXHAUSTIVE, as every set was timed), the
session made in pass 1 and kept alive, and a fresh session with HEURISTIC search. If the kept session holds
still while fresh ones move, the spread is the session's (the algorithms its search picked, where its memory
landed); if all three move together, it is the machine's (clocks, host). NVML's SM clock, GPU utilisation and
power are sampled every 5 ms during each timing, and the host's mean CPU MHz read before it.

    python3 results/cpu-general/idle_spread_study.py FOLDER OUT.json [--passes 3]

Writes OUT.json after every pass (a call cut short keeps the passes done). The committed
results/gpu-general/idle-spread/spread.json came from this script's first version (commit 7b7c855), whose own
NVML sampler also kept each window's lowest SM clock (``sm_mhz_min``); it now samples through hase's
TelemetrySampler.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import psutil

from hase_dagster.core.config import OrtOptions, load_config
from hase_dagster.core.profiles import select_profile
from hase_dagster.measure.runner import ModelRunner
from hase_dagster.measure.telemetry import NvmlMetrics, TelemetrySampler

# NVML fields read every 5 ms, and the names they get in OUT.json (window means).
FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_mhz_mean",
    "DCGM_FI_DEV_GPU_UTIL": "util_mean",
    "DCGM_FI_DEV_POWER_USAGE": "power_w_mean",
}


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
    with TelemetrySampler(NvmlMetrics(FIELDS), interval_s=0.005) as nvml:
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
                    frequency = psutil.cpu_freq()  # the mean over cores; None where the guest has none
                    mhz = frequency.current if frequency is not None else None
                    result = runner.time(timing).to_dict()
                    window = {FIELDS[k]: v for k, v in nvml.window_mean(result["start_ns"], result["end_ns"]).items()}
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
