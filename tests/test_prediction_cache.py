"""Prediction with a bundle reads each model's structure once: a sweep over batch sizes, or a copy of
the model with other weights, is analysed once (only shapes are inferred again per batch), and every
answer is what detecting that batch from scratch gives. Models are read without their weights'
values; tree ensembles walk each distinct row once and answer as walking every row does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from hase_dagster.analysis import pattern_graph
from hase_dagster.analysis.pattern_graph import GraphStructure, Matcher
from hase_dagster.analysis.static_detect import detect_in_model
from hase_dagster.core.config import ZooModel
from hase_dagster.core.errors import ModelLoadError
from hase_dagster.core.onnx_structure import KEEP_VALUE_ELEMENTS, graph_structure_digest, load_structure
from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.predict_file import BatchedModel

# Small enough to export in seconds; its reshapes are computed from Shape ops at run time, so its
# shapes need the constant-subgraph evaluation that is memoised across batch sizes.
ENCODER = ZooModel(
    name="encoder_dyn", kind="transformer_encoder", d_model=32, nhead=2, dim_feedforward=64, num_layers=2
)


@pytest.fixture(scope="module")
def dynamic_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hase_dagster.analysis.serving_models import export_dynamic_batch

    return export_dynamic_batch(ENCODER, 8, tmp_path_factory.mktemp("dyn") / "encoder_dyn.onnx")


class Spy:
    """Counts calls of the real GraphStructure.of, Matcher.matches and the constant-subgraph
    evaluation (pattern_graph._evaluate), which still run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.structures = 0
        self.matches = 0
        self.evaluations = 0
        of, matches, evaluate = GraphStructure.of.__func__, Matcher.matches, pattern_graph._evaluate  # type: ignore[attr-defined]

        def counted_of(cls: type[GraphStructure], *args: object, **kwargs: object) -> GraphStructure:
            self.structures += 1
            return of(cls, *args, **kwargs)

        def counted_matches(matcher: Matcher, *args: object, **kwargs: object) -> list[list[int]]:
            self.matches += 1
            return matches(matcher, *args, **kwargs)

        def counted_evaluate(*args: object, **kwargs: object) -> list | None:
            self.evaluations += 1
            return evaluate(*args, **kwargs)

        monkeypatch.setattr(GraphStructure, "of", classmethod(counted_of))
        monkeypatch.setattr(Matcher, "matches", counted_matches)
        monkeypatch.setattr(pattern_graph, "_evaluate", counted_evaluate)


def _kernels(kernels: list) -> list[dict]:
    return [k.to_dict() for k in kernels]


