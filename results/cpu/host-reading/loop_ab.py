"""A/B on this machine's CPU EP: whole-model timings with the host loop readings (``HOST_LOOP_READINGS`` loops before
the warm-up and after the window) and without, in turn, idle and at stress 1.0, pinned to one core as the benchmarks
are. Prints each pair's ratio (with / without) and the summary by stress level.

    HASE_DATA_DIR=.hase_data .venv/bin/python results/cpu/host-reading/loop_ab.py .hase_data/models/nas_s3*_b1.onnx

(2026-11-29 it was run twice: first with the readings between samples, the code of runs 16-17, then as it is now.)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

import hase_dagster.measure.runner as runner_module
from hase_dagster.core.config import load_config
from hase_dagster.core.profiles import select_profile
from hase_dagster.measure.load import under_load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    profile = select_profile(load_config(), "cpu")
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    reading = runner_module.host_loop_reading
    rows = []
    for level in (0.0, 1.0):
        with under_load(profile.device, level, profile.telemetry):
            for round_number in range(args.rounds):
                for with_readings in (True, False):
                    # without: the runner's reading is a no-op (no loop runs before or after the window)
                    runner_module.host_loop_reading = reading if with_readings else lambda **_: float("nan")
                    for path in args.files:
                        runner = runner_module.ModelRunner(path, "cpu", profile.ort, level="all")
                        timing = runner.time(profile.model_timing)
                        rows.append(
                            {"level": level, "round": round_number, "readings": with_readings, "model": path.name,
                             "mean_ms": timing.mean_ms}
                        )  # fmt: skip
                        del runner
    frame = pd.DataFrame(rows).pivot_table(index=["level", "model", "round"], columns="readings", values="mean_ms")
    frame["ratio"] = frame[True] / frame[False]
    print(frame.round(3).to_markdown())
    print(frame.groupby("level")["ratio"].describe().round(3).to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
