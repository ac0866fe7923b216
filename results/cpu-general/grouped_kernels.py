"""The CPU kernel regressor on grouped convolutions, with and without training architectures: each file's
kernels (ORT's own per-node profile, CPU EP, one thread) predicted idle by the predictor trained on the data
directory's warehouse, and by the same training less ``--exclude``, against their in-graph times.

    .venv/bin/python results/cpu-general/grouped_kernels.py FILE.onnx ... --exclude dsg_s6107,dsg_s6590,...

Prints, per file, the summed in-graph time and both predictions of its grouped convolutions (1 < group <
channels), its depthwise ones and the rest.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from hase_dagster.analysis.analyze import analyze_model
from hase_dagster.analysis.catalog import Kernel
from hase_dagster.core.config import data_dir
from hase_dagster.learn.predict import predict_kernels_under
from hase_dagster.learn.training import load_at_level, train_predictor
from warehouse.store import Warehouse


def kind_of(kernel: Kernel) -> str:
    """``grouped`` (1 < group < channels), ``depthwise`` (group = channels) or ``other``."""
    groups = int(kernel.attributes.get("group", 1) or 1)
    if "Conv" not in kernel.op_type or groups <= 1 or not kernel.activations:
        return "other"
    shape = kernel.activations[0].shape
    return "depthwise" if len(shape) > 1 and groups == shape[1] else "grouped"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--exclude", required=True, help="comma-separated architectures the second training leaves out")
    args = parser.parse_args()
    store = Warehouse(data_dir() / "hase.duckdb")
    idle = load_at_level(store, "cpu", 0.0)
    with_all = train_predictor(store, "cpu")
    without = train_predictor(store, "cpu", [name for name in args.exclude.split(",") if name])
    rows = []
    for path in args.files:
        with tempfile.TemporaryDirectory() as tmp:
            kernels = analyze_model(path, "cpu", Path(tmp) / "optimized.onnx").kernels
        (full,) = predict_kernels_under(with_all.regressor, kernels, [idle])
        (less,) = predict_kernels_under(without.regressor, kernels, [idle])
        for kernel, a, b in zip(kernels, full, less):
            rows.append(
                {
                    "file": path.stem,
                    "kind": kind_of(kernel),
                    "kernels": 1,
                    "in_graph_ms": (kernel.in_graph_us or 0.0) / 1000,
                    "predicted_ms": a.mean_ms,
                    "predicted_without_ms": b.mean_ms,
                }
            )
    table = pd.DataFrame(rows).groupby(["file", "kind"]).sum()
    table["ratio"] = table["predicted_ms"] / table["in_graph_ms"]
    table["ratio_without"] = table["predicted_without_ms"] / table["in_graph_ms"]
    print(table.round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
