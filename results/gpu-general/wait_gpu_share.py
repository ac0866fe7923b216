"""On how much GPU time the time-slicing wait is charged (``Composition.wait_gpu_share``).

The wait a run pays a time-slicing co-tenant counts the slice boundaries its GPU time crosses
(``learn.timeslice``). The composition used to charge it on the standalone kernels' idle sum; CUPTI's kernel
time of whole networks is less than that sum. This script prints, in markdown:

1. CUPTI's kernel time over the predicted idle sum (views apart) of every file of sets E and F, by batch;
2. for each candidate share, the composition fitted with it on the shipped bundle's points (the tables'
   models and the generator's ``chk_`` networks of sets gen, D and E, as ``hase predictor export`` fits it):
   the fit's own error, leave-one-set-out over those four sets, and the sets it never saw (set F, the second
   never-seen set with pooled labels, the torchvision models of sets D and E), overall and at stress 1.0 for
   batch 16 and up.

    .venv/bin/python results/gpu-general/wait_gpu_share.py results/bundles/h100 > results/gpu-general/wait_gpu_share.md
    # about 3 min; the ONNX files as the READMEs export them: /tmp/ckg, /tmp/gpuD, /tmp/gpuE, /tmp/gpuF, /tmp/ns2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "results" / "cpu-general"), str(ROOT / "results" / "gpu-general")]

import composition_sets_study  # noqa: E402
import score_gpu  # noqa: E402

from hase_dagster.learn import predict  # noqa: E402
from hase_dagster.learn.bundles import load_bundle  # noqa: E402
from hase_dagster.learn.predict import Composition  # noqa: E402

TRAINING_SETS = ("tables", "gen", "setD", "setE")
CUPTI = ROOT / "results" / "cpu-general" / "gpu-setF" / "cupti" / "gpu_time_sets.jsonl"


def points(bundle_dir: str) -> pd.DataFrame:
    """Every point: set, model, batch, stress level and (sums, measured mean, measured p90)."""
    bundle = load_bundle(bundle_dir)
    trained, table, loads = composition_sets_study.table_points(bundle.predictor.regressor)
    rows = [
        {"set": "tables", "model": row["variant_id"], "batch": 0, "level": -1.0, "point": point}
        for row, point in zip(trained.to_dict("records"), table, strict=False)
    ]
    sets = composition_sets_study.timings()
    sets["setF"] = (score_gpu.measured([ROOT / "results" / "cpu-general" / "gpu-setF"]), Path("/tmp/gpuF"))
    for name, (frame, folder) in sets.items():
        for row in composition_sets_study.timed_points(bundle, frame, folder, loads):
            torchvision = name not in ("ns2", "setF") and not str(row["model"]).startswith("chk_")
            rows.append({"set": f"{name}-torchvision" if torchvision else name, **row})
    return pd.DataFrame(rows)


def cupti_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """CUPTI's kernel time over the predicted idle sum (views apart) of each file of sets E and F, by batch."""
    cupti = {json.loads(line)["file"]: json.loads(line)["gpu_kernel_ms"] for line in CUPTI.read_text().splitlines()}
    idle = frame[frame.set.isin(["setE", "setE-torchvision", "setF"]) & (frame.level == 0.0)]
    ratios = pd.DataFrame(
        {
            "batch": idle.batch,
            "ratio": [
                cupti[m] / (p[0].idle_mean_ms - p[0].view_idle_ms) for m, p in zip(idle.model, idle.point, strict=True)
            ],
        }
    )
    return ratios.groupby("batch").ratio.describe()[["count", "25%", "50%", "75%"]].round(2)


def score(composition: Composition, part: pd.DataFrame) -> str:
    error = np.array([composition.apply(s)[0] / m - 1 for s, m, _ in part.point]) * 100
    return f"{np.abs(error).mean():.1f}% ({np.mean(np.abs(error) <= 10) * 100:.0f}%)"


def fit(part: pd.DataFrame) -> Composition:
    return Composition.fit(list(part.point))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    args = parser.parse_args()
    frame = points(args.bundle)
    print("## CUPTI's kernel time over the predicted idle sum (sets E and F, 144 files)\n")
    print(cupti_ratios(frame).to_markdown())
    training = frame[frame.set.isin(TRAINING_SETS)]
    loaded = (frame.level == 1.0) & (frame.batch >= 16)
    held = {
        "set F": frame.set == "setF",
        "set F, stress 1.0, b>=16": (frame.set == "setF") & loaded,
        "never-seen-2": frame.set == "ns2",
        "never-seen-2, stress 1.0, b>=16": (frame.set == "ns2") & loaded,
        "torchvision of D and E": frame.set.str.endswith("torchvision"),
    }
    candidates = predict.WAIT_GPU_SHARE_CANDIDATES
    rows = []
    for shares in [(s,) for s in candidates] + [candidates]:
        predict.WAIT_GPU_SHARE_CANDIDATES = shares
        try:
            composition = fit(training)
            folds = [(fit(training[training.set != name]), training[training.set == name]) for name in TRAINING_SETS]
        finally:
            predict.WAIT_GPU_SHARE_CANDIDATES = candidates
        errors = np.concatenate(
            [np.array([c.apply(s)[0] / m - 1 for s, m, _ in part.point]) * 100 for c, part in folds]
        )
        label = f"{shares[0]}" if len(shares) == 1 else f"fitted: {composition.wait_gpu_share}"
        row = {"wait share": label, "fit (in sample)": score(composition, training)}
        row["leave one set out"] = f"{np.abs(errors).mean():.1f}% ({np.mean(np.abs(errors) <= 10) * 100:.0f}%)"
        row.update({name: score(composition, frame[mask]) for name, mask in held.items()})
        rows.append(row)
    print(f"\n## The composition with each share: MAPE (within +-10%), {len(training)} training points\n")
    print(pd.DataFrame(rows).to_markdown(index=False))


if __name__ == "__main__":
    main()