def test_a_sweep_analyses_each_model_once_and_answers_as_detection_from_scratch(
    dynamic_encoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(monkeypatch)
    single = load_bundle("cpu")
    single.predict([dynamic_encoder], [1], ["idle"])
    assert spy.structures == 1 and spy.matches > 0 and spy.evaluations > 0
    one_batch = {"matches": spy.matches, "evaluations": spy.evaluations}

    spy.structures = spy.matches = spy.evaluations = 0
    bundle = load_bundle("cpu")
    predictions = bundle.predict([dynamic_encoder], [1, 2, 5], ["idle", "level=0.5"])
    assert [(p.batch_size, p.load_source[:4]) for p in predictions] == [
        (b, s) for b in (1, 2, 5) for s in ("idle", "leve")
    ]
    # Read and matched once for three batch sizes; the later batches evaluate again only the
    # constant subgraphs that depend on the batch.
    assert spy.structures == 1
    assert spy.matches == one_batch["matches"]
    assert one_batch["evaluations"] < spy.evaluations < 3 * one_batch["evaluations"]

    # Every batch's kernels are those detected from scratch on the model read whole and set to it.
    read_whole = onnx.load(str(dynamic_encoder))
    symbolic = [i for i, v in enumerate(read_whole.graph.input) if not v.type.tensor_type.shape.dim[0].dim_value]
    whole = BatchedModel(dynamic_encoder.name, read_whole, None, symbolic)
    for batch in (1, 2, 5):
        kernels, coverage = bundle.kernels(dynamic_encoder, batch)
        fresh = detect_in_model(whole.at(batch), bundle.rules, dynamic_encoder.stem)  # type: ignore[arg-type]
        assert _kernels(kernels) == _kernels(fresh.kernels)
        assert {k: v for k, v in coverage.items() if k != "seconds"} == {
            k: v for k, v in fresh.coverage.items() if k != "seconds"
        }


def test_a_copy_with_other_weights_is_not_analysed_again(
    dynamic_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = onnx.load(str(dynamic_encoder))
    largest = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    largest.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(largest) * 3 + 1, largest.name))
    retrained = tmp_path / "retrained.onnx"
    onnx.save(model, str(retrained))
    assert graph_structure_digest(load_structure(retrained)) == graph_structure_digest(load_structure(dynamic_encoder))

    spy = Spy(monkeypatch)
    bundle = load_bundle("cpu")
    predictions = bundle.predict([dynamic_encoder, retrained], [1, 3], ["idle"])
    assert spy.structures == 1
    assert [(p.model, p.batch_size) for p in predictions] == [
        (name, b) for name in (dynamic_encoder.name, "retrained.onnx") for b in (1, 3)
    ]
    for batch in (1, 3):
        original, copy = bundle.kernels(dynamic_encoder, batch)[0], bundle.kernels(retrained, batch)[0]
        assert {k.variant_id for k in copy} == {"retrained"}
        assert _kernels(original) == _kernels(copy)


def test_a_model_is_read_without_its_large_weights_values(
    dynamic_encoder: Path, resnet18_onnx: Path, tmp_path: Path
) -> None:
    for path in (dynamic_encoder, resnet18_onnx):
        full, light = onnx.load(str(path)), load_structure(path)
        assert list(light.graph.node) == list(full.graph.node)
        assert list(light.graph.input) == list(full.graph.input)
        assert list(light.graph.output) == list(full.graph.output)
        assert list(light.opset_import) == list(full.opset_import) and light.ir_version == full.ir_version
        assert [(t.name, t.data_type, list(t.dims)) for t in light.graph.initializer] == [
            (t.name, t.data_type, list(t.dims)) for t in full.graph.initializer
        ]
        stripped = 0
        for kept, original in zip(light.graph.initializer, full.graph.initializer):
            if int(np.prod(original.dims)) <= KEEP_VALUE_ELEMENTS:
                assert kept == original
            else:
                stripped += 1
                assert not kept.raw_data and not kept.float_data
        if path == resnet18_onnx:  # the encoder's tensors are all small enough to keep
            assert stripped > 0 and light.ByteSize() < full.ByteSize() / 10
        assert graph_structure_digest(light) == graph_structure_digest(full)
    with pytest.raises(ModelLoadError, match="no such ONNX file"):
        load_structure(tmp_path / "missing.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\xfe not a protobuf " * 10)
    with pytest.raises(ModelLoadError, match="garbage.onnx"):
        load_structure(garbage)


def test_trees_walk_each_distinct_row_once_and_answer_as_every_row_walked() -> None:
    import xgboost

    from hase_dagster.learn.estimators import _walk_trees, predict_tree_arrays, tree_arrays

    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 5))
    y = x[:, 0] - x[:, 3] + rng.normal(scale=0.1, size=300)
    booster = xgboost.train({"max_depth": 4, "eta": 0.1}, xgboost.DMatrix(x, label=y), num_boost_round=40)
    arrays = tree_arrays(booster)
    distinct = rng.normal(size=(30, 5))
    distinct[3, 2] = np.nan
    probe = distinct[rng.integers(0, 30, 500)]  # 500 rows, 30 distinct, NaN rows among them
    expected = _walk_trees(arrays, np.ascontiguousarray(probe, dtype=np.float32))
    np.testing.assert_array_equal(predict_tree_arrays(arrays, probe), expected)
    np.testing.assert_array_equal(predict_tree_arrays(arrays, probe), booster.inplace_predict(probe))
