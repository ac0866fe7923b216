"""Prediction speed of `hase predict --predictor BUNDLE` (wall time and peak memory of the whole
command, imports included), against measuring the same model on the CPU EP here and against the
H100 measurement in the bundle's tables.

    .venv/bin/python results/prediction-speed/export_models.py     # once: models/ (git-ignored)
    .venv/bin/python results/prediction-speed/bench.py [--bundle h100] [--repeat 3] [--cpu-from results-before.json]

Writes results.json and results.md next to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HASE = REPO / ".venv" / "bin" / "hase"
MODELS = HERE / "models"
ZOO = ["resnet18", "resnet50", "mobilenet_v2", "transformer_encoder"]
NEVER_SEEN = [
    "resnet34",
    "efficientnet_b0",
    "densenet121",
    "squeezenet1_1",
    "convnext_tiny",
    "shufflenet_v2_x1_0",
    "mobilenet_v3_small",
    "nas_s201",
    "nas_s202",
    "vit_b_16",
]
SWEEP_BATCHES = "1,4,16,32,64"
SWEEP_LOADS = "idle,level=0.5,level=1.0"


def timed(command: list[str]) -> dict:
    """Run ``command`` under GNU time: wall seconds, peak RSS (MB), exit status, stdout."""
    # Python's bytecode cache on, as a user's shell has it (this VM's sets PYTHONDONTWRITEBYTECODE,
    # which makes every run compile Hase's modules again).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    load_before = os.getloadavg()[0]
    result = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, cwd=REPO, env=env)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", result.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    user = re.search(r"User time \(seconds\): ([\d.]+)", result.stderr)
    system = re.search(r"System time \(seconds\): ([\d.]+)", result.stderr)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3)) if wall else float("nan")
    return {
        "wall_s": round(seconds, 3),
        "peak_rss_mb": round(int(rss.group(1)) / 1024, 1) if rss else None,
        # CPU time (user + system): what the command costs, less inflated than wall time by the
        # other work sharing the VM's two cores.
        "cpu_s": round(float(user.group(1)) + float(system.group(1)), 3) if user and system else None,
        "rc": result.returncode,
        "load_avg_1m": round(load_before, 2),
        "stdout": result.stdout,
        "stderr_tail": "\n".join(line for line in result.stderr.splitlines() if not line.startswith("\t"))[-400:],
    }


def predict(model: Path, batch: str, loads: str, bundle: str) -> dict:
    run = timed(
        [str(HASE), "predict", str(model), "--predictor", bundle, "--batch-size", batch, "--load", loads, "--json"]
    )
    out = {k: run[k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "rc", "load_avg_1m")}
    if run["rc"] != 0:
        out["error"] = run["stderr_tail"]
        return out
    document = json.loads(run["stdout"])
    predictions = document.get("predictions", [document])
    out["answers"] = len(predictions)
    out["predicted_ms"] = [round(p["predicted_ms"], 4) for p in predictions]
    out["kernels"] = predictions[0]["coverage"]["kernels"]
    out["kernel_source"] = predictions[0].get("kernel_source")
    out["detection_coverage"] = predictions[0].get("detection_coverage")
    return out


def measure_cpu(model: Path, batch: int) -> dict:
    """Ten timed runs on the CPU EP here (2 intra-op threads, one warm-up), as `hase run-kernel` does
    them, on a copy of the model with the batch fixed."""
    from hase_dagster.learn.predict_file import with_batch_size

    fixed_dir = MODELS / "fixed"
    fixed_dir.mkdir(exist_ok=True)
    fixed = fixed_dir / f"{model.stem}_b{batch}.onnx"
    if not fixed.exists():
        fixed = with_batch_size(model, batch, fixed_dir)
    command = [str(HASE), "run-kernel", "--model", str(fixed), "--ep", "cpu", "--optimization", "all"]
    command += ["--warmup", "1", "--loops", "10", "--threads", str(os.cpu_count() or 1), "--json"]
    run = timed(command)
    out = {k: run[k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "rc", "load_avg_1m")}
    if run["rc"] == 0:
        timing = json.loads(run["stdout"])
        out |= {"mean_ms": round(timing["mean_ms"], 3), "n": timing["n"]}
    else:
        out["error"] = run["stderr_tail"]
    return out


def h100_measurements(tables: Path) -> dict[tuple[str, int], dict]:
    """The H100 whole-model measurements at stress 0.5: mean ms, timed runs and the timed window (s)."""
    import pandas as pd

    rows = pd.read_parquet(tables / "model_benchmarks.parquet")
    rows = rows[(rows["status"] == "ok") & (rows["stress_level"] == 0.5) & (rows["input_size"].isin([128, 224]))]
    out = {}
    for row in rows.to_dict("records"):
        out[(row["model_name"], int(row["batch_size"]))] = {
            "mean_ms": round(float(row["mean_ms"]), 3),
            "runs": int(row["n"]),
            "window_s": round((row["end_ns"] - row["start_ns"]) / 1e9, 3),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", default="h100")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU measurements")
    parser.add_argument(
        "--cpu-from",
        type=Path,
        default=None,
        help="take the CPU EP measurements from an earlier results file (next to this script) instead of "
        "measuring again: they do not depend on Hase's prediction code, and ViT-B/16 at batch 64 takes minutes",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated models to measure again, replacing their cases in results.json"
    )
    args = parser.parse_args()
    only = [m for m in args.only.split(",") if m]
    missing = [m for m in ZOO + NEVER_SEEN if not (MODELS / f"{m}.onnx").exists()]
    if missing:
        print(f"missing models {missing}: run export_models.py first", file=sys.stderr)
        return 2
    h100 = h100_measurements(REPO / "results" / "gpu-general" / "tables")
    cases = [(m, 1) for m in ZOO + NEVER_SEEN] + [("vit_b_16", 64)]
    previous = json.loads((HERE / "results.json").read_text()) if only else None
    if only:
        cases = [c for c in cases if c[0] in only]
    earlier_cpu = {}
    if args.cpu_from is not None:
        earlier = json.loads((HERE / args.cpu_from).read_text())
        for c in earlier["cases"]:
            if c.get("cpu_measure"):
                earlier_cpu[(c["model"], c["batch_size"])] = c["cpu_measure"] | {
                    "from": f"{Path(args.cpu_from).name} ({earlier['date']})"
                }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    results: dict = {
        "device": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (the project's VM)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit.stdout.strip(),
        "bundle": args.bundle,
        "load": "level=0.5",
        "cases": [],
    }
    for name, batch in cases:
        model = MODELS / f"{name}.onnx"
        runs = [predict(model, str(batch), "level=0.5", args.bundle) for _ in range(args.repeat)]
        case = {
            "model": name,
            "set": "zoo" if name in ZOO else "never seen",
            "batch_size": batch,
            "file_mb": round(model.stat().st_size / 1e6, 1),
            "runs": runs,
            "wall_s_median": statistics.median(r["wall_s"] for r in runs),
            "wall_s_max": max(r["wall_s"] for r in runs),
            "cpu_s_median": statistics.median(r["cpu_s"] or 0 for r in runs),
            "peak_rss_mb_max": max(r["peak_rss_mb"] or 0 for r in runs),
            "h100": h100.get((name, batch)),
        }
        if (name, batch) in earlier_cpu:
            case["cpu_measure"] = earlier_cpu[(name, batch)]
        elif not args.no_cpu:
            case["cpu_measure"] = measure_cpu(model, batch)
        results["cases"].append(case)
        print(json.dumps({k: v for k, v in case.items() if k != "runs"}), flush=True)
    if previous is not None:
        fresh = {(c["model"], c["batch_size"]): c for c in results["cases"]}
        results["cases"] = [fresh.get((c["model"], c["batch_size"]), c) for c in previous["cases"]]
        results["sweeps"] = previous["sweeps"]
        results["remeasured"] = {"models": only, "date": results["date"]}
        results["date"] = previous["date"]
    else:
        results["sweeps"] = []
    for name in ("resnet50", "vit_b_16") if previous is None else ():
        runs = [predict(MODELS / f"{name}.onnx", SWEEP_BATCHES, SWEEP_LOADS, args.bundle) for _ in range(args.repeat)]
        results["sweeps"].append({"model": name, "batch_sizes": SWEEP_BATCHES, "loads": SWEEP_LOADS, "runs": runs})
        print(json.dumps({"sweep": name, "walls": [r["wall_s"] for r in runs]}), flush=True)
    walls = [r["wall_s"] for c in results["cases"] for r in c["runs"]]
    cpu = [r["cpu_s"] or 0 for c in results["cases"] for r in c["runs"]]
    results["summary"] = {
        "per_model_cpu_s_p50": statistics.median(cpu),
        "per_model_cpu_s_max": max(cpu),
        "per_model_wall_s_p50": statistics.median(walls),
        "per_model_wall_s_max": max(walls),
        "sweep_wall_s_max": max(r["wall_s"] for s in results["sweeps"] for r in s["runs"]),
        "all_ok": all(r["rc"] == 0 for c in results["cases"] for r in c["runs"]),
        "load_avg_1m_range": [
            min(r["load_avg_1m"] for c in results["cases"] for r in c["runs"]),
            max(r["load_avg_1m"] for c in results["cases"] for r in c["runs"]),
        ],
    }
    (HERE / "results.json").write_text(json.dumps(results, indent=1))
    (HERE / "results.md").write_text(markdown(results))
    print(json.dumps(results["summary"]))
    return 0


def markdown(results: dict) -> str:
    lines = [
        f"Bundle `{results['bundle']}`, load {results['load']}, {results['device']}, {results['date']}"
        + (f", Hase at commit `{results['commit']}`." if results.get("commit") else "."),
        "",
        "| model | set | batch | file MB | kernels | predicted ms | predict wall s (median / max) | CPU s "
        "| peak RSS MB "
        "| CPU EP here: 10 runs, command wall s (mean ms/run) | ratio predict / CPU measure "
        "| H100 measured mean ms (timed window s) | ratio predict / H100 window |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in results["cases"]:
        first = c["runs"][0]
        cpu = c.get("cpu_measure") or {}
        h100 = c.get("h100")
        cpu_text = f"{cpu['wall_s']:.2f} ({cpu['mean_ms']:.1f})" if "mean_ms" in cpu else cpu.get("error", "-")[:40]
        ratio_cpu = f"{c['wall_s_median'] / cpu['wall_s']:.3f}" if "mean_ms" in cpu else "-"
        h100_text = f"{h100['mean_ms']:.3f} ({h100['window_s']:.2f})" if h100 else "not measured"
        ratio_h100 = f"{c['wall_s_median'] / h100['window_s']:.2f}" if h100 and h100["window_s"] > 0 else "-"
        predicted = first.get("predicted_ms", [None])[0] if "error" not in first else first["error"][:60]
        cells = [c["model"], c["set"], c["batch_size"], c["file_mb"], first.get("kernels", "-"), predicted]
        cells += [f"{c['wall_s_median']:.2f} / {c['wall_s_max']:.2f}", f"{c['cpu_s_median']:.2f}"]
        cells += [f"{c['peak_rss_mb_max']:.0f}"]
        cells += [cpu_text, ratio_cpu, h100_text, ratio_h100]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    lines += [
        "",
        "| sweep | batch sizes | loads | answers | wall s (each run) | CPU s (each run) | peak RSS MB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in results["sweeps"]:
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in s["runs"])
        peak = max(r["peak_rss_mb"] or 0 for r in s["runs"])
        cpus = ", ".join(f"{r['cpu_s'] or 0:.2f}" for r in s["runs"])
        cells = [s["model"], s["batch_sizes"], s["loads"], s["runs"][0].get("answers", "-"), walls, cpus, f"{peak:.0f}"]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    summary = results["summary"]
    sources = sorted({c["cpu_measure"]["from"] for c in results["cases"] if (c.get("cpu_measure") or {}).get("from")})
    if sources:
        lines += ["", f"CPU EP measurements taken from an earlier run of this script: {', '.join(sources)}."]
    lines += [
        "",
        f"Per model: wall p50 {summary['per_model_wall_s_p50']:.2f} s, max {summary['per_model_wall_s_max']:.2f} s; "
        f"CPU time p50 {summary['per_model_cpu_s_p50']:.2f} s, max {summary['per_model_cpu_s_max']:.2f} s "
        f"(goal p50 < 0.5 s, max < 2 s); 5x3 sweep: max {summary['sweep_wall_s_max']:.2f} s (goal < 2 s). "
        f"1-minute load average of the VM before each prediction: {summary['load_avg_1m_range'][0]:.1f} to "
        f"{summary['load_avg_1m_range'][1]:.1f} (2 cores shared with other work).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
