"""Whole-model predictions from statically detected kernels against predictions from the
fingerprinted kernels, on the same cases, both scored against the measured latency.

CUDA: the predictor of the shipped H100 bundle (`results/bundles/h100`, trained on the committed
H100 tables; held-out models never seen); the static kernels come from the rules of
cuda_agreement.py (learned without the held-out models). CPU: the predictor a CPU `make run`
trained in DATA_DIR, with its warehouse and catalogs.

Usage: .venv/bin/python results/static-detection/accuracy.py cuda
       .venv/bin/python results/static-detection/accuracy.py cpu DATA_DIR
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from hase_dagster.analysis.catalog import load_catalog
from hase_dagster.analysis.fusion_rules import FusionRules
from hase_dagster.analysis.static_detect import detect_in_model
from hase_dagster.learn.bundles import loads_by_level
from hase_dagster.learn.predict import predict_model
from hase_dagster.learn.reports import import_tables
from hase_dagster.learn.training import Predictor
from warehouse.store import Warehouse

HERE = Path(__file__).parent


def score(frame: pd.DataFrame, column: str) -> float:
    return float((100 * (frame[column] - frame["measured_ms"]).abs() / frame["measured_ms"]).mean())


def run(
    store: Warehouse, ep: str, cases: dict[str, tuple[onnx.ModelProto, list]], rules: FusionRules, predictor: Predictor
) -> dict:
    loads = loads_by_level(store, ep)
    measured = store.query(
        "SELECT variant_id, stress_level, batch_size, mean_ms FROM model_benchmarks WHERE ep = ? AND status = 'ok'",
        [ep],
    )
    held = store.query("SELECT DISTINCT variant_id, held_out FROM model_files")
    held_out = dict(zip(held["variant_id"], held["held_out"]))
    static = {v: detect_in_model(model, rules, v).kernels for v, (model, _) in cases.items()}
    rows = []
    for row in measured.itertuples():
        if row.variant_id not in cases or float(row.stress_level) not in loads:
            continue
        load = loads[float(row.stress_level)]
        fingerprinted = predict_model(
            row.variant_id,
            cases[row.variant_id][1],
            predictor.regressor,
            predictor.composition,
            load,
            "level",
            int(row.batch_size),
        )
        derived = predict_model(
            row.variant_id,
            static[row.variant_id],
            predictor.regressor,
            predictor.composition,
            load,
            "level",
            int(row.batch_size),
        )
        rows.append(
            {
                "variant_id": row.variant_id,
                "stress_level": float(row.stress_level),
                "held_out": bool(held_out.get(row.variant_id, False)),
                "measured_ms": float(row.mean_ms),
                "fingerprinted_ms": fingerprinted.predicted_ms,
                "static_ms": derived.predicted_ms,
            }
        )
    frame = pd.DataFrame(rows)
    summary = {}
    for name, part in (("all", frame), ("trained", frame[~frame.held_out]), ("held_out", frame[frame.held_out])):
        if len(part):
            summary[name] = {
                "cases": len(part),
                "mape_fingerprinted_pct": score(part, "fingerprinted_ms"),
                "mape_static_pct": score(part, "static_ms"),
                "difference_points": score(part, "static_ms") - score(part, "fingerprinted_ms"),
                "max_abs_prediction_gap_pct": float(
                    np.max(100 * (part.static_ms - part.fingerprinted_ms).abs() / part.fingerprinted_ms)
                ),
            }
    return {"summary": summary, "cases": rows}


def main() -> None:
    ep = sys.argv[1]
    if ep == "cuda":
        sys.path.insert(0, str(HERE))
        import cuda_agreement as ca

        files, kernels = ca.load_cases()
        files = files[files.variant_id.isin(kernels)]
        cases = {r.variant_id: (ca.model_of(r), kernels[r.variant_id]) for r in files.itertuples()}
        rules = FusionRules.load(ca.RULES_FILE)
        with tempfile.TemporaryDirectory() as tmp:
            # The shipped H100 bundle's predictor (trained on these tables, held-out models never seen).
            predictor = Predictor.load(Path("results/bundles/h100/predictor"))
            report = run(import_tables(ca.TABLES, Path(tmp) / "t.duckdb"), "cuda", cases, rules, predictor)
    else:
        data = Path(sys.argv[2])
        cases = {}
        for catalog in sorted((data / "catalogs" / "cpu").glob("*.json")):
            document, kernels = load_catalog(catalog)
            cases[document["variant_id"]] = (
                onnx.load(str(data / "models" / f"{document['variant_id']}.onnx")),
                kernels,
            )
        rules = FusionRules.load(next(HERE.glob("cpu-ort*.fusion_rules.json")))
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "hase.duckdb"
            copy.write_bytes((data / "hase.duckdb").read_bytes())
            # The predictor the CPU profile's `make run` trained on that data directory.
            predictor = Predictor.load(data / "regressors" / "cpu" / "predictor")
            report = run(Warehouse(copy), "cpu", cases, rules, predictor)
    (HERE / f"{ep}_accuracy.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
