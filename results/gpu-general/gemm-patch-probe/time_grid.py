"""Time every file of the probe grid (export_grid.py) on the CUDA EP as a user runs it (ORT_ENABLE_ALL, IO binding):
its GPU time per run on the device clock (CUDA events on ORT's stream) and its whole run on the host clock. One JSON
line per file, appended as it goes; files already in the output are skipped (a second call resumes).

    PYTHONPATH=/tmp/site:$PWD python3 time_grid.py GRID_DIR OUT.jsonl
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from hase_dagster.core.config import TimingOptions
from hase_dagster.measure.runner import time_model


def main() -> int:
    grid, out = Path(sys.argv[1]), Path(sys.argv[2])
    done = {json.loads(line)["file"] for line in out.read_text().splitlines()} if out.exists() else set()
    started = time.monotonic()
    for path in sorted(grid.glob("*.onnx")):
        if path.name in done:
            continue
        row: dict[str, object] = {"file": path.name}
        for clock in ("device", "host"):
            config = TimingOptions(
                warmup=10, warmup_seconds=0.3, min_loops=30, max_loops=300, max_seconds=0.6, clock=clock
            )
            timing = time_model(path, "cuda", config, level="all")
            row[f"{clock}_mean_ms"], row[f"{clock}_median_ms"] = timing.mean_ms, timing.median_ms
            row[f"{clock}_n"] = timing.n
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{time.monotonic() - started:6.1f} s {path.name}: device {row['device_median_ms']:.4f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
