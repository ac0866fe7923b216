"""Leave one timing set out: the composition fitted on the tables' models alone (as the bundle of 13:16 UTC
was) against one fitted beside the other unseen sets' whole-model timings, scored on the set left out; the
kernels of every set by static detection and the regressor of the bundle given (its composition is not used).
Sets: the independent generator (gen: results/cpu-general/gpu, gpu-small), set D, set E and the second
never-seen set (ns2, labels pooled over machines). Prints markdown.

    .venv/bin/python results/gpu-general/composition_sets_study.py results/bundles/h100   # about 1 min
    # the ONNX files as the READMEs export them: /tmp/ckg, /tmp/gpuD, /tmp/gpuE, /tmp/ns2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "results" / "cpu-general"), str(ROOT / "results" / "gpu-general" / "never-seen-2")]

import evaluate as ns2  # noqa: E402  (never-seen-2/evaluate.py: the pooled labels)
import score_gpu  # noqa: E402

from hase_dagster.learn.bundles import Bundle, load_bundle  # noqa: E402
from hase_dagster.learn.predict import Composition, model_sums  # noqa: E402
from hase_dagster.learn.regressor import LatencyRegressor  # noqa: E402
from hase_dagster.learn.reports import import_tables  # noqa: E402
from hase_dagster.learn.training import (  # noqa: E402
    composition_points,
    kernels_by_variant,
    load_at_level,
    measured_models,
    networks,
)


def table_points(regressor: LatencyRegressor) -> tuple[pd.DataFrame, list[tuple], dict[float, dict[str, float]]]:
    """The tables' networks the composition trains on (held-out ones apart), their composition points (sums,
    measured mean, measured p90) in the same order, and the load at each stress level."""
    with tempfile.TemporaryDirectory() as tmp:
        store = import_tables(ROOT / "results" / "gpu-general" / "tables", Path(tmp) / "t.duckdb")
        models = measured_models(store, "cuda")
        trained = networks(models[~models["held_out"].astype(bool)])
        points = composition_points(regressor, trained, kernels_by_variant(store, "cuda"))
        loads = {level: load_at_level(store, "cuda", level) for level in (0.0, 0.5, 1.0)}
    return trained, points, loads


def timed_points(
    bundle: Bundle, frame: pd.DataFrame, folder: Path, loads: dict[float, dict[str, float]]
) -> list[dict[str, object]]:
    """Each file of a timing frame (its repeats averaged), kernels by the bundle's static detection: model,
    batch, level and its composition point (sums, measured mean, measured p90)."""
    frame = frame.groupby(["model", "batch_size", "stress_level"], as_index=False).mean(numeric_only=True)
    rows: list[dict[str, object]] = []
    for r in frame.itertuples():
        kernels, _ = bundle.kernels(folder / r.model, int(r.batch_size))
        sums, _ = model_sums(bundle.predictor.regressor, kernels, loads[r.stress_level])
        rows.append(
            {
                "model": r.model,
                "batch": int(r.batch_size),
                "level": float(r.stress_level),
                "point": (sums, r.mean_ms, r.p90_ms),
            }
        )
    return rows


def timings() -> dict[str, tuple[pd.DataFrame, Path]]:
    cg = ROOT / "results" / "cpu-general"
    pooled = ns2.timings()
    pooled["mean_ms"] = pooled[["M1", "M2", "M3"]].mean(axis=1)
    pooled["model"] = pooled.variant_id + ".onnx"
    return {
        "gen": (score_gpu.measured([cg / "gpu", cg / "gpu-small"]), Path("/tmp/ckg")),
        "setD": (score_gpu.measured([cg / "gpu-setD"]), Path("/tmp/gpuD")),
        "setE": (score_gpu.measured([cg / "gpu-setE"]), Path("/tmp/gpuE")),
        "ns2": (pooled[["model", "batch_size", "stress_level", "mean_ms", "p90_ms"]], Path("/tmp/ns2")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    args = parser.parse_args()
    bundle = load_bundle(args.bundle)
    _, train, loads = table_points(bundle.predictor.regressor)
    rows = [
        {"set": name, **row}
        for name, (frame, folder) in timings().items()
        for row in timed_points(bundle, frame, folder, loads)
    ]
    frame = pd.DataFrame(rows)

    def score(composition: Composition, part: pd.DataFrame) -> str:
        error = np.array([composition.apply(s)[0] / m - 1 for s, m, _ in part.point]) * 100
        return f"{np.abs(error).mean():.1f}% ({np.mean(np.abs(error) <= 10) * 100:.0f}%)"

    tables_only = Composition.fit(train)
    out = []
    for name in frame.set.unique():
        held = frame[frame.set == name]
        beside = Composition.fit(train + list(frame[frame.set != name].point))
        row = {"set left out": name, "cases": len(held)}
        row["tables only"], row["tables + other sets"] = score(tables_only, held), score(beside, held)
        for batch, part in held.groupby("batch"):
            row[f"b{batch}: tables only / + other sets"] = f"{score(tables_only, part)} / {score(beside, part)}"
        out.append(row)
    print("MAPE (within +-10%) of each set, its composition fitted without it:\n")
    print(pd.DataFrame(out).fillna("-").to_markdown(index=False))


if __name__ == "__main__":
    main()
