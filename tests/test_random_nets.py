"""Random NAS-style networks: drawn from a seed, covering the design space, exportable and runnable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hase_dagster.analysis.random_nets import ACTIVATIONS, BLOCK_TYPES, draw_spec
from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel, infer_family
from hase_dagster.core.ort_runtime import make_session, random_inputs
from hase_dagster.learn.evaluation import error_measures


def test_a_seed_always_draws_the_same_network_and_seeds_differ() -> None:
    assert draw_spec(7) == draw_spec(7)
    assert len({draw_spec(seed).blocks for seed in range(10)}) == 10


def test_forty_seeds_cover_the_design_space() -> None:
    specs = [draw_spec(seed) for seed in range(40)]
    assert {b.kind for s in specs for b in s.blocks} == set(BLOCK_TYPES)
    assert {b.kernel for s in specs for b in s.blocks if b.kind == "inverted_residual"} == {3, 5, 7}
    assert {s.activation for s in specs} == set(ACTIVATIONS)
    assert any(b.se for s in specs for b in s.blocks) and any(b.groups > 1 for s in specs for b in s.blocks)
    assert any(s.transformer_layers for s in specs) and not all(s.transformer_layers for s in specs)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [103, 104])  # 103: a transformer stage; 104: concat blocks
def test_random_networks_export_and_run_in_ort(seed: int, tmp_path: Path) -> None:
    traits = draw_spec(seed).traits
    assert traits["transformer"] if seed == 103 else traits["concat"]
    model = ZooModel(name=f"nas_s{seed}", kind="random_nas", seed=seed)
    exported = export_variant(ModelVariant(model, 128, 2), tmp_path, 17)
    assert exported.variant_id == f"nas_s{seed}_i128_b2"
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()


def test_families_are_inferred_from_kind_and_name_and_can_be_given() -> None:
    assert [infer_family(n) for n in ("resnet50", "efficientnet_b0", "densenet121", "vit_b_16", "vgg16", "lenet")] == [
        "residual_cnn",
        "mobile",
        "dense_concat",
        "vision_transformer",
        "plain_cnn",
        "other",
    ]
    assert ZooModel(name="enc", kind="transformer_encoder").family_name == "text_transformer"
    assert ZooModel(name="n", kind="random_nas", seed=3).family_name == "random_nas"
    assert ZooModel(name="densenet121", family="my_family").family_name == "my_family"


def test_error_measures() -> None:
    measured = np.array([1.0, 2.0, 4.0, 8.0])
    predicted = np.array([1.04, 2.18, 3.0, 8.0])  # 4%, 9%, 25%, 0% off
    measures = error_measures(predicted, measured)
    assert measures["mape"] == pytest.approx((4 + 9 + 25 + 0) / 4)
    assert measures["within_5"] == 50.0 and measures["within_10"] == 75.0
    assert measures["p50_abs"] == pytest.approx(6.5) and measures["spearman"] == pytest.approx(1.0)
    assert np.isnan(error_measures(predicted[:2], measured[:2])["spearman"])
