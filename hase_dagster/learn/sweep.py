"""Many questions in one call: models x batch sizes x loads, each model analysed once per batch size.

The analysis of a model (optimize, profile, fingerprint fusions) costs far more than predicting it, so
its kernel list is cached on disk, keyed by the graph's structure (``graph_structure_digest``: nodes,
inputs, initializer names and shapes, the values of small initializers; not the weights' values), the
batch size, the EP and the ORT version: a sweep, a NAS loop or a planner that asks again about the same
graph, or about a retrained copy of it, pays only the regressor and the composition.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from hase_dagster.analysis.analyze import analyze_model
from hase_dagster.analysis.catalog import Kernel, kernel_from_dict
from hase_dagster.analysis.precision import detect_precision
from hase_dagster.core.config import EpName
from hase_dagster.core.errors import HaseError
from hase_dagster.core.onnx_structure import graph_structure_digest, load_structure
from hase_dagster.core.paths import DataPaths, write_text_atomic
from hase_dagster.learn.predict import ModelPrediction, predict_model
from hase_dagster.learn.predict_file import model_files, resolve_load, with_batch_size
from hase_dagster.learn.training import Predictor
from warehouse.store import Warehouse

# Bumped when the cached kernel list's meaning or the key changes (catalog or fusion naming; 2: the key
# is the graph's structure, not the file's bytes).
ANALYSIS_CACHE_VERSION = 2


@dataclass(frozen=True)
class AnalysisCache:
    """Kernel lists of analysed models in one folder (JSON files named by their key)."""

    folder: Path

    @staticmethod
    def key(structure: str, batch_size: int, ep: str) -> str:
        """The entry name of a graph (its :func:`graph_structure_digest`) at ``batch_size`` on ``ep``."""
        digest = hashlib.sha256(structure.encode())
        digest.update(f"|{batch_size}|{ep}|{ort.__version__}|{ANALYSIS_CACHE_VERSION}".encode())
        return digest.hexdigest()[:32]

    def kernels(self, path: Path, batch_size: int, ep: EpName) -> tuple[list[Kernel], bool]:
        """The kernels ORT runs for ``path`` at ``batch_size`` on ``ep``, and whether they came from
        the cache (an analysis runs and is stored otherwise)."""
        key = self.key(graph_structure_digest(load_structure(path)), batch_size, ep)
        entry = self.folder / f"{key}.json"
        if entry.exists():
            try:
                data = json.loads(entry.read_text())
                return [kernel_from_dict(data["variant_id"], ep, k) for k in data["kernels"]], True
            except (ValueError, KeyError, TypeError):
                entry.unlink(missing_ok=True)  # a damaged entry is analysed again
        with tempfile.TemporaryDirectory() as tmp:
            model_path = with_batch_size(path, batch_size, Path(tmp))
            analysis = analyze_model(model_path, ep, Path(tmp) / "optimized.onnx", variant_id=path.stem)
        document = {"variant_id": path.stem, "kernels": [k.to_dict() for k in analysis.kernels]}
        write_text_atomic(entry, json.dumps(document))
        return analysis.kernels, False


def predict_sweep(
    paths: Iterable[str | os.PathLike[str]],
    batch_sizes: list[int],
    load_specs: list[str],
    ep: EpName,
    data_root: Path,
    prometheus_url: str,
) -> list[ModelPrediction]:
    """Predict every model (files, or folders of them) at every batch size under every load.

    Args:
        paths: ONNX files or folders holding them.
        batch_sizes: batch sizes to predict (a model with a fixed batch must match each one).
        load_specs: ``idle``, ``level=X`` or ``prometheus``, each resolved once.
        ep: the execution provider whose trained predictor answers.
        data_root: the data directory with the warehouse and the predictor.
        prometheus_url: where ``prometheus`` loads are read.

    Returns:
        One prediction per (model, batch size, load), in that order, each with the precision its
        file was made in (its kernels are the ones ORT runs for that file: fp16 or int8 as they are).
    """
    if not batch_sizes or any(b <= 0 for b in batch_sizes):
        raise HaseError(f"batch sizes must be positive integers, got {batch_sizes}")
    if not load_specs:
        raise HaseError("no load to predict under")
    files = model_files(paths)
    layout = DataPaths(data_root)
    predictor = Predictor.load(layout.predictor(ep))
    store = Warehouse(layout.database)
    loads = [resolve_load(spec, store, ep, predictor.regressor.load_fields, prometheus_url) for spec in load_specs]
    cache = AnalysisCache(layout.analysis_cache(ep))
    predictions = []
    for path in files:
        precision = detect_precision(load_structure(path))
        for batch in batch_sizes:
            kernels, _ = cache.kernels(path, batch, ep)
            for load, source in loads:
                prediction = predict_model(
                    path.name, kernels, predictor.regressor, predictor.composition, load, source, batch
                )
                prediction.precision = precision
                predictions.append(prediction)
    return predictions
