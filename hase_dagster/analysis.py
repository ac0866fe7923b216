"""From one ONNX file to its kernel catalog and DAG on one EP: the path every caller shares
(the catalog assets, ``hase analyze``, and prediction)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from hase_dagster.catalog import Kernel, build_catalog, catalog_document
from hase_dagster.config import OrtOptions
from hase_dagster.fusion import FusionMap, map_fusions
from hase_dagster.graph_analysis import OptimizedGraph, optimize_and_profile
from hase_dagster.model_dag import build_dag
from hase_dagster.ort_runtime import EpName, load_onnx


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
    load_onnx(source)
    variant_id = variant_id or source.stem
    optimized = optimize_and_profile(source, optimized_path, ep, options)
    fusion = map_fusions(source, optimized, options)
    kernels = build_catalog(variant_id, optimized, fusion)
    return ModelAnalysis(variant_id, ep, optimized, fusion, kernels, build_dag(variant_id, ep, kernels))
