"""Score a measured checker set again with the predictor the current code trains on the data directory's
warehouse, without timing anything: the labels come from an earlier ``hase evaluate --json``, the load
of each stress level from the warehouse (``load_at_level``: the model benchmarks' mean background).

    .venv/bin/python results/cpu-general/rescore.py LABELS.json FOLDER_OF_ONNX [--exclude NAME,NAME]

``--exclude`` trains without those architectures (``train_predictor``'s exclude_architectures): the same
timings scored with and without some training networks, e.g. the grouped_conv probes (`dsg_s*`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from hase_dagster.core.config import data_dir
from hase_dagster.learn.predict import predict_model_under
from hase_dagster.learn.predict_file import prepare_files
from hase_dagster.learn.training import load_at_level, train_predictor
from warehouse.store import Warehouse

LEVELS = (0.0, 0.5, 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", type=Path, help="the JSON of `hase evaluate --json`")
    parser.add_argument("folder", type=Path, help="the ONNX files it measured")
    parser.add_argument("--exclude", default="", help="comma-separated architectures not to train on")
    args = parser.parse_args()
    store = Warehouse(data_dir() / "hase.duckdb")
    predictor = train_predictor(store, "cpu", [name for name in args.exclude.split(",") if name])
    composition = predictor.composition
    print(f"host floor {composition.host_floor_ms * 1000:.2f} us, terms {composition.mean_coefficients}")
    loads = [(load_at_level(store, "cpu", level), f"level={level}") for level in LEVELS]
    measured = {
        (c["model"], c["stress_level"]): c["measured_mean_ms"] for c in json.loads(args.labels.read_text())["cases"]
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prepared, _ = prepare_files(sorted({args.folder / name for name, _ in measured}), "cpu", Path(tmp))
        for model in prepared:
            predictions = predict_model_under(
                model.path.name, model.kernels, predictor.regressor, composition, loads, model.batch
            )
            for level, prediction in zip(LEVELS, predictions):
                label = measured[(model.path.name, level)]
                rows.append((model.path.name, level, label, prediction.predicted_ms))
                predicted = prediction.predicted_ms
                print(f"{model.path.name:36s} stress {level:.1f}  measured {label:9.3f}  predicted {predicted:9.3f}")
    error = np.array([p / m - 1 for _, _, m, p in rows]) * 100
    small = np.array([m < 2 for _, _, m, _ in rows])
    print(
        f"MAPE {np.mean(abs(error)):.1f}%, within +-10% {np.mean(abs(error) <= 10) * 100:.0f}%, "
        f"under 2 ms {np.mean(abs(error[small])):.1f}% ({small.sum()} cases), "
        f"worst {error[np.argmax(abs(error))]:+.0f}%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
