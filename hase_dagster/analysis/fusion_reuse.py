"""Fusion maps reused across batch sizes: fingerprint a batch-1 twin, not the batch-128 model.

ORT's graph optimizations do not depend on the batch size, so a model exported at batch 1 is
optimized into the same nodes, with the same names, as at batch 128, and the map from optimized
nodes to original ops is the same. Fingerprinting every tensor of a batch-128 ResNet-50 at 512 px
moves tens of GB; its batch-1 twin moves a hundredth of that. The reuse is checked, not assumed:
a map is reused only for a pair of graphs whose structure key (every node's name, op type and
domain, in both graphs, and the EP) equals the key of the pair it was computed on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import onnx

from hase_dagster.analysis.fusion import FusionMap, map_fusions
from hase_dagster.analysis.graph import OptimizedGraph, name_all_nodes, optimize_and_profile
from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import OrtOptions
from hase_dagster.core.ort_runtime import EpName
from hase_dagster.core.paths import write_text_atomic

# Bump when map_fusions changes what it returns: older cached maps are then ignored.
FUSION_MAP_VERSION = 2

Source = Literal["cached", "twin", "direct"]
Twin = Callable[[], tuple[Path, OptimizedGraph]]


def structure_key(source_model: str | Path, optimized: OptimizedGraph) -> str:
    """A hash of both graphs' node names, op types and domains, and of the EP."""
    model = onnx.load(str(source_model), load_external_data=False)
    name_all_nodes(model)
    digest = hashlib.sha256(f"v{FUSION_MAP_VERSION}|{optimized.ep}".encode())
    for node in model.graph.node:
        digest.update(f"|o:{node.name}:{node.domain}:{node.op_type}".encode())
    for node in optimized.nodes:
        digest.update(f"|x:{node.name}:{node.domain}:{node.op_type}".encode())
    return digest.hexdigest()[:24]


def map_fusions_reusing(
    source_model: str | Path,
    optimized: OptimizedGraph,
    cache_dir: str | Path,
    options: OrtOptions | None = None,
    twin: Twin | None = None,
) -> tuple[FusionMap, Source]:
    """The fusion map of ``optimized``, from the cache, else from ``twin`` (a callable returning a
    smaller model of the same structure and its optimized graph), else computed directly.

    Returns the map and where it came from. A twin whose structure differs is not used.
    """
    key = structure_key(source_model, optimized)
    cached = Path(cache_dir) / f"{key}.json"
    if cached.exists():
        return FusionMap.from_dict(json.loads(cached.read_text())), "cached"
    fusion: FusionMap | None = None
    source: Source = "direct"
    if twin is not None:
        twin_source, twin_graph = twin()
        if structure_key(twin_source, twin_graph) == key:
            fusion, source = map_fusions(twin_source, twin_graph, options), "twin"
    if fusion is None:
        fusion = map_fusions(source_model, optimized, options)
    write_text_atomic(cached, json.dumps(fusion.to_dict()))
    return fusion, source


def batch_one_twin(
    variant: ModelVariant, scratch: str | Path, opset: int, ep: EpName, options: OrtOptions | None = None
) -> Twin:
    """A twin for ``map_fusions_reusing``: the zoo variant exported and optimized at batch 1 in
    ``scratch`` (only when called, i.e. on a cache miss)."""

    def build() -> tuple[Path, OptimizedGraph]:
        exported = export_variant(ModelVariant(variant.model, variant.input_size, 1), scratch, opset, ep)
        optimized = optimize_and_profile(exported.path, Path(scratch) / "twin.optimized.onnx", ep, options)
        return exported.path, optimized

    return build
