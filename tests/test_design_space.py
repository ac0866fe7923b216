"""Design-space probes and adaptive kernel sampling: drawn from a seed, inside the caps, covering
the cell types, exportable, and chosen by the committee's disagreement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from pydantic import ValidationError

from hase_dagster.analysis.design_space import (
    CELL_TYPES,
    DILATIONS,
    GROUP_WIDTHS,
    HIGHRES_MAX_ACTIVATION_ELEMENTS,
    IMAGE_IO_OUT_CHANNELS,
    IMAGE_IO_RESOLUTIONS,
    MAX_ACTIVATION_ELEMENTS,
    MAX_CELL_MACS,
    NORM_CELLS,
    RECURRENT_SIDES,
    TOKENS_MAX_ACTIVATION_ELEMENTS,
    TOKENS_MAX_CELL_MACS,
    TOKENS_SIDES,
    TOKENS_WIDTHS,
    WIDE_GROUP_STAGE_WIDTHS,
    WIDE_GROUP_STRIDED_RESOLUTIONS,
    WIDE_GROUP_WIDTH_RANGE,
    ProbeSpec,
    draw_probe,
)
from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel
from hase_dagster.core.ort_runtime import make_session, random_inputs
from hase_dagster.learn import sampling
from hase_dagster.learn.sampling import CandidateScore, choose, kernel_spreads


def test_a_seed_always_draws_the_same_probe_and_seeds_differ() -> None:
    assert draw_probe(11) == draw_probe(11)
    assert len({draw_probe(seed) for seed in range(50)}) == 50


def test_two_hundred_probes_cover_the_cells_within_the_caps() -> None:
    probes = [draw_probe(seed) for seed in range(200)]
    assert {p.cell for p in probes} == set(CELL_TYPES)
    convs = [p for p in probes if p.cell == "conv"]
    assert {p.kernel for p in convs} == {1, 3, 5, 7}
    assert any(p.groups == p.width > 1 for p in convs) and any(1 < p.groups < p.width for p in convs)
    assert {p.activation for p in probes} >= {"none", "relu", "silu", "gelu", "hardswish", "sigmoid"}
    assert min(p.width for p in probes) <= 24 and max(p.width for p in probes) >= 640
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    assert all(p.resolution**2 <= 784 for p in probes if p.cell in ("attention", "mlp"))


@pytest.mark.parametrize("cell", ["conv", "inverted_residual", "concat", "convnext", "attention", "mlp", "pool"])
def test_a_probe_of_every_cell_exports_and_runs_in_ort(cell: str, tmp_path: Path) -> None:
    seed = next(s for s in range(100) if draw_probe(s).cell == cell)
    model = ZooModel(name=f"dsp_s{seed}", kind="design_probe", seed=seed)
    exported = export_variant(ModelVariant(model, 224, 2), tmp_path, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()


def test_the_grouped_space_draws_grouped_convolutions_by_channels_per_group() -> None:
    probes = [draw_probe(seed, "grouped_conv") for seed in range(300)]
    assert all(p.cell == "conv" and 2 <= p.groups < p.width == p.out_width for p in probes)
    assert {p.width // p.groups for p in probes} == set(GROUP_WIDTHS)
    assert all(p.width % p.groups == 0 for p in probes)
    # narrow groups at the widths of RegNet's stages (8 channels in dozens of groups), which the cells
    # space, drawing 2-32 groups, almost never makes
    assert any(p.width // p.groups == 8 and p.groups >= 24 for p in probes)
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    # the cells space is unchanged by the new one: seeds drawn before keep their probes
    assert draw_probe(5114) == draw_probe(5114, "cells") != draw_probe(5114, "grouped_conv")
    with pytest.raises(ValueError, match="probe space 'dense'"):
        draw_probe(1, "dense")


def test_the_wide_grouped_space_draws_few_wide_groups_at_regnet_stage_widths() -> None:
    probes = [draw_probe(seed, "wide_grouped") for seed in range(300)]
    assert all(p.cell == "conv" and 2 <= p.groups < p.width == p.out_width for p in probes)
    group_widths = [p.width // p.groups for p in probes]
    low, high = WIDE_GROUP_WIDTH_RANGE
    # past the grouped_conv space's widest groups, across the whole range: x_16gf's 128 and y_32gf's 232 inside
    assert min(group_widths) > max(GROUP_WIDTHS) and low <= min(group_widths) < 100 and 280 < max(group_widths) <= high
    assert sum(100 <= w <= 140 for w in group_widths) >= 20 and sum(200 <= w <= 280 for w in group_widths) >= 20
    assert {p.resolution for p in probes} == set(WIDE_GROUP_STAGE_WIDTHS)
    # the widths a RegNet stage has at that map size (a group's width rounds the stage width by up to half)
    for p in probes:
        narrow, wide = WIDE_GROUP_STAGE_WIDTHS[p.resolution]
        assert narrow - p.width // p.groups <= p.width <= wide + p.width // p.groups or p.groups == 2
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    # the grouped_conv space is unchanged by the new one: its probes in hase.yaml keep their shapes
    assert draw_probe(7009, "grouped_conv") != draw_probe(7009, "wide_grouped")
    assert max(p.width // p.groups for p in (draw_probe(s, "grouped_conv") for s in range(100))) == 64


def test_the_strided_wide_grouped_space_draws_the_convolutions_that_open_a_regnet_stage() -> None:
    probes = [draw_probe(seed, "wide_grouped_strided") for seed in range(300)]
    assert all(p.cell == "conv" and p.stride == 2 and p.kernel == 3 and 2 <= p.groups < p.width for p in probes)
    assert {p.resolution for p in probes} == {112, 56, 28, 14} == set(WIDE_GROUP_STRIDED_RESOLUTIONS)
    low, high = WIDE_GROUP_WIDTH_RANGE
    assert all(low <= p.width // p.groups <= high for p in probes)
    # regnet_x_16gf's first stage (2 x 128 channels, 112 -> 56 px) is inside: past the cells' activation cap
    first_stage = [p for p in probes if p.resolution == 112 and 100 <= p.width // p.groups <= 160]
    assert first_stage and max(p.widest_activation() for p in first_stage) > MAX_ACTIVATION_ELEMENTS
    assert all(p.widest_activation() <= HIGHRES_MAX_ACTIVATION_ELEMENTS for p in probes)
    assert all(p.cell_macs() <= MAX_CELL_MACS for p in probes)
    # the stride-1 space keeps its draws: its probes in hase.yaml were measured (runs/h100-wide-groups)
    assert draw_probe(9000, "wide_grouped") == ProbeSpec(9000, "conv", 14, 1408, 1408, 3, 1, 16, residual=True)


def test_the_depthwise_space_draws_depthwise_kernels_of_5_and_7_at_large_maps() -> None:
    probes = [draw_probe(seed, "depthwise") for seed in range(300)]
    depthwise = [
        p for p in probes if p.cell == "inverted_residual" or (p.cell == "conv" and p.groups == p.width == p.out_width)
    ]
    grouped = [p for p in probes if p.cell == "conv" and 1 < p.groups < p.width]
    assert len(depthwise) + len(grouped) == len(probes) and grouped
    # what the cells space rarely draws: depthwise kernels of 5 and 7 on maps of 56 px and more
    assert sum(p.kernel >= 5 and p.resolution >= 56 for p in depthwise) >= 20
    # width-changing grouped convolutions whose groups divide both widths
    assert any(p.out_width != p.width for p in grouped)
    assert all(p.width % p.groups == 0 and p.out_width % p.groups == 0 for p in grouped)
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    assert draw_probe(8001, "depthwise") == draw_probe(8001, "depthwise") != draw_probe(8001)


def _exported_convolutions(model: ZooModel, folder: Path) -> list[dict[str, Any]]:
    """Exports ``model`` at 224 px, batch 2, checks that ORT runs it to finite logits, and returns each
    Conv node's attributes (lists for repeated ones)."""
    exported = export_variant(ModelVariant(model, 224, 2), folder, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    return [
        {a.name: (list(a.ints) or a.i) for a in n.attribute}
        for n in onnx.load(exported.path).graph.node
        if n.op_type == "Conv"
    ]


def test_a_depthwise_space_probe_exports_with_its_depthwise_kernel(tmp_path: Path) -> None:
    seed = next(
        s for s in range(100) if (p := draw_probe(s, "depthwise")).cell == "inverted_residual" and p.kernel == 7
    )
    convs = _exported_convolutions(
        ZooModel(name="w", kind="design_probe", seed=seed, probe_space="depthwise"), tmp_path
    )
    assert any(c.get("kernel_shape") == [7, 7] and c.get("group", 1) > 1 for c in convs)


def test_a_grouped_space_probe_exports_and_runs_in_ort(tmp_path: Path) -> None:
    seed = next(s for s in range(100) if draw_probe(s, "grouped_conv").groups >= 16)
    convs = _exported_convolutions(
        ZooModel(name="g", kind="design_probe", seed=seed, probe_space="grouped_conv"), tmp_path
    )
    assert draw_probe(seed, "grouped_conv").groups in [c.get("group", 1) for c in convs]
    with pytest.raises(ValidationError, match="probe_space is a design_probe's option"):
        ZooModel(name="r", kind="random_nas", seed=1, probe_space="grouped_conv")


def test_a_probe_is_always_trained_on_never_held_out() -> None:
    assert ZooModel(name="p", kind="design_probe", seed=1).family_name == "design_space"
    with pytest.raises(ValidationError, match="never a test case"):
        ZooModel(name="p", kind="design_probe", seed=1, held_out=True)


def test_choose_takes_the_most_uncertain_new_kernels_first() -> None:
    candidates = [
        CandidateScore("a", {"k1": 0.5, "k2": 0.4}),  # mean 0.45: first
        CandidateScore("b", {"k1": 0.5, "k2": 0.4, "k3": 0.05}),  # mean 0.32, the most in sum; after a: 0.05
        CandidateScore("c", {"k4": 0.3}),  # 0.3: second
        CandidateScore("d", {"k5": 0.01}),
    ]
    assert choose(candidates, 2, explore_share=0.0) == ["a", "c"]
    assert choose(candidates, 3, explore_share=0.0) == ["a", "c", "b"]
    # a random quarter: the greedy picks first, then one of the others, never twice the same
    picked = choose(candidates, 4, explore_share=0.25, seed=3)
    assert picked[:3] == ["a", "c", "b"] and sorted(picked) == ["a", "b", "c", "d"]
    assert len(choose(candidates, 10)) == 4
    with pytest.raises(ValueError, match="explore_share"):
        choose(candidates, 2, explore_share=1.5)


class _Member:
    """A committee member that predicts a fixed factor times each kernel's FLOPs."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def predict_kernels(self, records: list[dict[str, Any]], loads: list[dict[str, float]]) -> list[dict[str, Any]]:
        return [{"median_ms": np.array([self.factor * r["flops"] for r in records])} for _ in loads]


class _Kernel:
    def __init__(self, name: str, flops: float) -> None:
        self.instance_id, self.flops = name, flops

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops}


def test_kernel_spreads_are_the_committees_log_disagreement() -> None:
    kernels = [_Kernel("x", 1.0), _Kernel("y", 4.0)]
    agree = kernel_spreads([_Member(2.0), _Member(2.0)], kernels, [{}])  # type: ignore[list-item]
    assert agree == {"x": 0.0, "y": 0.0}
    apart = kernel_spreads([_Member(1.0), _Member(np.e**2)], kernels, [{}, {}])  # type: ignore[list-item]
    assert apart == pytest.approx({"x": 1.0, "y": 1.0})  # log predictions 2 apart: std 1
    assert kernel_spreads([_Member(1.0)], kernels, [{}]) == {}  # type: ignore[list-item]


def test_each_committee_member_trains_without_one_family(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[set[str]] = []
    monkeypatch.setattr(
        sampling, "train_regressor", lambda rows, ep, kind: seen.append(set(rows["instance_id"])) or len(seen)
    )
    rows = pd.DataFrame(
        {
            "instance_id": ["i1", "i2", "i3", "i4"],
            "architecture": ["resnet18", "mobilenet_v2", "resnet18,nas_1", "nas_1"],
        }
    )
    families = {"resnet18": "residual_cnn", "mobilenet_v2": "mobile", "nas_1": "random_nas"}
    members = sampling.committee(rows, "cuda", families)
    assert len(members) == 3
    # mobile out; random_nas out (i3 is shared with a residual network: left out too); residual out
    assert seen == [{"i1", "i3", "i4"}, {"i1", "i2"}, {"i2", "i4"}]


def test_a_partition_of_probes_alone_times_their_kernels_and_no_whole_model(tmp_path: Path) -> None:
    """A kernel-sampling round (a profile of probes only, time_design_probes off) materializes: the
    probes' kernels are timed and model_benchmarks says it timed none, rather than failing the run."""
    import dagster as dg

    from assets.measurement import measurement_assets
    from resources.stressor import StressorResource
    from tests.conftest import analysed_profile

    hase, instance, analysis = analysed_profile(tmp_path, [{"name": "dsp_s12", "kind": "design_probe", "seed": 12}])
    assert analysis.success
    resources = {"hase": hase, "stressor": StressorResource()}
    key = dg.MultiPartitionKey({"stress_level": "0.00", "batch_size": "1"})
    result = dg.materialize(measurement_assets, partition_key=key, resources=resources, instance=instance)
    assert result.success
    metadata = result.asset_materializations_for_node("model_benchmarks")[0].metadata
    assert metadata["models"].value == 0 and metadata["design_probes_not_timed"].value == 1
    store = hase.warehouse()
    assert store.query("SELECT count(*) AS n FROM kernel_benchmarks WHERE status = 'ok'")["n"][0] > 0
    assert store.query("SELECT count(*) AS n FROM model_benchmarks")["n"][0] == 0


def test_the_movement_space_draws_windowed_attentions_data_movement(tmp_path: Path) -> None:
    probes = [draw_probe(seed, "movement") for seed in range(300)]
    assert {p.cell for p in probes} == {"movement"}
    # both layouts, with and without the merge, the roll and the normalisation, within the caps
    assert {(p.stride, p.residual) for p in probes} == {(1, False), (1, True), (2, False), (2, True)}
    assert any(p.groups == 0 for p in probes) and any(p.groups > 0 for p in probes)
    assert any(p.se for p in probes) and not all(p.se for p in probes)
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    assert draw_probe(9600, "movement") == draw_probe(9600, "movement") != draw_probe(9600)
    seed = next(s for s in range(100) if (p := draw_probe(s, "movement")).stride == 2 and p.se and p.groups)
    exported = export_variant(
        ModelVariant(ZooModel(name="m", kind="design_probe", seed=seed, probe_space="movement"), 224, 2), tmp_path, 17
    )
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    ops = {n.op_type for n in onnx.load(exported.path).graph.node}
    assert {"Pad", "Slice", "Concat", "ReduceL2", "Div"} <= ops


def test_the_highres_space_draws_dense_convolutions_on_vgg_sized_maps(tmp_path: Path) -> None:
    probes = [draw_probe(seed, "highres") for seed in range(300)]
    assert {p.resolution for p in probes} == {112, 224} and all(p.groups == 1 for p in probes)
    # what no table or other space has: dense 3x3 kernels of 64 channels and more on 224 px maps (VGG's first
    # block), past the other spaces' activation cap
    vgg_like = [p for p in probes if p.resolution == 224 and p.kernel == 3 and p.width >= 64]
    assert vgg_like and max(p.widest_activation() for p in vgg_like) > MAX_ACTIVATION_ELEMENTS
    assert all(p.cell_macs() <= MAX_CELL_MACS for p in probes)
    seed = next(s for s in range(100) if (p := draw_probe(s, "highres")).resolution == 224 and p.kernel == 3)
    convs = _exported_convolutions(ZooModel(name="h", kind="design_probe", seed=seed, probe_space="highres"), tmp_path)
    assert any(c.get("kernel_shape") == [3, 3] and c.get("group", 1) == 1 for c in convs)


def test_the_windows_space_keeps_swins_pad_channels_last_through_orts_optimizer(tmp_path: Path) -> None:
    probes = [draw_probe(seed, "windows") for seed in range(300)]
    assert {p.cell for p in probes} == {"windows"} and all(p.width % p.heads == 0 for p in probes)
    # pads of 0 (the window divides the map, as in Swin v1 at 224 px) and more, shifted windows and not
    assert {p.padded_resolution > p.resolution for p in probes} == {False, True}
    assert any(p.groups == 0 for p in probes) and any(p.groups > 0 for p in probes)
    assert all(p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    seed = next(s for s in range(100) if (p := draw_probe(s, "windows")).padded_resolution > p.resolution and p.se)
    exported = export_variant(
        ModelVariant(ZooModel(name="w", kind="design_probe", seed=seed, probe_space="windows"), 224, 2), tmp_path, 17
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(str(exported.path), options, providers=["CPUExecutionProvider"])
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    # after ORT's optimizer the pad still reads the channels-last LayerNorm's output (a movement probe's pad is
    # moved back to channels-first by the layout optimizer)
    graph = onnx.load(tmp_path / "optimized.onnx").graph
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    pads = [node for node in graph.node if node.op_type == "Pad"]
    assert pads and all(made_by.get(node.input[0]) == "LayerNormalization" for node in pads)


# The ONNX operator each operators-space cell (and variant) is for: what no other space exports.
OPERATOR_OPS = {
    ("upsample", "transpose"): "ConvTranspose",
    ("upsample", "nearest"): "Resize",
    ("upsample", "bilinear"): "Resize",
    ("upsample", "pixel_shuffle"): "DepthToSpace",
    ("norm", "group"): "InstanceNormalization",  # torch writes GroupNorm as a reshaped instance norm
    ("norm", "instance"): "InstanceNormalization",
    ("recurrent", "lstm"): "LSTM",
    ("recurrent", "gru"): "GRU",
    ("pad", "reflect"): "Pad",
    ("pad", "replicate"): "Pad",
    ("reduce", "spatial"): "ReduceMax",
    ("reduce", "channel"): "ReduceMax",
}


def test_the_operators_space_draws_every_cell_and_variant_within_the_caps() -> None:
    probes = [draw_probe(seed, "operators") for seed in range(400)]
    drawn = {(p.cell, p.mode) for p in probes}
    assert set(OPERATOR_OPS) | {("dilated", ""), ("conv1d", ""), ("conv3d", "")} == drawn
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    assert {p.dilation for p in probes if p.cell == "dilated"} == set(DILATIONS)
    assert draw_probe(9900, "operators") == draw_probe(9900, "operators") != draw_probe(9900)


@pytest.mark.parametrize(("cell", "mode"), sorted({*OPERATOR_OPS, ("dilated", ""), ("conv1d", ""), ("conv3d", "")}))
def test_an_operators_probe_exports_the_operator_it_is_for_and_runs_in_ort(
    cell: str, mode: str, tmp_path: Path
) -> None:
    seed = next(s for s in range(400) if (p := draw_probe(s, "operators")).cell == cell and p.mode == mode)
    model = ZooModel(name="o", kind="design_probe", seed=seed, probe_space="operators")
    exported = export_variant(ModelVariant(model, 224, 2), tmp_path, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    nodes = onnx.load(exported.path).graph.node
    convs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes if n.op_type == "Conv"]
    if cell in ("dilated", "conv1d", "conv3d"):
        rank = {"dilated": 2, "conv1d": 1, "conv3d": 3}[cell]
        # the convolution of its kind: 1-D or 3-D kernels, or a 3x3 one with the drawn dilation
        assert any(len(c["kernel_shape"]) == rank for c in convs)
        if cell == "dilated":
            assert any(c.get("dilations") == [p.dilation, p.dilation] for c in convs)
    else:
        assert OPERATOR_OPS[cell, mode] in {n.op_type for n in nodes}


def test_the_recurrent_space_draws_lstm_and_gru_layers_over_its_ranges_within_the_caps() -> None:
    probes = [draw_probe(seed, "recurrent") for seed in range(300)]
    assert {p.cell for p in probes} == {"recurrent"} and {p.mode for p in probes} == {"lstm", "gru"}
    assert {p.resolution for p in probes} == set(RECURRENT_SIDES)  # 9 to 1024 steps
    assert {p.heads for p in probes} == {1, 2, 3} and {p.se for p in probes} == {True, False}
    assert min(p.out_width for p in probes) < 128 and max(p.out_width for p in probes) > 512
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)


def test_a_recurrent_probe_exports_its_layers_and_runs_in_ort(tmp_path: Path) -> None:
    seed = next(s for s in range(300) if (p := draw_probe(s, "recurrent")).heads == 2 and p.se)
    model = ZooModel(name="r", kind="design_probe", seed=seed, probe_space="recurrent")
    exported = export_variant(ModelVariant(model, 224, 2), tmp_path, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    layers = [n for n in onnx.load(exported.path).graph.node if n.op_type == p.mode.upper()]
    assert len(layers) == 2  # one node a layer, both directions in each
    assert all(
        onnx.helper.get_attribute_value(a) == b"bidirectional"
        for n in layers
        for a in n.attribute
        if a.name == "direction"
    )


def test_the_image_io_space_draws_stems_upsamples_and_narrow_outputs_within_the_caps() -> None:
    probes = [draw_probe(seed, "image_io") for seed in range(300)]
    assert {p.cell for p in probes} == {"image_io"}
    assert {p.mode for p in probes} == {"none", "pixel_shuffle", "nearest", "bilinear", "transpose"}
    assert {p.resolution for p in probes} == set(IMAGE_IO_RESOLUTIONS)
    assert {p.out_width for p in probes} == set(IMAGE_IO_OUT_CHANNELS)
    assert {p.stem_kernel for p in probes} == {3, 5, 7, 9} and {p.out_activation for p in probes} == {
        "tanh", "sigmoid", "none"
    }  # fmt: skip
    assert all(p.kernel == 4 for p in probes if p.mode == "transpose")
    assert all(
        p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= HIGHRES_MAX_ACTIVATION_ELEMENTS for p in probes
    )
    # 2x upsampled maps of 448 px are drawn, and the cap holds them to narrow widths
    assert any(p.resolution == 224 and p.mode != "none" for p in probes)
    assert draw_probe(10000, "image_io") == draw_probe(10000, "image_io") != draw_probe(10000, "operators")


def _probe_graph(seed: int, space: str, batch: int, tmp_path: Path) -> tuple[Any, dict[str, list[int]]]:
    """The probe of ``seed`` in ``space`` exported at ``batch``, run once in ORT (its logits finite), and its
    graph with every inferred tensor shape by name."""
    model = ZooModel(name="p", kind="design_probe", seed=seed, probe_space=space)
    exported = export_variant(ModelVariant(model, 224, batch), tmp_path, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (batch, 1000) and np.isfinite(output).all()
    graph = onnx.shape_inference.infer_shapes(onnx.load(exported.path)).graph
    return graph, {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.value_info}


@pytest.mark.parametrize("mode", ["none", "pixel_shuffle", "bilinear", "transpose"])
def test_an_image_io_probe_runs_its_stem_and_narrow_output_at_full_resolution_in_ort(mode: str, tmp_path: Path) -> None:
    seed = next(s for s in range(300) if (p := draw_probe(s, "image_io")).mode == mode and p.resolution < 224)
    graph, shapes = _probe_graph(seed, "image_io", 1, tmp_path)
    convs = [n for n in graph.node if n.op_type in ("Conv", "ConvTranspose")]
    stem, out = convs[0], convs[-1]
    kernel = {a.name: onnx.helper.get_attribute_value(a) for a in stem.attribute}["kernel_shape"]
    # the stem: from 3 channels at the drawn resolution, stride 1, the drawn kernel
    assert shapes[stem.output[0]] == [1, p.width, p.resolution, p.resolution] and kernel == [p.stem_kernel] * 2
    side = p.resolution * (1 if mode == "none" else 2)
    assert shapes[out.output[0]] == [1, p.out_width, side, side]
    assert out.op_type == ("ConvTranspose" if mode == "transpose" else "Conv")


def test_the_tokens_space_draws_vision_and_text_sequences_within_the_caps() -> None:
    probes = [draw_probe(seed, "tokens") for seed in range(400)]
    assert {p.cell for p in probes} == {"tokens"} and {p.mode for p in probes} == {"vision", "text"}
    assert {p.width for p in probes} == set(TOKENS_WIDTHS) and {p.depth for p in probes} == {1, 2}
    vision = [p for p in probes if p.mode == "vision"]
    assert all(p.tokens == p.resolution**2 for p in vision) and {p.resolution for p in vision} == set(TOKENS_SIDES)
    # ViT's class token: 197 = 14 x 14 + 1 tokens at 224 px over patches of 16
    assert any(p.sequence_length == 197 for p in vision) and any(not p.se for p in vision)
    text = [p for p in probes if p.mode == "text"]
    # text lengths off the square grid, from 16 up to 1024, each on the smallest grid that holds it
    assert min(p.tokens for p in text) <= 20 and max(p.tokens for p in text) >= 700
    assert any(p.tokens not in {s * s for s in TOKENS_SIDES} for p in text)
    assert all(p.resolution == min(s for s in TOKENS_SIDES if s * s >= p.tokens) for p in text)
    assert all(p.width % p.heads == 0 and p.width // p.heads in (32, 64) for p in probes)
    assert all(
        p.cell_macs() <= TOKENS_MAX_CELL_MACS and p.widest_activation() <= TOKENS_MAX_ACTIVATION_ELEMENTS
        for p in probes
    )
    assert draw_probe(11000, "tokens") == draw_probe(11000, "tokens") != draw_probe(11000, "cells")


@pytest.mark.parametrize("mode", ["vision", "text"])
def test_a_tokens_probe_runs_its_encoder_over_the_drawn_sequence_in_ort(mode: str, tmp_path: Path) -> None:
    seed = next(
        s for s in range(11000, 11400)
        if (p := draw_probe(s, "tokens")).mode == mode and p.se and p.width <= 384 and p.depth == 1
    )  # fmt: skip
    graph, shapes = _probe_graph(seed, "tokens", 2, tmp_path)
    # the encoder's matrix products run over batch x (tokens + the class token) rows of the drawn width
    products = [shapes.get(n.input[0]) for n in graph.node if n.op_type == "MatMul"]
    assert [2, p.sequence_length, p.width] in products
    softmax = next(n for n in graph.node if n.op_type == "Softmax")
    assert shapes[softmax.output[0]][-2:] == [p.sequence_length, p.sequence_length]


def test_the_norms_space_draws_its_four_cells_within_the_caps() -> None:
    probes = [draw_probe(seed, "norms") for seed in range(300)]
    assert {p.cell for p in probes} == set(NORM_CELLS)
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    assert {p.groups > 1 for p in probes if p.cell == "bn_post"} == {True, False}  # depthwise and dense
    assert draw_probe(12000, "norms") == draw_probe(12000, "norms") != draw_probe(12000)


@pytest.mark.parametrize(
    ("cell", "op", "rank"),
    [("bn_tokens", "BatchNormalization", 2), ("bn_post", "BatchNormalization", 4), ("pool_sub", "Sub", 4),
     ("hard_gate", "HardSigmoid", 4)],
)  # fmt: skip
def test_a_norms_probe_exports_its_operator_over_the_rank_it_means_and_runs_in_ort(
    cell: str, op: str, rank: int, tmp_path: Path
) -> None:
    """The operator a norms cell is for, over an input of the rank the cell means (LeViT's BatchNorm over rows,
    ConvMixer's after an activation), in a file ORT runs."""
    seed = next(s for s in range(300) if draw_probe(s, "norms").cell == cell)
    model = ZooModel(name="n", kind="design_probe", seed=seed, probe_space="norms")
    exported = export_variant(ModelVariant(model, 224, 2), tmp_path, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    graph = onnx.shape_inference.infer_shapes(onnx.load(exported.path)).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in graph.value_info}
    assert rank in {ranks.get(n.input[0]) for n in graph.node if n.op_type == op}


def test_the_resize_space_draws_each_mode_over_maps_and_whole_images_within_the_caps(tmp_path: Path) -> None:
    probes = [draw_probe(seed, "resize") for seed in range(300)]
    assert {p.mode for p in probes} == {"bicubic", "bilinear", "nearest"}
    assert {p.width == 3 for p in probes if p.resolution == 224} == {True, False}  # whole images and maps
    assert {p.kernel > p.resolution for p in probes} == {True, False}  # up and down
    assert all(p.widest_activation() <= HIGHRES_MAX_ACTIVATION_ELEMENTS for p in probes)
    seed = next(s for s, p in enumerate(probes) if p.mode == "bicubic")
    model = ZooModel(name="r", kind="design_probe", seed=seed, probe_space="resize")
    exported = export_variant(ModelVariant(model, 224, 2), tmp_path, 17)
    session = make_session(exported.path, "cpu")
    (output,) = session.run(None, random_inputs(session))
    assert output.shape == (2, 1000) and np.isfinite(output).all()
    (resize,) = [n for n in onnx.load(exported.path).graph.node if n.op_type == "Resize"]
    assert {a.name: a.s for a in resize.attribute}["mode"] == b"cubic"


def test_the_heads_space_mixes_heads_innermost_or_normalises_over_tokens_within_the_caps(tmp_path: Path) -> None:
    """CaiT's talking heads: the attention maps permuted so the heads are the last axis, a Linear over them (a MatMul
    whose weight is heads x heads); CoaT's keys: a Softmax over the token axis of (batch, heads, tokens, dim)."""
    probes = [draw_probe(seed, "heads") for seed in range(200)]
    assert {p.mode for p in probes} == {"talking", "axis_softmax"}
    assert all(p.width % p.heads == 0 for p in probes)
    assert all(p.widest_activation() <= TOKENS_MAX_ACTIVATION_ELEMENTS for p in probes)
    for mode in ("talking", "axis_softmax"):
        seed = next(s for s, p in enumerate(probes) if p.mode == mode)
        spec = probes[seed]
        model = ZooModel(name="h", kind="design_probe", seed=seed, probe_space="heads")
        exported = export_variant(ModelVariant(model, 224, 2), tmp_path / mode, 17)
        session = make_session(exported.path, "cpu")
        (output,) = session.run(None, random_inputs(session))
        assert output.shape == (2, 1000) and np.isfinite(output).all()
        graph = onnx.load(exported.path).graph
        shapes = {i.name: list(i.dims) for i in graph.initializer}
        softmax_axes = {a.i for n in graph.node if n.op_type == "Softmax" for a in n.attribute if a.name == "axis"}
        if mode == "talking":  # the heads mixed by heads x heads weights
            assert [spec.heads, spec.heads] in shapes.values()
            assert softmax_axes == {-1} or softmax_axes == {3}
        else:
            assert softmax_axes == {2}


def test_the_branches_space_sums_branches_over_their_own_axis_within_the_caps(tmp_path: Path) -> None:
    """ResNeSt's split attention and SKNet's selective kernels sum (batch, radix, channels, H, W) over the radix (a
    ReduceSum of a rank-5 tensor over axis 1, twice a cell); MobileViTv2's linear attention sums keys over the tokens
    (a ReduceSum over the last axis of a rank-4 tensor). The kernels ResNeSt-14d spent a quarter of its time in on the
    H100, which no probe had before."""
    probes = [draw_probe(seed, "branches") for seed in range(200)]
    assert {p.mode for p in probes} == {"split_attention", "selective_kernel", "linear_attention"}
    assert {p.heads for p in probes} == {2, 3, 4} and {p.groups for p in probes} == {1, 2}
    assert all(p.width % (2 * p.groups) == 0 for p in probes)
    assert all(p.cell_macs() <= MAX_CELL_MACS and p.widest_activation() <= MAX_ACTIVATION_ELEMENTS for p in probes)
    for mode in ("split_attention", "selective_kernel", "linear_attention"):
        seed = next(s for s, p in enumerate(probes) if p.mode == mode)
        spec = probes[seed]
        inferred, shapes = _probe_graph(seed, "branches", 2, tmp_path / mode)
        ranks = {name: len(shape) for name, shape in shapes.items()}
        sums = [n for n in inferred.node if n.op_type == "ReduceSum"]
        assert len(sums) == (1 if mode == "linear_attention" else 2) * spec.depth
        if mode == "linear_attention":
            assert all(ranks[n.input[0]] == 4 for n in sums)
        else:  # the radix axis of (batch, radix, channels, H, W)
            assert all(ranks[n.input[0]] == 5 and ranks[n.output[0]] == 4 for n in sums)


def test_the_reductions_space_reduces_over_any_axes_of_either_layout(tmp_path: Path) -> None:
    """Every reduction op over channel, spatial and mixed axes of channels-first and channels-last maps, and
    ConvNeXtV2's global response norm (an L2 norm over the spatial axes of a channels-last map): exported, each
    Reduce node reduces the axes its mode names, of the layout it names."""
    probes = [draw_probe(seed, "reductions") for seed in range(300)]
    modes = {p.mode for p in probes}
    assert "grn" in modes and {m.split("/")[0] for m in modes - {"grn"}} == {"sum", "mean", "l2", "max"}
    assert {m.split("/")[1] for m in modes - {"grn"}} == {"first", "last"}
    cases = (("grn", "ReduceL2", [1, 2]), ("l2/last/1-2", "ReduceL2", [1, 2]), ("max/first/1", "ReduceMax", [1]))
    for mode, op, axes in cases:
        seed = next(s for s, p in enumerate(probes) if p.mode == mode)
        graph, _ = _probe_graph(seed, "reductions", 2, tmp_path / mode.replace("/", "_"))
        reduced = _reduced_axes(graph, op)
        assert reduced and all(r == axes for r in reduced)


def _reduced_axes(graph: Any, op: str) -> list[list[int]]:
    """The axes each ``op`` node of ``graph`` reduces (opset 17: ReduceSum takes them as an input, the other
    reductions as an attribute)."""
    values = {i.name: onnx.numpy_helper.to_array(i).reshape(-1) for i in graph.initializer}
    values |= {
        n.output[0]: onnx.numpy_helper.to_array(a.t).reshape(-1) for n in graph.node if n.op_type == "Constant"
        for a in n.attribute if a.name == "value"
    }  # fmt: skip
    return [
        [int(a) for a in values[n.input[1]]]
        if len(n.input) > 1
        else [list(a.ints) for a in n.attribute if a.name == "axes"][0]
        for n in graph.node
        if n.op_type == op
    ]


def test_the_reduce_grid_space_covers_every_reduction_in_18_seeds(tmp_path: Path) -> None:
    """Any 18 consecutive seeds draw each of the 36 (op, layout, axes) reductions once, two to a probe, in both grids
    (``reduce_grid_wide`` on maps 1-8 times a network stage's width at their side); a probe exports both, each Reduce
    node over the axes its mode names (ConvNeXtV2's ReduceL2 over a channels-first map's spatial axes among them)."""
    for start in (0, 19000):
        modes = [m for s in range(start, start + 18) for m in draw_probe(s, "reduce_grid").mode.split("+")]
        assert len(modes) == 36 and len(set(modes)) == 36
        assert {m.split("/")[0] for m in modes} == {"sum", "mean", "l2", "max"}
        wide = [draw_probe(s, "reduce_grid_wide") for s in range(start, start + 18)]
        assert [p.mode for p in wide] == [draw_probe(s, "reduce_grid").mode for s in range(start, start + 18)]
    stage_widths = {7: 512, 14: 256, 28: 128, 56: 64}  # a network stage's channels at each side
    wide = [draw_probe(s, "reduce_grid_wide") for s in range(200)]
    assert all(stage_widths[p.resolution] <= p.width <= min(2048, 8 * stage_widths[p.resolution]) for p in wide)
    assert max(p.width for p in wide if p.resolution == 7) == 2048 and min(p.width for p in wide) < 128
    seed = next(s for s in range(18) if "l2/first/2-3" in draw_probe(s, "reduce_grid").mode)
    probe = draw_probe(seed, "reduce_grid")
    graph, _ = _probe_graph(seed, "reduce_grid", 2, tmp_path)
    ops = {"sum": "ReduceSum", "mean": "ReduceMean", "l2": "ReduceL2", "max": "ReduceMax"}
    for mode in probe.mode.split("+"):
        op, layout, axes = mode.split("/")
        reduced = _reduced_axes(graph, ops[op])
        assert [int(a) for a in axes.split("-")] in reduced, (mode, reduced)


def test_the_narrow_convnext_space_normalises_rows_narrower_than_any_transformer(tmp_path: Path) -> None:
    """ConvNeXt blocks 16-96 channels wide: their LayerNorm normalises channels-last rows of that width (the
    transformer probes' rows are 64 or wider)."""
    probes = [draw_probe(seed, "narrow_convnext") for seed in range(200)]
    assert {p.cell for p in probes} == {"convnext"} and min(p.width for p in probes) == 16
    assert all(16 <= p.width <= 96 and p.width % 8 == 0 for p in probes)
    seed = next(s for s, p in enumerate(probes) if p.width < 64)
    graph, _ = _probe_graph(seed, "narrow_convnext", 2, tmp_path)
    scales = [list(i.dims) for i in graph.initializer if "norm.weight" in i.name]
    assert scales and all(dims == [probes[seed].width] for dims in scales)


@pytest.mark.parametrize("mode", ["mlp", "grouped", "dense", "grouped16"])
def test_a_prenorm_probe_runs_convolutions_without_a_bias_in_ort(mode: str, tmp_path: Path) -> None:
    """The prenorm space's cells: mlp, grouped and dense convolutions with no bias input (a norm before them, not
    after), grouped16's with one (its norms folded in), 16 channels a group."""
    probes = [draw_probe(seed, "prenorm") for seed in range(200)]
    assert {p.cell for p in probes} == {"prenorm"} and {p.mode for p in probes} == {
        "mlp",
        "grouped",
        "dense",
        "grouped16",
    }
    assert all(p.width // p.groups == 16 for p in probes if p.mode == "grouped16")
    seed = next(s for s, p in enumerate(probes) if p.mode == mode)
    graph, _ = _probe_graph(seed, "prenorm", 2, tmp_path)
    cell_convs = [n for n in graph.node if n.op_type == "Conv"][1:]  # the stem's has a bias
    assert len(cell_convs) == 2 * probes[seed].depth
    assert {len(n.input) for n in cell_convs} == ({3} if mode == "grouped16" else {2})
    groups = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}.get("group", 1) for n in cell_convs]
    assert groups[0] == probes[seed].groups


def test_a_probe_the_ep_cannot_run_is_left_out_and_the_others_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One probe failing its export or first ORT run (on the H100, cuDNN refused a 2-D BatchNormalization of 200,704
    rows) is named in a warning and the asset's metadata, and the batch's other probes go on to their kernels; a zoo
    model's failure still fails the run."""
    import copy

    import dagster as dg
    import yaml

    from assets.analysis import analysis_assets
    from hase_dagster.analysis import zoo
    from resources.hase import HaseResource
    from tests.conftest import TEST_PROFILE

    export = zoo.export_variant

    def cudnn_refuses(variant: ModelVariant, *args: Any, **kwargs: Any) -> Any:
        if variant.model.name in ("dsp_s13", "resnet18"):
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : CUDNN failure 3000: CUDNN_STATUS_NOT_SUPPORTED\nmore")
        return export(variant, *args, **kwargs)

    monkeypatch.setattr(zoo, "export_variant", cudnn_refuses)
    document = copy.deepcopy(TEST_PROFILE)
    profile = document["profiles"]["tiny"]
    profile["analysis_workers"] = 1  # in this process, where the stand-in export is
    profile["models"] = [{"name": f"dsp_s{s}", "kind": "design_probe", "seed": s} for s in (12, 13)]
    config = tmp_path / "hase.yaml"
    config.write_text(yaml.safe_dump(document))
    hase = HaseResource(config_path=str(config), data_directory=str(tmp_path / "data"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["1"])
    result = dg.materialize(analysis_assets, partition_key="1", resources={"hase": hase}, instance=instance)
    assert result.success
    metadata = result.asset_materializations_for_node("onnx_models")[0].metadata
    assert metadata["models"].value == 1 and metadata["probes_left_out"].value == 1
    why = metadata["probes_left_out_why"].value
    assert "dsp_s13_i" in why and "CUDNN_STATUS_NOT_SUPPORTED" in why and "more" not in why  # its first line
    kernels = hase.warehouse().query("SELECT DISTINCT variant_id FROM kernels")["variant_id"].tolist()
    assert [k.split("_i")[0] for k in kernels] == ["dsp_s12"]
    profile["models"] = [{"name": "resnet18"}, {"name": "dsp_s12", "kind": "design_probe", "seed": 12}]
    config.write_text(yaml.safe_dump(document))
    assert not dg.materialize(
        analysis_assets, partition_key="1", resources={"hase": hase}, instance=instance, raise_on_error=False
    ).success


def test_the_grouped_expand_space_changes_a_groups_width(tmp_path: Path) -> None:
    """Convolutions of 2-4 groups whose output per group is 1/4-6 times its input (CPUBone's): the exported probe
    has a grouped Conv whose weight says so."""
    probes = [draw_probe(seed, "grouped_expand") for seed in range(200)]
    assert {p.groups for p in probes} == {2, 3, 4} and {p.cell for p in probes} == {"conv"}
    ratios = {round(p.out_width / p.width, 2) for p in probes}
    assert min(ratios) <= 0.5 and max(ratios) >= 4 and 1.0 not in ratios
    seed = next(s for s, p in enumerate(probes) if p.out_width >= 4 * p.width and p.resolution >= 14)
    graph, _ = _probe_graph(seed, "grouped_expand", 2, tmp_path)
    weights = {i.name: list(i.dims) for i in graph.initializer}
    grouped = [
        (weights[n.input[1]], next(a.i for a in n.attribute if a.name == "group"))
        for n in graph.node
        if n.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in n.attribute)
    ]
    probe = probes[seed]
    assert ([probe.out_width, probe.width // probe.groups, probe.kernel, probe.kernel], probe.groups) in grouped
