"""How a CPU model timing under the stressor depends on the timing's window (issue 11, CPU never seen at stress 0.5).

For each file and stress level: the cpu profile's own model timing (`model_timing` in hase.yaml, as `make run` takes
it) REPEATS times in a row, then one long window of LONG_S seconds whose single runs are kept with their start times,
so that the run times can be read against the stressor's 20 ms duty cycle.

    .venv/bin/python results/cpu/stress-half/stress_half.py OUT.json FILE.onnx [...] [--levels 0.0,0.5,1.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from hase_dagster.core.config import load_config
from hase_dagster.core.profiles import select_profile
from hase_dagster.measure.load import under_load
from hase_dagster.measure.runner import ModelRunner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--levels", default="0.0,0.5,1.0")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--long-s", type=float, default=3.0)
    args = parser.parse_args()
    profile = select_profile(load_config(), "cpu")
    records = []
    for level in (float(x) for x in args.levels.split(",")):
        with under_load("cpu", level, profile.telemetry):
            for path in args.files:
                runner = ModelRunner(path, "cpu", profile.ort, level="all")
                profile_means = [runner.time(profile.model_timing) for _ in range(args.repeats)]
                starts, runs = [], []
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < args.long_s:
                    starts.append(time.perf_counter() - t0)
                    runs.append(runner.sample())
                records.append(
                    {
                        "file": path.name,
                        "stress_level": level,
                        "profile_timing_means_ms": [t.mean_ms for t in profile_means],
                        "profile_timing_n": [t.n for t in profile_means],
                        "long_window_mean_ms": statistics.fmean(runs),
                        "long_window_runs": len(runs),
                        "long_window_samples_ms": [round(r, 4) for r in runs],
                        "long_window_starts_s": [round(s, 5) for s in starts],
                    }
                )
                r = records[-1]
                print(
                    f"{path.name} stress {level}: profile timing {[round(m, 3) for m in r['profile_timing_means_ms']]} "
                    f"(n {r['profile_timing_n']}), {args.long_s:.0f} s window {r['long_window_mean_ms']:.3f} ms "
                    f"over {len(runs)} runs",
                    flush=True,
                )
    args.out.write_text(json.dumps(records) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
