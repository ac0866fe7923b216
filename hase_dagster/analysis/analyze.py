"""From one ONNX file to its kernel catalog and DAG on one EP: the path every caller shares
(the catalog assets, ``hase analyze``, and prediction)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import onnx

from hase_dagster.analysis.catalog import Kernel, build_catalog, catalog_document, load_catalog
from hase_dagster.analysis.fusion import FusionMap, map_fusions
from hase_dagster.analysis.fusion_reuse import batch_one_twin, map_fusions_reusing
from hase_dagster.analysis.graph import OptimizedGraph, optimize_and_profile
from hase_dagster.analysis.kernel_models import write_kernel_model
from hase_dagster.analysis.memory import check_fits_in_memory
from hase_dagster.analysis.model_dag import build_dag
from hase_dagster.analysis.zoo import ModelVariant
from hase_dagster.core.config import OrtOptions
from hase_dagster.core.ort_runtime import EpName, load_onnx


@dataclass
class ModelAnalysis:
    """Everything Hase knows about one model on one EP before measuring anything."""

    variant_id: str
    ep: EpName
    optimized: OptimizedGraph
    fusion: FusionMap
    kernels: list[Kernel]
    dag: nx.DiGraph

    def catalog(self) -> dict:
        return catalog_document(self.variant_id, self.ep, self.kernels, self.fusion)


def analyze_model(
    source: str | os.PathLike[str],
    ep: EpName,
    optimized_path: str | os.PathLike[str],
    variant_id: str | None = None,
    options: OrtOptions | None = None,
) -> ModelAnalysis:
    """Optimize ``source`` for ``ep``, map every optimized node to the original ops it absorbed,
    and describe the kernels and their DAG."""
    source = Path(source)
    check_fits_in_memory(load_onnx(source), source.name)
    variant_id = variant_id or source.stem
    optimized = optimize_and_profile(source, optimized_path, ep, options)
    fusion = map_fusions(source, optimized, options)
    kernels = build_catalog(variant_id, optimized, fusion)
    return ModelAnalysis(variant_id, ep, optimized, fusion, kernels, build_dag(variant_id, ep, kernels))


# Per-variant steps of the analysis assets, picklable so that `parallel.map_variants` can run them
# in worker processes.


def optimize_and_save(
    source_and_target: tuple[str | Path, Path], ep: EpName, options: OrtOptions | None = None
) -> OptimizedGraph:
    """``optimize_and_profile`` of one variant, with its graph description saved beside the model."""
    source, target = source_and_target
    graph = optimize_and_profile(source, target, ep, options)
    graph.save(target.with_suffix(".json"))
    return graph


@dataclass(frozen=True)
class CatalogTask:
    """One variant's inputs to the kernel catalog; ``twin`` is its zoo variant when a batch-1 twin
    may stand in for fingerprinting."""

    variant_id: str
    source: Path
    graph_json: Path
    catalog_json: Path
    twin: ModelVariant | None = None


def catalog_variant(
    task: CatalogTask, fusion_dir: Path, opset: int, options: OrtOptions | None = None
) -> tuple[list[Kernel], dict, str]:
    """Map fusions (reusing cached maps), build the catalog and write it as JSON.

    Returns the kernels, the catalog document and where the fusion map came from.
    """
    graph = OptimizedGraph.load(task.graph_json)
    with tempfile.TemporaryDirectory() as scratch:
        twin = batch_one_twin(task.twin, scratch, opset, graph.ep, options) if task.twin else None
        fusion, origin = map_fusions_reusing(task.source, graph, fusion_dir, options, twin)
    kernels = build_catalog(task.variant_id, graph, fusion)
    document = catalog_document(task.variant_id, graph.ep, kernels, fusion)
    task.catalog_json.parent.mkdir(parents=True, exist_ok=True)
    task.catalog_json.write_text(json.dumps(document, indent=1, default=str))
    return kernels, document, origin


def write_variant_kernels(
    optimized_and_catalog: tuple[Path, Path], out_dir: Path, ep: EpName, options: OrtOptions | None = None
) -> list[tuple[str, str, Path]]:
    """Write the standalone model of every kernel of one variant; (instance, family, path) per kernel."""
    optimized_path, catalog_path = optimized_and_catalog
    _, kernels = load_catalog(catalog_path)
    optimized_model = onnx.load(str(optimized_path))
    return [
        (kernel.instance_id, kernel.family, write_kernel_model(optimized_model, kernel, out_dir, ep, options))
        for kernel in kernels
    ]
