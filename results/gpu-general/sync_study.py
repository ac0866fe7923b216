"""Where a run's host waits under load: each node's host time (ORT's profiler) idle and under the stressor.

A CUDA EP node's host time is its launch, unless the node waits for the GPU (a synchronizing copy, a pinned
staging buffer, a shape read back): then a time-slicing co-tenant's burst shows up in that node's host time
and not in its neighbours'. This times every ONNX file of a folder with ORT's profiler on, the way
``model_benchmarks`` runs a model (IO binding on the device, ORT_ENABLE_ALL, the profile's options), at each
stress level, and keeps per node its mean and p90 host time over the timed runs (the raw profile is deleted).

    python3 results/gpu-general/sync_study.py run FOLDER OUT_DIR --profile gpu --levels 0.0,1.0
    python3 results/gpu-general/sync_study.py report OUT_DIR [--top 8]      # nodes whose host time grew most

One JSON per level (``level-1.00.json``), written as it goes; a second run skips the levels done.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def profile_file(path: Path, ep: str, options, warmup_s: float, timed_s: float) -> dict:
    """Run ``path`` with ORT's profiler on, drop the warm-up runs, and summarise each node's host time.

    Returns:
        ``{"model", "runs", "run_ms_mean", "run_ms_median", "nodes": [[name, op, provider, mean_us, p90_us]]}``.
    """
    from hase_dagster.measure.runner import ModelRunner

    with tempfile.TemporaryDirectory() as tmp:
        runner = ModelRunner(path, ep, options, level="all", profile_prefix=Path(tmp) / "p")
        warm = 0
        start = time.perf_counter()
        while time.perf_counter() - start < warmup_s or warm < 3:
            runner.run()
            warm += 1
        start = time.perf_counter()
        timed = 0
        while time.perf_counter() - start < timed_s or timed < 5:
            runner.run()
            timed += 1
        trace = Path(runner.session.end_profiling())
        events = json.loads(trace.read_text())
        trace.unlink()
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])[warm:]
    if not runs:
        raise RuntimeError(f"{path.name}: the profile holds no timed run")
    first = runs[0]["ts"]
    per_node: dict[str, list[float]] = {}
    kinds: dict[str, tuple[str, str]] = {}
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time") or event["ts"] < first:
            continue
        name = event["name"][: -len("_kernel_time")]
        per_node.setdefault(name, []).append(float(event["dur"]))
        args = event.get("args", {})
        kinds[name] = (str(args.get("op_name", "")), str(args.get("provider", "")))
    run_ms = np.array([e["dur"] for e in runs], dtype=float) / 1000.0
    nodes = [
        [name, *kinds[name], round(float(np.mean(d)), 2), round(float(np.percentile(d, 90)), 2)]
        for name, d in per_node.items()
    ]
    return {
        "model": path.name,
        "runs": len(runs),
        "run_ms_mean": round(float(run_ms.mean()), 4),
        "run_ms_median": round(float(np.median(run_ms)), 4),
        "nodes": nodes,
    }


def run_levels(folder: Path, out: Path, profile_name: str | None, levels: list[float], measure, label: str) -> None:
    """Measure every file of ``folder`` at each level (the stressor steady first) with ``measure(path, ep, ort)``,
    one JSON per level (``level-1.00.json``); a level already written is skipped, and one file's failure is recorded
    as its row's ``error`` while the rest still run. ``label`` names the row field printed as it goes."""
    from hase_dagster.core.config import load_config
    from hase_dagster.core.profiles import select_profile
    from hase_dagster.measure.load import under_load

    profile = select_profile(load_config(), profile_name)
    paths = sorted(folder.glob("*.onnx"))
    out.mkdir(parents=True, exist_ok=True)
    for level in levels:
        done = out / f"level-{level:.2f}.json"
        if done.exists():
            continue
        rows = []
        with under_load(profile.device, level, profile.telemetry):
            for path in paths:
                try:
                    row = measure(path, profile.execution_provider, profile.ort)
                except Exception as exc:  # one model's failure is recorded, the rest still run
                    row = {"model": path.name, "error": f"{type(exc).__name__}: {exc}"[:300]}
                rows.append(row | {"stress_level": level})
                print(f"{level:.2f} {path.name} {row.get(label, row.get('error'))}", flush=True)
        done.write_text(json.dumps(rows) + "\n")


def report(out: Path, top: int) -> str:
    """A markdown table per model: the run's growth under load and the nodes whose host time grew most."""
    levels = {float(p.stem.split("-")[1]): json.loads(p.read_text()) for p in sorted(out.glob("level-*.json"))}
    idle = {r["model"]: r for r in levels.get(0.0, []) if "nodes" in r}
    lines = []
    for level, rows in sorted(levels.items()):
        if level == 0.0:
            continue
        header = "| model | run ms idle | run ms loaded | growth ms | host growth of the top nodes (ms) | top nodes |"
        lines += [f"## Stress {level:.2f} against idle", "", header, "|---|---|---|---|---|---|"]
        for row in rows:
            base = idle.get(row["model"])
            if base is None or "nodes" not in row:
                continue
            before = {n[0]: n[3] for n in base["nodes"]}
            grew = sorted(((n[3] - before.get(n[0], 0.0)) / 1000.0, n[1], n[0]) for n in row["nodes"])[::-1][:top]
            listed = ", ".join(f"{op} {ms:.3f}" for ms, op, _ in grew)
            lines.append(
                f"| {row['model']} | {base['run_ms_mean']:.3f} | {row['run_ms_mean']:.3f} | "
                f"{row['run_ms_mean'] - base['run_ms_mean']:+.3f} | {sum(g[0] for g in grew):+.3f} | {listed} |"
            )
        lines.append("")
    return "\n".join(lines)


def study_parser(description: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line both load studies share: ``run FOLDER OUT [--profile] [--levels] [--warmup-s]`` and
    ``report OUT``. Returns the parser and its ``run`` and ``report`` subparsers, for each study's own options."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run")
    run_p.add_argument("folder", type=Path)
    run_p.add_argument("out", type=Path)
    run_p.add_argument("--profile", default=None)
    run_p.add_argument("--levels", default="0.0,1.0")
    run_p.add_argument("--warmup-s", type=float, default=0.5)
    rep = sub.add_parser("report")
    rep.add_argument("out", type=Path)
    return parser, run_p, rep


def main() -> int:
    parser, run_p, rep = study_parser(__doc__.splitlines()[0])
    run_p.add_argument("--timed-s", type=float, default=0.6)
    rep.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    if args.command == "run":
        levels = [float(x) for x in args.levels.split(",")]
        measure = functools.partial(profile_file, warmup_s=args.warmup_s, timed_s=args.timed_s)
        run_levels(args.folder, args.out, args.profile, levels, measure, "run_ms_mean")
    else:
        print(report(args.out, args.top))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
