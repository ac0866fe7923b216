"""Fusion maps computed on a batch-1 twin equal the maps computed on the batch-N model itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hase_dagster.analysis.fusion import map_fusions
from hase_dagster.analysis.fusion_reuse import batch_one_twin, map_fusions_reusing, structure_key
from hase_dagster.analysis.graph import optimize_and_profile
from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel
from tests.conftest import TINY_TRANSFORMER


@pytest.mark.parametrize(
    "model, size", [(ZooModel(name="resnet18"), 64), (TINY_TRANSFORMER, 16)], ids=["resnet18", "encoder"]
)
def test_batch_one_twin_gives_the_map_of_the_batched_model(tmp_path: Path, model: ZooModel, size: int) -> None:
    variant = ModelVariant(model, size, 3)
    source = export_variant(variant, tmp_path / "models", 17).path
    optimized = optimize_and_profile(source, tmp_path / "optimized" / "model.onnx", "cpu")
    direct = map_fusions(source, optimized)
    cache = tmp_path / "maps"

    fusion, origin = map_fusions_reusing(
        source, optimized, cache, twin=batch_one_twin(variant, tmp_path / "twin", 17, "cpu")
    )

    assert origin == "twin"
    assert fusion.absorbed == direct.absorbed
    assert fusion.folded == direct.folded and not fusion.unmapped

    again, origin = map_fusions_reusing(source, optimized, cache, twin=None)
    assert origin == "cached"
    assert again.absorbed == direct.absorbed


def test_a_twin_of_another_structure_is_not_used(tmp_path: Path, resnet18_onnx: Path, squeezenet_onnx: Path) -> None:
    optimized = optimize_and_profile(resnet18_onnx, tmp_path / "resnet.onnx", "cpu")
    other = optimize_and_profile(squeezenet_onnx, tmp_path / "squeeze.onnx", "cpu")
    assert structure_key(resnet18_onnx, optimized) != structure_key(squeezenet_onnx, other)

    fusion, origin = map_fusions_reusing(
        resnet18_onnx, optimized, tmp_path / "maps", twin=lambda: (squeezenet_onnx, other)
    )

    assert origin == "direct"
    assert fusion.absorbed == map_fusions(resnet18_onnx, optimized).absorbed


def test_writers_racing_on_one_fusion_map_each_finish_and_leave_one_whole_file(tmp_path: Path) -> None:
    """Analysis workers map two models of one structure at once (the probe grids' 224 and 256 px twins): each
    writer renames its own temporary file, so none fails on a name another one already renamed."""
    from concurrent.futures import ThreadPoolExecutor

    from hase_dagster.core.paths import write_text_atomic

    target = tmp_path / "maps" / "key.json"
    texts = [json.dumps({"writer": i, "pad": "x" * 50_000}) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        written = list(pool.map(lambda text: write_text_atomic(target, text), texts * 25))
    assert written == [target] * 200
    assert target.read_text() in texts
    assert [p.name for p in target.parent.iterdir()] == ["key.json"]
