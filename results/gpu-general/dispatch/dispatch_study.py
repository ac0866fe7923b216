"""What each ORT node costs the host on the CUDA EP: every file timed clean as a user runs it (ORT_ENABLE_ALL, IO
binding on the device, settled), then run again under ORT's own profiler, whose node events on the CUDA EP time the
host's ``Compute`` call (the launch is asynchronous, so that is the host's dispatch, plus any copy or sync the node
makes itself).

Why: the composition charges every launching kernel one host dispatch time, fitted. ORT resnet50 at batch 1 ran
2.8 ms for 122 nodes (23 us a node) and DeiT-small 2.4 ms for about 200 (12 us): the dispatch is not one constant.

    python3 results/gpu-general/dispatch/dispatch_study.py OUT FILE ... [--runs 60] [--warm-runs 30] [--budget-s 300]

One JSON line per file to OUT/dispatch.jsonl (a file already there is skipped: call again to resume). Each line has
the clean timing, the profiled runs' wall (model_run) and node sum, and per node its op type, provider and median
host time over the profiled runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hase_dagster.analysis.graph import node_profile
from hase_dagster.core.config import EpName, TimingOptions
from hase_dagster.measure.runner import ModelRunner

SETTLED = TimingOptions(warmup=10, warmup_seconds=0.5, min_loops=50, max_loops=20000, min_seconds=1.0, max_seconds=2.0)


def node_times(events: list[dict[str, Any]], warm_runs: int) -> dict[str, Any]:
    """Per node, its median host time over the runs after the first ``warm_runs`` (:func:`node_profile`).

    Args:
        events: ORT's profile (a Chrome trace's event list).
        warm_runs: the profiled runs to leave out (the session's first runs allocate and search).

    Returns:
        ``runs`` (profiled runs kept), ``run_ms`` (median model_run span), ``nodes`` (order of first appearance:
        name, op_type, provider, median us).
    """
    runs = sorted(
        (e for e in events if e.get("name") == "model_run" and e.get("cat") == "Session"), key=lambda e: e["ts"]
    )
    kept = runs[warm_runs:]
    if not kept:
        return {"runs": 0, "run_ms": None, "nodes": []}
    nodes = [
        {"name": name, "op_type": node["op_type"], "provider": node["provider"], "us": node["median_us"]}
        for name, node in node_profile(events, skip_runs=warm_runs).items()
    ]
    # ORT builds with CUPTI add the device kernels as "Kernel" events; the pip wheel may not
    device_us = sum(float(e["dur"]) for e in events if e.get("cat") == "Kernel" and e["ts"] >= kept[0]["ts"])
    return {
        "runs": len(kept),
        "device_ms_per_run": device_us / 1e3 / len(kept),
        "run_ms": statistics.median(float(r["dur"]) for r in kept) / 1e3,
        "node_sum_ms": sum(n["us"] for n in nodes) / 1e3,
        "nodes": nodes,
    }


def study(path: Path, runs: int, warm_runs: int, ep: EpName = "cuda") -> dict[str, Any]:
    """Time ``path`` clean, then profiled, on ``ep``; see the module docstring."""
    t0 = time.perf_counter()
    clean = ModelRunner(path, ep, level="all").time(SETTLED)
    with tempfile.TemporaryDirectory() as scratch:
        runner = ModelRunner(path, ep, level="all", profile_prefix=Path(scratch) / "ort")
        for _ in range(warm_runs + runs):
            runner.run()
        trace = runner.session.end_profiling()
        events = json.loads(Path(trace).read_text())
        del runner
    profiled = node_times(events, warm_runs)
    return {
        "file": path.name,
        "clean_mean_ms": clean.mean_ms,
        "clean_median_ms": clean.median_ms,
        "host_loop_ms": clean.host_loop_ms,
        **profiled,
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warm-runs", type=int, default=30)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--ep", default="cuda", choices=["cuda", "cpu"], help="cpu: to try the script without a GPU")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "dispatch.jsonl"
    done = {json.loads(line)["file"] for line in log.read_text().splitlines()} if log.exists() else set()
    deadline = time.monotonic() + args.budget_s
    for path in args.files:
        if path.name in done:
            continue
        if time.monotonic() > deadline:
            print(f"budget spent; {path.name} and after left for the next call")
            break
        try:
            row = study(path, args.runs, args.warm_runs, args.ep)
        except Exception as exc:  # one file's failure is recorded, the rest go on
            row = {"file": path.name, "error": str(exc).splitlines()[0][:300]}
        with log.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(path.name, {k: row.get(k) for k in ("clean_mean_ms", "run_ms", "node_sum_ms", "host_loop_ms", "error")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
