"""Time the batch-1 and batch-4 whole models of the H100 tables again, with the settled model timing.

The tables' batch-1/4 model rows were timed in each session's first 60 ms (5 warm-up runs, about 50
timed): ``host_study.py`` found such timings of host-bound models 16.5% (mean) off a settled
re-timing of the same file. This script exports the ``gpu_small_batch`` and ``gpu_general`` models
at batch 1 and 4 with Hase's exporter and times them as ``model_benchmarks`` does (the same
``run_benchmarks``, telemetry and stressor), with the profiles' ``model_timing`` (1 s of warm-up,
at least 1 s timed), at each stress level. One Parquet file per partition goes to
``OUT/remeasure/`` as soon as it is done (a later call skips the partitions already there); merge
them into the tables with ``hase merge-tables``, which replaces the rows measured again.

    PYTHONPATH=.:/tmp/site python3 results/gpu-general/remeasure_models.py OUT [--budget-s 540]
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import pandas as pd

from hase_dagster.analysis.zoo import export_variant, variants
from hase_dagster.core.config import load_config, stress_level_key
from hase_dagster.core.ort_runtime import device_name
from hase_dagster.measure.benchmark import BenchmarkTarget, run_benchmarks
from hase_dagster.measure.load import under_load

PROFILES = ("gpu_small_batch", "gpu_general")
BATCHES = (1, 4)
LEVELS = (0.0, 1.0, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--ep", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of the script")
    parser.add_argument("--only", nargs="*", default=None, help="model names to keep (default: all)")
    parser.add_argument("--levels", nargs="*", type=float, default=list(LEVELS))
    args = parser.parse_args()
    started = time.monotonic()
    out = args.out / "remeasure"
    out.mkdir(parents=True, exist_ok=True)
    config = load_config()
    profile = config.profiles[PROFILES[0]]
    models_dir = Path(f"/tmp/remeasure-models-{args.ep}")
    targets: dict[int, list[BenchmarkTarget]] = {batch: [] for batch in BATCHES}
    for profile_name in PROFILES:
        for batch in BATCHES:
            for variant in variants(config.profiles[profile_name], batch):
                if args.only is not None and variant.model.name not in args.only:
                    continue
                path = models_dir / f"{variant.variant_id}.onnx"
                if not path.exists():
                    export_variant(variant, models_dir, config.profiles[profile_name].opset, ep=args.ep)
                labels = {
                    "variant_id": variant.variant_id,
                    "model_name": variant.model.name,
                    "input_size": variant.input_size,
                }
                targets[batch].append(BenchmarkTarget(path, labels))
    print(f"{sum(map(len, targets.values()))} models ready after {time.monotonic() - started:.0f} s", flush=True)
    # ~4 s a model (session with the cuDNN search, 1 s warm-up, >= 1 s timed) plus the stressor's start.
    for level in args.levels:
        for batch in BATCHES:
            done = out / f"model_benchmarks_{stress_level_key(level)}_b{batch}.parquet"
            if done.exists():
                continue
            estimate = 4.0 * len(targets[batch]) + 20
            if time.monotonic() - started + estimate > args.budget_s:
                print(f"stop before stress {level} batch {batch}: {time.monotonic() - started:.0f} s used", flush=True)
                return
            t0 = time.monotonic()
            with under_load(args.ep, level, profile.telemetry) as loaded:
                rows = run_benchmarks(
                    targets[batch],
                    args.ep,
                    loaded.sampler,
                    profile.model_timing,
                    profile.telemetry,
                    profile.ort,
                    level="all",
                    measure_memory=True,
                )
            frame = pd.DataFrame(rows).assign(
                stress_level=level,
                batch_size=batch,
                device=device_name(args.ep),
                ep=args.ep,
                run_id=f"remeasure-{uuid.uuid4()}",
            )
            frame.to_parquet(done.with_suffix(".partial"), index=False)
            done.with_suffix(".partial").replace(done)
            ok = frame[frame.status == "ok"]
            print(
                f"stress {level} batch {batch}: {len(ok)}/{len(frame)} ok in {time.monotonic() - t0:.0f} s, "
                f"median n {ok.n.median():.0f}",
                flush=True,
            )
    print(f"all partitions done after {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
