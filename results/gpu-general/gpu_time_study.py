"""Where an unseen network's time goes on the GPU: each ONNX file's settled wall time per run (as a user
runs it: ORT_ENABLE_ALL, IO binding on the device), its GPU kernel time per run through CUPTI
(``torch.profiler`` sees ORT's kernels), the GPU kernels per run and the GPU time by kernel name.

Wall against GPU time separates the composition's error (host dispatch, per-run cost) from the kernel
regressor's (predicted kernel sum against the GPU's), on the same machine, for networks of families no
profile trained on. One JSON line per file to OUT/gpu_time.jsonl, appended as each file is done; a file
already there is skipped (call again to resume).

    python3 results/gpu-general/gpu_time_study.py OUT FILE_OR_DIR ... [--budget-s 500] [--runs 30] [--no-wall]
        [--wall-only --log wall.jsonl] [--shuffle-seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from hase_dagster.core.config import TimingOptions
from hase_dagster.measure.cupti import profiled_events
from hase_dagster.measure.runner import ModelRunner

# The gpu profile's settled model timing (hase.yaml): a second of warm-up, at least a second timed.
SETTLED = TimingOptions(warmup=5, warmup_seconds=1.0, min_loops=20, max_loops=5000, min_seconds=1.0, max_seconds=3.0)


def gpu_time(path: Path, runs: int, wall: bool = True, cupti: bool = True) -> dict:
    """One file's wall time (settled; skipped without ``wall``) and its CUPTI kernel time per run, by
    kernel name. Once a profiler has run in a process, CUPTI's callbacks slow every later launch of it:
    only the first file's wall time of a process is clean of them (a host-bound model's by far)."""
    runner = ModelRunner(path, "cuda", level="all")
    timing = runner.time(SETTLED) if wall else None
    row = {
        "file": path.name,
        "wall_mean_ms": timing.mean_ms if timing else None,
        "wall_median_ms": timing.median_ms if timing else None,
        "wall_p90_ms": timing.p90_ms if timing else None,
        "wall_runs": timing.n if timing else 0,
    }
    if not cupti:
        return row
    events = profiled_events(runner._run, runs)
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    copies = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset") and "dur" in e]
    by_name: dict[str, float] = {}
    for event in kernels:
        by_name[event["name"][:80]] = by_name.get(event["name"][:80], 0.0) + event["dur"] / 1e3 / runs
    return row | {
        "gpu_kernel_ms": sum(e["dur"] for e in kernels) / 1e3 / runs,
        "gpu_copy_ms": sum(e["dur"] for e in copies) / 1e3 / runs,
        "gpu_kernels_per_run": len(kernels) / runs,
        "gpu_ms_by_kernel": dict(sorted(by_name.items(), key=lambda kv: -kv[1])[:40]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("inputs", type=Path, nargs="+")
    parser.add_argument("--budget-s", type=float, default=500.0)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-wall", action="store_true", help="CUPTI only (see gpu_time)")
    parser.add_argument("--wall-only", action="store_true", help="no profiler: every wall time clean")
    parser.add_argument("--log", default="gpu_time.jsonl", help="the JSON-lines file under OUT")
    parser.add_argument(
        "--shuffle-seed", type=int, help="time the files in a random order (a process's first files may run slower)"
    )
    args = parser.parse_args()
    files = [p for i in args.inputs for p in (sorted(i.glob("*.onnx")) if i.is_dir() else [i])]
    if args.shuffle_seed is not None:
        random.Random(args.shuffle_seed).shuffle(files)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / args.log
    done = {json.loads(line)["file"] for line in log.read_text().splitlines()} if log.exists() else set()
    start = time.monotonic()
    for path in files:
        if path.name in done:
            continue
        if time.monotonic() - start > args.budget_s:
            print(f"budget spent: {len(files) - len(done)} file(s) left", flush=True)
            return 0
        try:
            row = gpu_time(path, args.runs, wall=not args.no_wall, cupti=not args.wall_only)
        except Exception as exc:  # noqa: BLE001 - one failed file is recorded, the study goes on
            row = {"file": path.name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        done.add(path.name)
        print(f"{path.name}: {row.get('gpu_kernel_ms', row.get('wall_mean_ms', row.get('error')))}", flush=True)
    print(f"all {len(files)} files done", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
