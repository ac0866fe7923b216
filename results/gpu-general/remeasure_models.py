"""Time whole models of GPU profiles with the settled model timing (by default: the H100 tables'
batch-1 and batch-4 models again).

The tables' batch-1/4 model rows were timed in each session's first 60 ms (5 warm-up runs, about 50
timed): ``host_study.py`` found such timings of host-bound models 16.5% (mean) off a settled
re-timing of the same file. This script exports the ``gpu_small_batch`` and ``gpu_general`` models
at batch 1 and 4 with Hase's exporter and times them as ``model_benchmarks`` does (the same
``run_benchmarks``, telemetry and stressor), with the profiles' ``model_timing`` (1 s of warm-up,
at least 1 s timed), at each stress level. One Parquet file per partition goes to
``OUT/remeasure/`` as soon as it is done (a later call skips the partitions already there); merge
them into the tables with ``hase merge-tables``, which replaces the rows measured again.

    PYTHONPATH=.:/tmp/site python3 results/gpu-general/remeasure_models.py OUT [--budget-s 540]

``--profiles`` and ``--batches`` time other profiles' models (the second never-seen set:
``--profiles gpu_never_seen_2 --batches 1 16 4 64``). Partitions run batch by batch, each batch
exported just before its first one, every level of a batch but the last of ``--levels`` first, then
the last level for every batch (so a call that runs short leaves whole batch sizes, idle and
loaded, behind it).
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import pandas as pd

from hase_dagster.analysis.zoo import ModelVariant, export_variant, variants
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
    parser.add_argument("--profiles", nargs="*", default=list(PROFILES))
    parser.add_argument("--batches", nargs="*", type=int, default=list(BATCHES))
    args = parser.parse_args()
    started = time.monotonic()
    out = args.out / "remeasure"
    out.mkdir(parents=True, exist_ok=True)
    config = load_config()
    profile = config.profiles[args.profiles[0]]
    models_dir = Path(f"/tmp/remeasure-models-{args.ep}")
    targets: dict[int, list[BenchmarkTarget]] = {}

    def chosen(batch: int) -> list[tuple[str, ModelVariant]]:
        """The batch's variants of ``--profiles`` (those ``--only`` names), each with its profile."""
        return [
            (name, variant)
            for name in args.profiles
            for variant in variants(config.profiles[name], batch)
            if args.only is None or variant.model.name in args.only
        ]

    def targets_of(batch: int) -> list[BenchmarkTarget]:
        """The batch's models, exported on first use (a call that stops early exports no more)."""
        if batch not in targets:
            targets[batch] = []
            for profile_name, variant in chosen(batch):
                path = models_dir / f"{variant.variant_id}.onnx"
                if not path.exists():
                    export_variant(variant, models_dir, config.profiles[profile_name].opset, ep=args.ep)
                labels = {
                    "variant_id": variant.variant_id,
                    "model_name": variant.model.name,
                    "input_size": variant.input_size,
                }
                targets[batch].append(BenchmarkTarget(path, labels))
            print(
                f"batch {batch}: {len(targets[batch])} models ready after {time.monotonic() - started:.0f} s",
                flush=True,
            )
        return targets[batch]

    *first_levels, last_level = args.levels
    partitions = [(b, level) for b in args.batches for level in first_levels] + [(b, last_level) for b in args.batches]
    for batch, level in partitions:
        done = out / f"model_benchmarks_{stress_level_key(level)}_b{batch}.parquet"
        if done.exists():
            continue
        # ~4 s a model (session with the cuDNN search, 1 s warm-up, >= 1 s timed) plus the stressor's
        # start, and ~3 s a model to export where the batch is not exported yet.
        count = len(targets[batch]) if batch in targets else len(chosen(batch))
        estimate = (4.0 if batch in targets else 7.0) * count + 20
        if time.monotonic() - started + estimate > args.budget_s:
            print(f"stop before stress {level} batch {batch}: {time.monotonic() - started:.0f} s used", flush=True)
            return
        batch_targets = targets_of(batch)
        t0 = time.monotonic()
        with under_load(args.ep, level, profile.telemetry) as loaded:
            rows = run_benchmarks(
                batch_targets,
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
