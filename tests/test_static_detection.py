"""Static kernel detection: rules learned from the fingerprinted catalog of a small model (real
ORT CPU analysis) give its kernel list back without running it; what no rule covers stays."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.analysis.analyze import ModelAnalysis, analyze_model
from hase_dagster.analysis.fusion_rules import FusionRules, extended, learn_rules
from hase_dagster.analysis.kernel_agreement import agreement_check, compare_kernels
from hase_dagster.analysis.static_detect import detect_kernels
from hase_dagster.core.errors import HaseError


def _block_model(path: Path, tail: str | None = None) -> Path:
    """Conv-Relu, Conv-Add(skip)-Relu, GlobalAveragePool (and an optional tail op) at 1x16x16x16.

    16 channels: a whole NCHWc block on AVX2 (8) and on AVX-512 (16) hosts alike. With fewer, ORT on an
    AVX-512 host pads each convolution's output to 16 channels and adds a ReorderOutput after it, which the
    learned rules do not derive yet (their insertions are learned before a kernel's input, from tensors of
    the original graph)."""
    rng = np.random.default_rng(0)
    weight = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.2, shape).astype(np.float32), name)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Add", ["c2", "x"], ["a2"], name="add2"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["y" if tail is None else "p"], name="pool"),
    ]
    if tail is not None:
        nodes.append(helper.make_node(tail, ["p"], ["y"], name="tail"))
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
        [weight("w1", 16, 16, 3, 3), weight("b1", 16), weight("w2", 16, 16, 3, 3), weight("b2", 16)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def taught(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelAnalysis, FusionRules]:
    folder = tmp_path_factory.mktemp("static")
    source = _block_model(folder / "block.onnx")
    analysis = analyze_model(source, "cpu", folder / "block.opt.onnx")
    rules = learn_rules([(onnx.load(str(source)), analysis.kernels)], "cpu", onnxruntime.__version__, "test CPU")
    return source, analysis, rules


def test_rules_reproduce_the_fingerprinted_kernels(taught: tuple[Path, ModelAnalysis, FusionRules]) -> None:
    source, analysis, rules = taught
    # The teacher fused something (Conv_Relu, Conv_Add_Relu on NCHWc), so this is not a 1:1 copy.
    assert any("_" in k.family for k in analysis.kernels)
    detection = detect_kernels(source, rules)
    agreement = compare_kernels("block", analysis.kernels, detection.kernels)
    assert agreement.identical == len(analysis.kernels) == len(detection.kernels), (
        agreement.only_fingerprinted,
        agreement.only_derived,
    )
    assert [k.op_type for k in detection.kernels] == [k.op_type for k in analysis.kernels]
    assert detection.coverage["uncovered_ops"] == 0
    assert all(k.flops >= 0 and k.output_bytes > 0 for k in detection.kernels)


def test_uncovered_pattern_is_reported_and_kept(
    taught: tuple[Path, ModelAnalysis, FusionRules], tmp_path: Path
) -> None:
    _, _, rules = taught
    source = _block_model(tmp_path / "tail.onnx", tail="Sigmoid")
    detection = detect_kernels(source, rules)
    assert detection.coverage["uncovered_patterns"] == {"Sigmoid": 1}
    assert detection.coverage["covered_share"] < 1.0
    sigmoid = [k for k in detection.kernels if k.absorbed_ops == ["tail"]]
    assert len(sigmoid) == 1 and sigmoid[0].family == "Sigmoid" and sigmoid[0].outputs[0].shape == (1, 16, 1, 1)
    assert detection.kernels[-1] is sigmoid[0]


def test_rules_round_trip_and_refuse_corrupt_or_foreign_files(
    taught: tuple[Path, ModelAnalysis, FusionRules], tmp_path: Path
) -> None:
    _, _, rules = taught
    path = rules.save(tmp_path / "cpu.fusion_rules.json")
    loaded = FusionRules.load(path)
    assert loaded.rules == json.loads(json.dumps(rules.rules)) and loaded.ep == "cpu"
    document = json.loads(path.read_text())
    (tmp_path / "v2.json").write_text(json.dumps({**document, "format_version": 2}))
    with pytest.raises(HaseError, match="format version 2"):
        FusionRules.load(tmp_path / "v2.json")
    (tmp_path / "torn.json").write_text(path.read_text()[:200])
    with pytest.raises(HaseError, match="corrupt"):
        FusionRules.load(tmp_path / "torn.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(HaseError, match="not a Hase fusion rules file"):
        FusionRules.load(tmp_path / "other.json")
    broken = {**document, "rules": [{"pattern": "x"}]}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(HaseError, match="corrupt"):
        FusionRules.load(tmp_path / "broken.json")


def test_agreement_check_fails_when_lists_disagree(taught: tuple[Path, ModelAnalysis, FusionRules]) -> None:
    source, analysis, rules = taught
    derived = detect_kernels(source, rules).kernels
    passed, report = agreement_check([compare_kernels("block", analysis.kernels, derived)])
    assert passed and report["disagreements"] == {}
    # One kernel with another family, one with another shape: both are disagreements.
    changed = [dataclasses.replace(derived[0], family="Other")] + derived[1:]
    changed[-1] = dataclasses.replace(
        changed[-1], outputs=[dataclasses.replace(changed[-1].outputs[0], shape=(2, 8, 1, 1))]
    )
    passed, report = agreement_check([compare_kernels("block", analysis.kernels, changed)])
    assert not passed
    assert len(report["disagreements"]["block"]["only_derived"]) == 2


def test_fusion_rules_asset_checks_every_variant(
    taught: tuple[Path, ModelAnalysis, FusionRules], tmp_path: Path
) -> None:
    """The asset learns from the catalog and its check compares the lists; a catalog edited to
    disagree with what its rules give back (a kernel with other shapes) fails the check."""
    import dagster as dg
    import pandas as pd

    from assets.static_detection import fusion_rules
    from resources.hase import HaseResource

    source, analysis, _ = taught
    hase = HaseResource(data_directory=str(tmp_path / "data"), profile_name="cpu")
    row = {
        "model_name": "block",
        "input_size": 16,
        "batch_size": 1,
        "path": str(source),
        "size_bytes": source.stat().st_size,
        "opset": 17,
        "inputs_json": "{}",
        "outputs_json": "{}",
        "run_id": "test",
        "created_at": pd.Timestamp("2026-11-23"),
    }
    frame = pd.DataFrame([{"variant_id": "block", **row}])
    hase.warehouse().replace_partition("model_files", {"batch_size": 1}, frame)
    catalog = hase.paths().catalogs("cpu") / "block.json"
    catalog.parent.mkdir(parents=True)
    document = analysis.catalog()
    catalog.write_text(json.dumps(document, default=str))

    def check() -> bool:
        result = dg.materialize([fusion_rules], resources={"hase": hase})
        (evaluation,) = result.get_asset_check_evaluations()
        return evaluation.passed

    assert check()
    assert (tmp_path / "data" / "fusion_rules" / f"cpu-ort{onnxruntime.__version__}.fusion_rules.json").exists()
    # Two variants, one of which disagrees with the other about the same graph: no rule set can
    # reproduce both, so the check must fail.
    document["kernels"][-1]["outputs"][0]["shape"] = [1, 8, 2, 2]
    other = hase.paths().catalogs("cpu") / "block2.json"
    other.write_text(json.dumps({**document, "variant_id": "block2"}, default=str))
    frame = pd.DataFrame([{"variant_id": v, **row} for v in ("block", "block2")])
    hase.warehouse().replace_partition("model_files", {"batch_size": 1}, frame)
    assert not check()


def _channels_last_pool(path: Path, transpose_after: bool) -> Path:
    """Relu on NHWC, Transpose to NCHW, same-padding Pad, MaxPool (NesT's pooling between channels-last blocks),
    then a Transpose back to NHWC when ``transpose_after``. Three channels: no NCHWc pool on the CPU EP."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["t"], name="to_nchw", perm=[0, 3, 1, 2]),
        helper.make_node("Pad", ["t", "pads", "fill"], ["p"], name="pad", mode="constant"),
        helper.make_node("MaxPool", ["p"], ["m"], name="pool", kernel_shape=[3, 3], strides=[2, 2]),
    ]
    if transpose_after:
        nodes.append(helper.make_node("Transpose", ["m"], ["y"], name="to_nhwc", perm=[0, 2, 3, 1]))
    else:
        nodes.append(helper.make_node("Relu", ["m"], ["y"], name="relu_after"))
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 8, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], dtype=np.int64), "pads"),
            numpy_helper.from_array(np.array(-np.inf, dtype=np.float32), "fill"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _pad_input_shape(kernels: list) -> tuple[int, ...]:
    [pad] = [k for k in kernels if k.op_type == "Pad"]
    return tuple(pad.inputs[0].shape)


def test_a_pad_between_transposes_around_a_max_pool_runs_in_the_first_transposes_input_layout(
    tmp_path: Path,
) -> None:
    # rules learned where ORT leaves the Pad on the NCHW tensor; then the chain with a Transpose after the pool,
    # where ORT's transpose optimizer moves the first Transpose below the Pad: the static list must follow
    kept = _channels_last_pool(tmp_path / "kept.onnx", transpose_after=False)
    kept_analysis = analyze_model(kept, "cpu", tmp_path / "kept.opt.onnx")
    assert _pad_input_shape(kept_analysis.kernels) == (2, 3, 8, 8)
    rules = learn_rules([(onnx.load(str(kept)), kept_analysis.kernels)], "cpu", onnxruntime.__version__, "test CPU")
    assert _pad_input_shape(detect_kernels(kept, rules).kernels) == (2, 3, 8, 8)

    moved = _channels_last_pool(tmp_path / "moved.onnx", transpose_after=True)
    ort_kernels = analyze_model(moved, "cpu", tmp_path / "moved.opt.onnx").kernels
    static = detect_kernels(moved, rules).kernels
    assert _pad_input_shape(ort_kernels) == _pad_input_shape(static) == (2, 8, 8, 3)
    assert [k.op_type for k in static] == [k.op_type for k in ort_kernels] == [
        "Relu", "Pad", "Transpose", "MaxPool", "Transpose",
    ]  # fmt: skip
    [pad] = [k for k in static if k.op_type == "Pad"]
    [transpose] = [k for k in static if k.node_name == "to_nchw"]
    assert tuple(pad.outputs[0].shape) == (2, 9, 9, 3) and transpose.inputs[0].name == pad.outputs[0].name
    assert tuple(transpose.outputs[0].shape) == (2, 3, 9, 9)


def test_a_transpose_of_a_weight_before_a_pad_is_left_as_it_is() -> None:
    from hase_dagster.analysis.catalog import Kernel
    from hase_dagster.analysis.graph import TensorInfo
    from hase_dagster.analysis.static_detect import pads_before_transposes

    def kernel(order: int, op: str, inputs: list[TensorInfo], output: TensorInfo, weights: list[str]) -> Kernel:
        attributes = {"perm": [0, 3, 1, 2]} if op == "Transpose" else {}
        return Kernel("v", "cuda", order, f"n{order}", op, op, "", [op], [op], attributes, inputs, [output], weights)

    weight = TensorInfo("w", "float", (1, 4, 4, 3))
    chain = [
        kernel(0, "Transpose", [weight], TensorInfo("t", "float", (1, 3, 4, 4)), ["w"]),
        kernel(1, "Pad", [TensorInfo("t", "float", (1, 3, 4, 4))], TensorInfo("p", "float", (1, 3, 5, 5)), []),
        kernel(2, "MaxPool", [TensorInfo("p", "float", (1, 3, 5, 5))], TensorInfo("m", "float", (1, 3, 2, 2)), []),
        kernel(3, "Transpose", [TensorInfo("m", "float", (1, 3, 2, 2))], TensorInfo("y", "float", (1, 2, 2, 3)), []),
    ]
    assert pads_before_transposes(chain) == chain
    chain[0] = kernel(0, "Transpose", [weight], TensorInfo("t", "float", (1, 3, 4, 4)), [])  # now an activation
    moved = pads_before_transposes(chain)
    assert [k.op_type for k in moved] == ["Pad", "Transpose", "MaxPool", "Transpose"]
    assert moved[0].outputs[0].shape == (1, 5, 5, 3) and moved[1].outputs[0].name == "p"


def test_a_mask_built_from_the_batch_shape_is_not_evaluated_and_its_kernels_keep_their_shapes(tmp_path: Path) -> None:
    """MViTv2's exports build masks from the input's shape (Shape -> ConstantOfShape -> Where): evaluated as
    constants they grow with the batch (24 GB at batch 64). Static detection keeps their inferred shapes without
    building them: the 16.8-million-element mask here would take 67 MB."""
    import tracemalloc

    batch, side = 64, 512
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
        ),
        helper.make_node("Mul", ["x", "ones"], ["y"]),
        helper.make_node("NonZero", ["x"], ["where"]),  # a shape inference leaves unknown: the fold pass runs
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "mask",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, side, side])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, side, side]),
            helper.make_tensor_value_info("where", TensorProto.INT64, None),
        ],
    )
    path = tmp_path / "mask.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    rules = FusionRules(ep="cuda", ort_version=onnxruntime.__version__, device="test", rules=[])
    tracemalloc.start()
    try:
        kernels = detect_kernels(path, rules).kernels
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20e6
    [mul] = [k for k in kernels if k.op_type == "Mul"]
    assert tuple(mul.inputs[1].shape) == (batch, side, side)


