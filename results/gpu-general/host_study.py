"""How reproducible are host-bound whole-model timings (batch 1 and 4), and what makes them move?

On the GPU host, with the payload on PYTHONPATH (see host_study.sh). For each model of the study
(training and never-seen networks of the H100 tables, exported here with Hase's own exporter) it
times the same ONNX file several ways, each in a fresh ORT session, in interleaved rounds:

- ``pipeline``: the profile's ``model_timing`` (5 warm-up runs, then until the 95% interval is
  within 2%: about 50 runs in the first 60 ms of a session) with Hase's telemetry thread sampling
  NVML every 0.1 s in the same process, as ``model_benchmarks`` times a model;
- ``pipeline_quiet``: the same without the telemetry thread;
- ``settled``: 1 s of warm-up runs, then 2 s of runs, kept as 20 windows of 0.1 s.

Each timing also records the CPU time the hypervisor stole over it (``/proc/stat``), a host-speed probe
(a fixed pure-Python loop timed just before it) and whether it ran with the runner that frees its
session on ``del`` (``--label``).

Writes one JSON line per timing to ``OUT/host_study.jsonl`` as it goes (a call cut short keeps what it
measured) and the host's CPU description to ``OUT/host.json``.

    PYTHONPATH=.:/tmp/site python3 results/gpu-general/host_study.py OUT [--rounds 3] [--budget-s 420]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import TimingOptions, load_config
from hase_dagster.measure.runner import ModelRunner, summarize
from hase_dagster.measure.telemetry import TelemetrySampler, metric_source

# (profile, model) pairs: host-bound at batch 1 and 4 in the H100 tables, training and never seen.
MODELS = (
    ("gpu_small_batch", "resnet18"),
    ("gpu_small_batch", "mobilenet_v2"),
    ("gpu_small_batch", "mobilenet_v3_small"),
    ("gpu_small_batch", "efficientnet_b0"),
    ("gpu_small_batch", "shufflenet_v2_x1_0"),
    ("gpu_general", "squeezenet1_1"),
    ("gpu_general", "nas_s102"),
    ("gpu_general", "nas_s106"),
    ("gpu_general", "nas_s201"),
    ("gpu_general", "vit_b_16"),
)
BATCHES = (1, 4)


def host_description() -> dict[str, object]:
    """The CPU the runs dispatch from: model, cores, frequency governor and current clocks."""
    info: dict[str, object] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        info["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        info["lscpu"] = f"unavailable: {exc}"
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    info["governor"] = governor.read_text().strip() if governor.exists() else "not exposed"
    mhz = [float(line.split(":")[1]) for line in open("/proc/cpuinfo") if line.startswith("cpu MHz")]
    info["cpu_mhz"] = {"min": min(mhz), "median": float(np.median(mhz)), "max": max(mhz)} if mhz else {}
    info["loadavg"] = open("/proc/loadavg").read().strip()
    return info


def steal_ticks() -> tuple[int, int]:
    """(stolen, total) CPU ticks of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return fields[7], sum(fields)


def cpu_probe_ms(repeats: int = 5) -> float:
    """Median time of a fixed pure-Python loop: how fast the host runs single-threaded work now."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(20_000):
            total += i * i
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def settled(runner: ModelRunner, warm_s: float = 1.0, windows: int = 20, window_s: float = 0.1) -> dict:
    """Warm up for ``warm_s``, then time ``windows`` windows of ``window_s`` each."""
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        runner.sample()
    means, samples = [], []
    for _ in range(windows):
        window: list[float] = []
        end = time.perf_counter() + window_s
        while time.perf_counter() < end:
            window.append(runner.sample())
        means.append(float(np.mean(window)))
        samples.extend(window)
    return {**summarize(samples), "n": len(samples), "window_means_ms": means}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--ep", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of the script")
    parser.add_argument("--protocols", nargs="*", default=["pipeline", "pipeline_quiet", "settled"])
    parser.add_argument("--label", default="", help="recorded on every line (which code measured)")
    parser.add_argument("--only", nargs="*", default=None, help="model names to keep (default: all)")
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host.json").write_text(json.dumps(host_description(), indent=1))
    config = load_config()
    models_dir = Path(f"/tmp/host-study-models-{args.ep}")
    files: list[tuple[str, int, Path]] = []
    for profile_name, model_name in MODELS:
        if args.only is not None and model_name not in args.only:
            continue
        profile = config.profiles[profile_name]
        model = next(m for m in profile.models if m.name == model_name)
        for batch in BATCHES:
            variant = ModelVariant(model, 224, batch)
            path = models_dir / f"{variant.variant_id}.onnx"
            if not path.exists():
                export_variant(variant, models_dir, profile.opset, ep=args.ep)
            files.append((variant.variant_id, batch, path))
    print(f"exported {len(files)} models in {time.monotonic() - started:.0f} s", flush=True)

    profile = config.profiles["gpu_small_batch"]
    timing: TimingOptions = profile.model_timing
    sink = open(args.out / "host_study.jsonl", "a")
    sampler = TelemetrySampler(metric_source(args.ep, profile.telemetry.fields), profile.telemetry.interval_s)

    def record(variant_id: str, batch: int, round_: int, protocol: str, stats: dict) -> None:
        row = {"variant_id": variant_id, "batch_size": batch, "round": round_, "protocol": protocol, **stats}
        row["label"] = args.label
        sink.write(json.dumps(row) + "\n")
        sink.flush()
        print(f"r{round_} {protocol:15s} {variant_id:32s} mean {stats['mean_ms']:.3f} ms n {stats['n']}", flush=True)

    for round_ in range(args.rounds):
        for variant_id, batch, path in files:
            if time.monotonic() - started > args.budget_s:
                print("budget spent: stopping", flush=True)
                return
            for protocol in args.protocols:
                runner = ModelRunner(path, args.ep, profile.ort, level="all", clock="host")
                probe = cpu_probe_ms()
                stolen_before, total_before = steal_ticks()
                if protocol == "pipeline":
                    with sampler:
                        stats = runner.time(timing).to_dict()
                    sampler = TelemetrySampler(
                        metric_source(args.ep, profile.telemetry.fields), profile.telemetry.interval_s
                    )
                elif protocol == "pipeline_quiet":
                    stats = runner.time(timing).to_dict()
                else:
                    stats = settled(runner)
                stolen_after, total_after = steal_ticks()
                stats["cpu_probe_ms"] = probe
                stats["steal_pct"] = 100 * (stolen_after - stolen_before) / max(1, total_after - total_before)
                record(variant_id, batch, round_, protocol, stats)
                del runner
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
