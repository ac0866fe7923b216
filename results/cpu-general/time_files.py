"""Time every ONNX file of a folder whole, on the profile's device, at each stress level, the way
``model_benchmarks`` does (ORT_ENABLE_ALL, the profile's model timing, the stressor steady first); no
analysis and no prediction, so a checker set can be timed on a GPU host and predicted elsewhere
(``hase predict --predictor``). Writes one JSON per level as it goes, every ``--chunk`` files (a second run skips
done levels and the files a cut level timed).

    python3 results/cpu-general/time_files.py FOLDER OUT_DIR --profile gpu --levels 0.0,1.0,0.5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hase_dagster.core.config import load_config
from hase_dagster.core.ort_runtime import load_onnx
from hase_dagster.core.profiles import select_profile
from hase_dagster.learn.predict_file import batch_size_of
from hase_dagster.measure.benchmark import BenchmarkTarget, run_benchmarks
from hase_dagster.measure.load import under_load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--levels", default="0.0,1.0,0.5")
    parser.add_argument("--chunk", type=int, default=8, help="files timed between partial writes")
    args = parser.parse_args()
    profile = select_profile(load_config(), args.profile)
    paths = sorted(args.folder.glob("*.onnx"))
    args.out.mkdir(parents=True, exist_ok=True)
    keep = ("model", "batch_size", "status", "error", "mean_ms", "median_ms", "p90_ms", "n", "device", "ep")
    keep += ("host_loop_ms",)  # the host core's speed over each timing (hase predict --host-reading)
    for level in (float(x) for x in args.levels.split(",")):
        done = args.out / f"level-{level:.2f}.json"
        if done.exists():
            continue
        # A level cut short keeps the files it timed (level-X.partial.json) and a second run times the rest.
        partial = args.out / f"level-{level:.2f}.partial.json"
        records = json.loads(partial.read_text()) if partial.exists() else []
        timed = {r["model"] for r in records}
        todo = [p for p in paths if p.name not in timed]
        with under_load(profile.device, level, profile.telemetry) as loaded:
            for start in range(0, len(todo), args.chunk):
                chunk = todo[start : start + args.chunk]
                targets = [
                    BenchmarkTarget(p, {"model": p.name, "batch_size": batch_size_of(load_onnx(p))}) for p in chunk
                ]
                rows = run_benchmarks(
                    targets, profile.execution_provider, loaded.sampler, profile.model_timing, profile.telemetry,
                    profile.ort, level="all",
                )  # fmt: skip
                records += [{k: row.get(k) for k in keep} | {"stress_level": level} for row in rows]
                partial.write_text(json.dumps(records, indent=1, default=str) + "\n")
        if partial.exists():
            partial.rename(done)
        else:
            done.write_text("[]\n")
        print(f"stress {level:.2f}: {sum(r['status'] == 'ok' for r in records)} of {len(records)} timed", flush=True)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        # gpu_run.sh ends a call's budget with SIGINT: what the level's finished chunks timed is already written.
        print("stopped by SIGINT: the levels done and each cut level's timed chunks are kept", file=sys.stderr)
        raise SystemExit(130) from None
