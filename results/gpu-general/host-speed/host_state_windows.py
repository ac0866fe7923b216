"""The H100 host-state study's 30-second runs (``../host-state/*.json``: every run's end and time, a loop reading every
0.25 s on the same thread) cut into windows of ``--seconds``, each with its runs' mean and the loop's mean: the format
``score_readings.py`` reads.

    .venv/bin/python results/gpu-general/host-speed/host_state_windows.py OUT.json ../host-state/chk_*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("probes", type=Path, nargs="+")
    parser.add_argument("--seconds", type=float, default=1.5)
    args = parser.parse_args()
    windows = []
    for path in args.probes:
        probe = json.loads(path.read_text())
        runs, readings = np.array(probe["runs"]), np.array(probe["readings"])
        for start in np.arange(0.0, runs[:, 0].max(), args.seconds):
            inside = (runs[:, 0] >= start) & (runs[:, 0] < start + args.seconds)
            read = (readings[:, 0] >= start) & (readings[:, 0] < start + args.seconds)
            if inside.any() and read.any():
                windows.append(
                    {
                        "probe": path.name,
                        "model": probe["model"],
                        "mean_ms": float(runs[inside, 1].mean()),
                        "n": int(inside.sum()),
                        "loop_mean_ms": float(readings[read, 1].mean()),
                    }
                )
    args.out.write_text(json.dumps(windows, indent=1) + "\n")
    print(f"{len(windows)} windows from {len(args.probes)} probes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
