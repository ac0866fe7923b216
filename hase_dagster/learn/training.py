"""Training and loading the predictor (kernel regressor + model composition) from the warehouse."""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hase_dagster.analysis.catalog import Kernel, kernel_from_dict
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.predict import Composition, Sums, model_sums
from hase_dagster.learn.regressor import LatencyRegressor, train_regressor, training_rows
from hase_dagster.core.metrics import ALL_FIELDS, LOAD_FIELD
from warehouse.store import Warehouse


@dataclass
class Predictor:
    """What `hase predict` loads: the kernel regressor and the model-level composition."""

    regressor: LatencyRegressor
    composition: Composition

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(self))
        partial.replace(path)
        schema = {
            "kind": self.regressor.kind, "ep": self.regressor.ep, "load_fields": self.regressor.load_fields,
            "families": self.regressor.families, "ops": self.regressor.ops, "batch_sizes": self.regressor.batch_sizes,
            "versions": self.regressor.versions, "composition": vars(self.composition),
        }
        path.with_suffix(".schema.json").write_text(json.dumps(schema, indent=1))
        return path

    @staticmethod
    def load(path: str | os.PathLike[str]) -> Predictor:
        path = Path(path)
        if not path.exists():
            raise HaseError(f"no trained predictor at {path}: materialize latency_regressor first")
        predictor = pickle.loads(path.read_bytes())
        if not isinstance(predictor, Predictor):
            raise HaseError(f"{path} does not hold a Hase predictor")
        return predictor


def predictor_path(root: Path, ep: str) -> Path:
    return root / "regressors" / ep / "predictor.pkl"


def kernel_from_row(row: dict[str, Any]) -> Kernel:
    """A catalog kernel rebuilt from a ``kernels`` table row."""
    return kernel_from_dict(
        row["variant_id"],
        row["ep"],
        {
            "order": row["kernel_order"], "node_name": row["node_name"], "family": row["family"],
            "op_type": row["op_type"], "domain": row["domain"],
            "absorbed_ops": json.loads(row["absorbed_ops_json"]), "absorbed_op_types": [],
            "attributes": json.loads(row["attributes_json"]), "inputs": json.loads(row["inputs_json"]),
            "outputs": json.loads(row["outputs_json"]), "flops": row["flops"], "input_bytes": row["input_bytes"],
            "output_bytes": row["output_bytes"], "weight_bytes": row["weight_bytes"], "in_graph_us": row["in_graph_us"],
        },
    )


def kernels_by_variant(store: Warehouse, ep: str) -> dict[str, list[Kernel]]:
    rows = store.query("SELECT * FROM kernels WHERE ep = ? ORDER BY variant_id, kernel_order", [ep])
    out: dict[str, list[Kernel]] = {}
    for row in rows.to_dict("records"):
        out.setdefault(row["variant_id"], []).append(kernel_from_row(row))
    return out


def measured_models(store: Warehouse, ep: str) -> pd.DataFrame:
    """Whole-model benchmark rows (ok) with each variant's architecture, input size and held-out flag."""
    return store.query(
        """SELECT b.*, f.model_name AS architecture, f.held_out
           FROM model_benchmarks b JOIN model_files f USING (variant_id)
           WHERE b.ep = ? AND b.status = 'ok' ORDER BY b.variant_id, b.stress_level""",
        [ep],
    )


def background_load(row: dict[str, Any] | pd.Series) -> dict[str, float]:
    """The background metrics of a benchmark row, by field name (missing ones left out)."""
    return {f: float(row[f"bg_{f}"]) for f in ALL_FIELDS if f"bg_{f}" in row and pd.notna(row[f"bg_{f}"])}


def composition_points(
    regressor: LatencyRegressor, models: pd.DataFrame, kernels: dict[str, list[Kernel]]
) -> list[tuple[Sums, float, float]]:
    points = []
    for row in models.to_dict("records"):
        variant_kernels = kernels.get(row["variant_id"])
        if not variant_kernels:
            continue
        sums, _ = model_sums(regressor, variant_kernels, background_load(row))
        points.append((sums, float(row["mean_ms"]), float(row["p90_ms"])))
    return points


def train_predictor(store: Warehouse, ep: str, exclude_architecture: str | None = None, kind: str | None = None) -> Predictor:
    """Regressor on kernel benchmarks and composition on model benchmarks of ``ep``; with
    ``exclude_architecture``, nothing of that architecture is seen (no kernel instance it uses, no
    measurement of it). Held-out models (``held_out`` in the profile) are never seen."""
    rows = training_rows(store, ep)
    models = measured_models(store, ep)
    models = models[~models["held_out"].astype(bool)]
    if exclude_architecture:
        rows = rows[~rows["architecture"].str.split(",").apply(lambda names: exclude_architecture in names)]
        models = models[models["architecture"] != exclude_architecture]
    regressor = train_regressor(rows.reset_index(drop=True), ep, kind=kind)
    composition = Composition.fit(composition_points(regressor, models, kernels_by_variant(store, ep)))
    return Predictor(regressor, composition)


def load_at_level(store: Warehouse, ep: str, level: float) -> dict[str, float]:
    """Mean background metrics measured in the benchmark partitions at stress ``level``."""
    rows = store.query("SELECT * FROM kernel_benchmarks WHERE ep = ? AND stress_level = ?", [ep, level])
    if rows.empty:
        levels = store.query("SELECT DISTINCT stress_level FROM kernel_benchmarks WHERE ep = ? ORDER BY 1", [ep])
        raise HaseError(f"stress level {level} was never benchmarked on {ep}; benchmarked: {levels['stress_level'].tolist()}")
    means = {f: rows[f"bg_{f}"].mean() for f in ALL_FIELDS}
    out = {f: float(v) for f, v in means.items() if pd.notna(v)}
    if LOAD_FIELD[ep] not in out:
        raise HaseError(f"the {ep} benchmarks at level {level} have no {LOAD_FIELD[ep]} background")
    return out
