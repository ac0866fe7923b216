"""What host_state_probe.py saw (issue 11): per probe file, the network's run times, the share of 100 ms windows in
the slow state and how long each state lasted, the two host readings (a fixed pure-Python loop and a 100-kernel
launch chain) in each state and their correlation with the network's time, and the host's steal share.

A window is slow when its median run is above the geometric mean of the file's 5th and 95th percentiles (the
two states are about 1.5x apart, so that threshold falls between them). Readings are paired with the median run
within 125 ms of them.

    .venv/bin/python results/gpu-general/host_state_report.py results/gpu-general/host-state/*-pin-*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

WINDOW_S = 0.1
PAIR_S = 0.125


def state_spans(slow: np.ndarray) -> tuple[list[float], list[float]]:
    """Lengths in seconds of the runs of consecutive fast and of slow windows."""
    fast_spans: list[float] = []
    slow_spans: list[float] = []
    start = 0
    for i in range(1, len(slow) + 1):
        if i == len(slow) or slow[i] != slow[start]:
            (slow_spans if slow[start] else fast_spans).append((i - start) * WINDOW_S)
            start = i
    return fast_spans, slow_spans


def summarize(path: Path) -> dict[str, object]:
    """One probe file's row (see the module docstring)."""
    data = json.loads(path.read_text())
    runs = np.array(data["runs"], dtype=float)
    end_s, ms = runs[:, 0], runs[:, 1]
    threshold = float(np.sqrt(np.percentile(ms, 5) * np.percentile(ms, 95)))
    window = np.floor(end_s / WINDOW_S).astype(int)
    window_median = pd.Series(ms).groupby(window).median().to_numpy()
    slow = window_median > threshold
    fast_spans, slow_spans = state_spans(slow)
    pairs = []
    for at_s, loop_ms, chain_ms in data["readings"]:
        near = (end_s > at_s - PAIR_S) & (end_s < at_s + PAIR_S)
        if near.sum() >= 3:
            pairs.append((float(np.median(ms[near])), loop_ms, chain_ms))
    paired = np.array(pairs)
    slow_reading = paired[:, 0] > threshold
    steal = np.array(data["seconds"], dtype=float)[:, 1]

    def median_where(column: int, where: np.ndarray) -> float:
        return round(float(np.median(paired[where, column])), 3) if where.any() else float("nan")

    return {
        "file": path.stem,
        "runs": len(ms),
        "cores": " ".join(str(c) for c in sorted({int(c) for c in runs[:, 2]})),
        "p5 / p50 / p95 ms": f"{np.percentile(ms, 5):.3f} / {np.median(ms):.3f} / {np.percentile(ms, 95):.3f}",
        "slow windows %": round(float(slow.mean() * 100)),
        "switches": len(fast_spans) + len(slow_spans) - 1,
        "longest fast / slow s": f"{max(fast_spans, default=0):.1f} / {max(slow_spans, default=0):.1f}",
        "loop ms fast / slow": f"{median_where(1, ~slow_reading)} / {median_where(1, slow_reading)}",
        "chain ms fast / slow": f"{median_where(2, ~slow_reading)} / {median_where(2, slow_reading)}",
        "corr(run, loop)": round(float(np.corrcoef(paired[:, 0], paired[:, 1])[0, 1]), 2),
        "corr(run, chain)": round(float(np.corrcoef(paired[:, 0], paired[:, 2])[0, 1]), 2),
        "max steal %": round(float(steal.max() * 100), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args()
    print(pd.DataFrame([summarize(p) for p in sorted(args.files)]).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
