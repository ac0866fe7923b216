"""Where a whole run's GPU idles: CUPTI's device events and the host's CUDA API calls of a few runs of each ONNX
file (ORT_ENABLE_ALL, IO binding on the device, as a user runs it), every gap between the GPU's consecutive device
events classified by whether the host had launched the next one before the GPU went idle.

- ``host_late``: the next event's launch call began after the event before it ended: the host was behind (dispatch,
  a synchronization, an allocation);
- ``device_side``: the launch was queued in time and the GPU still idled: launch latency between kernels, a copy
  engine's turn, a stream dependency.

Each gap is also charged to the CUDA API calls the host made between the two events' launches (a sync or a copy
there explains a host-late gap). ``torch.profiler``'s callbacks slow every launch, so host-late time is an upper
bound; the study compares networks under the same profiler, not with their clean wall times.

    python3 results/gpu-general/user-kernels/gap_study.py OUT FILE ... [--runs 5] [--budget-s 200]

One JSON line per file to OUT/gaps.jsonl (a file already there is skipped: call again to resume).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hase_dagster.core.config import TimingOptions
from hase_dagster.measure.cupti import DEVICE_EVENT_CATEGORIES, profiled_events
from hase_dagster.measure.runner import ModelRunner

# Gaps shorter than this are the GPU's back-to-back launch latency; they are summed but not itemized.
ITEMIZE_US = 4.0
API_CATEGORIES = {"cuda_runtime", "cuda_driver"}


def _short(name: str) -> str:
    """A kernel name without its template arguments and parameter list."""
    name = name.split("(")[0]
    return name.split("<")[0][-60:]


def run_gaps(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Summarize the events of the ``run`` spans: per run, the wall span, the GPU's busy time (union of device
    events), and its idle gaps by kind and cause.

    Args:
        events: a Chrome trace's events from ``torch.profiler`` with host and CUDA activities, each run wrapped in
            a ``record_function("run")`` span.

    Returns:
        Means per run (ms) and the largest gap sources.
    """
    runs = sorted((e for e in events if e.get("name") == "run" and e.get("ph") == "X"), key=lambda e: e["ts"])
    device = sorted(
        (e for e in events if e.get("cat") in DEVICE_EVENT_CATEGORIES and "dur" in e), key=lambda e: e["ts"]
    )
    apis = sorted((e for e in events if e.get("cat") in API_CATEGORIES and "dur" in e), key=lambda e: e["ts"])
    launch_at = {e["args"].get("correlation"): e["ts"] for e in apis if "args" in e}
    totals: Counter[str] = Counter()
    by_pair: Counter[str] = Counter()
    by_api: Counter[str] = Counter()
    api_calls: Counter[str] = Counter()
    for run in runs:
        start, end = run["ts"], run["ts"] + run["dur"]
        mine = [
            e
            for e in device
            if launch_at.get(e.get("args", {}).get("correlation"), -1.0) >= start
            and launch_at.get(e.get("args", {}).get("correlation"), -1.0) <= end
        ]
        my_apis = [a for a in apis if start <= a["ts"] <= end]
        api_calls.update(a["name"] for a in my_apis)
        totals["wall_us"] += run["dur"]
        totals["device_events"] += len(mine)
        if not mine:
            continue
        totals["before_first_us"] += mine[0]["ts"] - start
        busy_end = mine[0]["ts"]
        previous = None
        for e in mine:
            gap = e["ts"] - busy_end
            if gap > 0 and previous is not None:
                launched = launch_at.get(e["args"].get("correlation"), e["ts"])
                kind = "host_late" if launched > busy_end else "device_side"
                totals[f"{kind}_us"] += gap
                if gap >= ITEMIZE_US:
                    totals[f"{kind}_itemized_us"] += gap
                    totals[f"{kind}_itemized_n"] += 1
                    by_pair[f"{kind}: {_short(previous['name'])} -> {_short(e['name'])}"] += gap
                    prev_launch = launch_at.get(previous["args"].get("correlation"), previous["ts"])
                    between = {
                        a["name"] for a in my_apis if prev_launch < a["ts"] < launched and "Launch" not in a["name"]
                    }
                    for name in between or {"(launches only)"}:
                        by_api[f"{kind}: {name}"] += gap
            totals["busy_us"] += max(0.0, e["ts"] + e["dur"] - max(busy_end, e["ts"]))
            if e["ts"] + e["dur"] > busy_end:
                busy_end = e["ts"] + e["dur"]
                previous = e
        totals["after_last_us"] += end - busy_end
    n = max(len(runs), 1)

    def per_run(counter: Counter[str], top: int) -> dict[str, float]:
        return {k: round(v / n / 1e3, 4) for k, v in counter.most_common(top)}

    return {
        "runs": len(runs),
        **{k.replace("_us", "_ms"): round(v / n / 1e3, 4) for k, v in totals.items() if k.endswith("_us")},
        **{k: round(v / n, 1) for k, v in totals.items() if k.endswith("_n") or k == "device_events"},
        "gap_ms_by_pair": per_run(by_pair, 25),
        "gap_ms_by_api_between": per_run(by_api, 15),
        "api_calls_per_run": {k: round(v / n, 1) for k, v in api_calls.most_common(20)},
    }


def study(path: Path, runs: int) -> dict[str, Any]:
    """One file: warm it up as the settled timing does, then trace ``runs`` runs with host and CUDA activities."""
    from torch.profiler import record_function

    runner = ModelRunner(path, "cuda", level="all")
    timing = runner.time(TimingOptions(warmup=5, warmup_seconds=1.0, min_loops=20, max_loops=2000, max_seconds=2.0))

    def one_run() -> None:
        with record_function("run"):
            runner._run()

    events = profiled_events(one_run, runs, host=True)
    return {"file": path.name, "clean_wall_median_ms": timing.median_ms, **run_gaps(events)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=200.0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "gaps.jsonl"
    done = {json.loads(line)["file"] for line in log.read_text().splitlines()} if log.exists() else set()
    began = time.monotonic()
    for path in args.files:
        if path.name in done:
            continue
        if time.monotonic() - began > args.budget_s:
            print(f"gap_study: budget spent, {path.name} and later left", file=sys.stderr)
            break
        try:
            row = study(path, args.runs)
        except Exception as error:  # one file's failure is recorded, the rest go on
            row = {"file": path.name, "error": f"{type(error).__name__}: {error}"[:300]}
        with log.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(path.name, {k: row.get(k) for k in ("wall_ms", "busy_ms", "host_late_ms", "device_side_ms")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