def _rule(ops: list[str], family: str) -> dict:
    pattern = [{"domain": "", "inputs": [["ext", 0]], "internal": [False], "n_outputs": 1, "op": op} for op in ops]
    return {"pattern": pattern, "family": family, "kernel": None, "conditions": {}, "precision": 1.0, "positives": 1}


def test_extending_rules_adds_only_the_fusions_the_base_has_no_pattern_for() -> None:
    base = FusionRules("cuda", "1.31.1", "H100", [_rule(["Conv", "Relu"], "Conv_Relu")], {"variants": ["zoo"]})
    extra = FusionRules(
        "cuda",
        "1.31.1",
        "H200",
        [_rule(["Conv", "Relu"], "Other"), _rule(["Pow", "ReduceMean"], "Pow_ReduceMean"), _rule(["Einsum"], "Einsum")],
        {"variants": ["hand"], "learned_at": "now"},
    )
    out = extended(base, extra, "hand_ops_set")
    assert [(r["id"], r["family"]) for r in out.rules[1:]] == [(1, "Pow_ReduceMean")]
    assert out.rules[0]["family"] == "Conv_Relu"  # the base's rule for a pattern both have
    assert out.provenance["variants"] == ["zoo"]
    assert out.provenance["extensions"] == [
        {"source": "hand_ops_set", "learned_at": "now", "families": ["Pow_ReduceMean"], "variants": ["hand"]}
    ]
    with pytest.raises(HaseError, match="cannot extend cuda rules of ORT 1.31.1 with cpu"):
        extended(base, dataclasses.replace(extra, ep="cpu"), "x")


