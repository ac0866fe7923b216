"""What a co-tenant does to a run on the GPU's own timeline: CUPTI (torch.profiler, same process and context as
ORT) around whole-model runs, idle and under the stressor.

Each file is run as ``model_benchmarks`` runs it (``ModelRunner``: IO binding, ORT_ENABLE_ALL, the profile's
options), warmed up, then traced for ``--runs`` runs. Per model and level it keeps: the host wall time per run,
the kernels and copies per run, the GPU busy time per run, the gaps between consecutive GPU operations of a run
(count and sum of those over 0.2 ms: where the co-tenant held the GPU), and each kernel name's device time per run.

    python3 results/gpu-general/cupti_load_study.py run FOLDER OUT_DIR --profile gpu --levels 0.0,1.0
    python3 results/gpu-general/cupti_load_study.py report OUT_DIR
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from sync_study import run_levels, study_parser  # this folder's script, beside this one

GAP_MS = 0.2


def trace_file(path: Path, ep: str, options, runs: int, warmup_s: float) -> dict:
    """Trace ``runs`` runs of ``path`` with CUPTI and summarise them (see the module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from hase_dagster.measure.runner import ModelRunner

    runner = ModelRunner(path, ep, options, level="all")
    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        runner.run()
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            t0 = time.perf_counter()
            runner.run()
            walls.append((time.perf_counter() - t0) * 1000.0)
        if ep == "cuda":
            torch.cuda.synchronize()
    del runner
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "t.json"
        prof.export_chrome_trace(str(raw))
        events = json.loads(raw.read_text())
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    gpu = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
        key=lambda e: float(e["ts"]),
    )
    kinds: dict[str, int] = {}
    per_name: dict[str, float] = {}
    busy_us = 0.0
    gaps = []
    end = None
    previous = None
    # What sits on either side of each gap over GAP_MS: whether the co-tenant's slices fall next to copies.
    around: dict[str, int] = {}
    after: dict[str, int] = {}
    for e in gpu:
        ts, dur = float(e["ts"]), float(e["dur"])
        busy_us += dur
        key = e["cat"] if e["cat"] != "gpu_memcpy" else f"memcpy:{e['name']}"
        kinds[key] = kinds.get(key, 0) + 1
        if e["cat"] == "kernel":
            per_name[e["name"][:120]] = per_name.get(e["name"][:120], 0.0) + dur
        if end is not None:
            gaps.append((ts - end) / 1000.0)
            if gaps[-1] > GAP_MS and previous is not None:
                pair = f"{previous['cat']}>{e['cat']}"
                around[pair] = around.get(pair, 0) + 1
                after[e["name"][:80]] = after.get(e["name"][:80], 0) + 1
        end = max(end or 0.0, ts + dur)
        previous = e
    gaps_arr = np.array(gaps) if gaps else np.zeros(1)
    big = gaps_arr[gaps_arr > GAP_MS]
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:40]
    before = sorted(after.items(), key=lambda kv: -kv[1])[:12]
    return {
        "model": path.name,
        "runs": runs,
        "wall_ms_mean": round(float(np.mean(walls)), 4),
        "wall_ms_median": round(float(np.median(walls)), 4),
        "ops_per_run": {k: v / runs for k, v in kinds.items()},
        "gpu_busy_ms_per_run": round(busy_us / 1000.0 / runs, 4),
        "gaps_over_per_run": round(len(big) / runs, 2),
        "gap_ms_over_per_run": round(float(big.sum()) / runs, 4),
        "gap_ms_all_per_run": round(float(gaps_arr[gaps_arr > 0].sum()) / runs, 4),
        "kernels_us_per_run": [[n, round(us / runs, 2)] for n, us in top],
        "gaps_over_between_per_run": {k: round(v / runs, 2) for k, v in sorted(around.items())},
        "gaps_over_before_per_run": [[n, round(c / runs, 2)] for n, c in before],
        # The last run's GPU operations in launch order (name, microseconds), to line kernels up with a prediction's.
        "last_run": [[e["name"][:100], round(float(e["dur"]), 2)] for e in gpu[len(gpu) - len(gpu) // runs :]],
    }


def report(out: Path) -> str:
    """One row per model and level: wall, GPU busy, the gaps over GAP_MS, copies per run."""
    lines = ["| model | stress | wall ms | GPU busy ms | gaps > 0.2 ms a run | their ms | all gaps ms | copies a run |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    rows = [r for p in sorted(out.glob("level-*.json")) for r in json.loads(p.read_text()) if "wall_ms_mean" in r]
    for r in sorted(rows, key=lambda r: (r["model"], r["stress_level"])):
        copies = {k.split(":", 1)[1]: v for k, v in r["ops_per_run"].items() if k.startswith("memcpy:")}
        lines.append(
            f"| {r['model']} | {r['stress_level']:.1f} | {r['wall_ms_mean']:.3f} | {r['gpu_busy_ms_per_run']:.3f} | "
            f"{r['gaps_over_per_run']:.1f} | {r['gap_ms_over_per_run']:.3f} | {r['gap_ms_all_per_run']:.3f} | "
            f"{copies} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser, run_p, _ = study_parser(__doc__.splitlines()[0])
    run_p.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if args.command == "run":
        levels = [float(x) for x in args.levels.split(",")]
        measure = functools.partial(trace_file, runs=args.runs, warmup_s=args.warmup_s)
        run_levels(args.folder, args.out, args.profile, levels, measure, "wall_ms_mean")
    else:
        print(report(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