def test_a_constant_if_is_folded_through_its_taken_branch(tmp_path: Path) -> None:
    """timm's Hiera tiles its window position embedding under ``If(Size(...) < k)``: the branch reshapes a weight
    too large for the fold pass to keep as a value. ORT folds it before running; static detection takes the branch
    the known condition picks and infers its shapes, so the Add after it keeps (1, 8, 8, 4), not unknown dims."""
    window = numpy_helper.from_array(np.ones((1, 4, 8, 8), dtype=np.float32), "window")  # 256 values: a weight
    flat = numpy_helper.from_array(np.array([1, 4, 8, 8], dtype=np.int64), "flat")
    then_branch = helper.make_graph(
        [helper.make_node("Reshape", ["window", "flat"], ["taken"])],
        "then",
        [],
        [helper.make_tensor_value_info("taken", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["other"])],
        "else",
        [],
        [helper.make_tensor_value_info("other", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Size", ["x"], ["size"]),
        helper.make_node("Less", ["size", "limit"], ["small"]),
        helper.make_node("If", ["small"], ["embedding"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Transpose", ["embedding"], ["channels_last"], perm=[0, 2, 3, 1]),
        helper.make_node("Add", ["x", "channels_last"], ["y"]),
    ]
    limit = numpy_helper.from_array(np.array(10**6, dtype=np.int64), "limit")
    graph = helper.make_graph(
        nodes,
        "hiera_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [window, flat, limit],
    )
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    rules = FusionRules(ep="cuda", ort_version=onnxruntime.__version__, device="test", rules=[])
    [add] = [k for k in detect_kernels(path, rules).kernels if k.op_type == "Add"]
    assert tuple(add.inputs[1].shape) == (1, 8, 8, 4) and tuple(add.outputs[0].shape) == (1, 8, 8, 4)
