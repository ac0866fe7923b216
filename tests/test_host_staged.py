"""Kernels that stage their arguments in host memory (CUDA Concat past 32 inputs with a long output axis, Split
into unequal pieces, the Slice groups ORT fuses into such a Split) wait for a time-slicing co-tenant on their own:
the count, the composition term, and the committed H100 bundle on real ONNX files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.learn.predict import (
    HOST_BOUND_SHARE,
    HOST_STAGED_LIMIT,
    HOST_STAGED_MIN_AXIS,
    STAGED_SPLIT_MIN_AXIS,
    STAGED_SPLIT_SHARE,
    STAGED_WAIT_BUSY_POWER,
    Composition,
    Sums,
    fused_slice_splits,
    host_staged_kernels,
)
from hase_dagster.learn.timeslice import TimeSlicing

H100 = Path(__file__).resolve().parents[1] / "results" / "bundles" / "h100"


def concat_network(path: Path, inputs: int, base_width: int, channels: int = 8, size: int = 14) -> Path:
    """X -> ``inputs`` convolutions of X (each its own weights and width, ``base_width`` to 2 more, so the
    Concat's inputs differ in size as DenseNet's do) -> one Concat of all of them along the channels."""
    nodes, weights, names = [], [], []
    for i in range(inputs):
        width = base_width + i % 3
        w = helper.make_tensor(f"w{i}", TensorProto.FLOAT, [width, channels, 1, 1], np.ones(width * channels) * 0.01)
        weights.append(w)
        nodes.append(helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], name=f"conv{i}"))
        names.append(f"c{i}")
    nodes.append(helper.make_node("Concat", names, ["y"], axis=1, name="concat"))
    total = sum(base_width + i % 3 for i in range(inputs))
    graph = helper.make_graph(
        nodes,
        "concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, total, size, size])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def kernel(
    name: str, op: str, inputs: list[tuple[str, tuple[int, ...]]], outputs: list[tuple[int, ...]], **attrs: int
) -> Kernel:
    """A CUDA kernel ``name`` of ``op`` over named input tensors; its outputs are ``name:0``, ``name:1``, ..."""
    return Kernel(
        "v", "cuda", 0, name, op, op, "", [op], [op], dict(attrs),
        [TensorInfo(tensor, "float", shape) for tensor, shape in inputs],
        [TensorInfo(f"{name}:{i}", "float", shape) for i, shape in enumerate(outputs)],
    )  # fmt: skip


def split(shape: tuple[int, ...], axis: int, lengths: list[int]) -> Kernel:
    """A Split of ``shape`` along ``axis`` into pieces of ``lengths``."""
    pieces = [tuple(n if i == axis else d for i, d in enumerate(shape)) for n in lengths]
    return kernel("split", "Split", [("x", shape)], pieces, axis=axis)


def test_staged_splits_over_a_long_axis_wait_and_equal_inner_three_or_short_ones_do_not() -> None:
    """ORT's CUDA Split passes equal pieces (up to 32) and three along the innermost axis by value and stages the
    rest in pinned host memory, with an index per position of the split axis; on the H100 the staged ones waited for
    the co-tenant where that axis was longer than 128 (FasterNet's 160 and 320 channels, MobileViTv2's 129-257,
    twins of 160 and 256) and not at 96 or less (EfficientViT's q/k/v, FasterNet's 40 and 80, twins of 64 and 96),
    whatever consumes the pieces."""
    share = STAGED_SPLIT_SHARE
    assert STAGED_SPLIT_MIN_AXIS == 128
    assert host_staged_kernels([split((1, 160, 14, 14), 1, [40, 120])]) == pytest.approx(share)  # FasterNet stage 3
    assert host_staged_kernels([split((1, 129, 4, 256), 1, [1, 64, 64])]) == pytest.approx(share)  # MobileViTv2
    assert host_staged_kernels([split((1, 96, 14, 14), 1, [16, 16, 64])]) == 0  # EfficientViT's q/k/v: too short
    assert host_staged_kernels([split((1, 128, 14, 14), 1, [32, 96])]) == 0  # at the limit
    assert host_staged_kernels([split((1, 256, 56, 56), 1, [128, 128])]) == 0  # equal: by value
    assert host_staged_kernels([split((1, 256, 56, 56), 1, [8] * 32)]) == 0
    assert host_staged_kernels([split((1, 264, 56, 56), 1, [8] * 33)]) == pytest.approx(share)  # past 32 pieces
    assert host_staged_kernels([split((1, 196, 4, 192), 3, [32, 32, 128])]) == 0  # three inner: Split3Inner
    assert host_staged_kernels([split((1, 196, 8, 192), 3, [32, 160])]) == pytest.approx(share)
    assert host_staged_kernels([split((1, 196, 8, 192), -1, [32, 32, 128])]) == 0


def test_slices_that_cut_one_axis_into_unequal_pieces_count_as_one_fused_split() -> None:
    """ReXNet's ``x[:, :c]`` beside ``x[:, c:]`` and XCiT's class token beside its patches: ORT fuses them into one
    Split, staged when the pieces differ; slices that leave part of the axis out, or cut two axes, are not fused.
    A fused group waits as a Split does: where its axis is longer than 128."""
    x = ("x", (1, 40, 7, 7))
    head, tail = kernel("head", "Slice", [x], [(1, 16, 7, 7)]), kernel("tail", "Slice", [x], [(1, 24, 7, 7)])
    halves = [kernel("h1", "Slice", [x], [(1, 20, 7, 7)]), kernel("h2", "Slice", [x], [(1, 20, 7, 7)])]
    other = kernel("relu", "Relu", [x], [(1, 40, 7, 7)])
    assert fused_slice_splits([head, tail]) == 1
    assert fused_slice_splits([head, tail, other]) == 1  # other consumers beside the slices do not stop it
    assert host_staged_kernels([head, tail]) == 0  # 40 channels: too short to wait
    assert fused_slice_splits([head, tail], min_axis=39) == 1
    assert fused_slice_splits(halves) == 0  # equal pieces go by value
    assert fused_slice_splits([head]) == 0
    assert fused_slice_splits([head, kernel("s36", "Slice", [x], [(1, 20, 7, 7)])]) == 0  # 36 of 40 channels
    assert fused_slice_splits([head, kernel("s2", "Slice", [x], [(1, 24, 7, 6)])]) == 0  # two axes cut
    tokens = ("t", (1, 197, 128))
    cls = kernel("cls", "Gather", [tokens, ("i", ())], [(1, 128)], axis=1)
    patches = kernel("patches", "Slice", [tokens], [(1, 196, 128)])
    assert fused_slice_splits([cls, patches]) == 1
    assert host_staged_kernels([cls, patches]) == pytest.approx(STAGED_SPLIT_SHARE)  # 197 tokens


def partial_conv_network(path: Path, first: int, blocks: int = 4, channels: int = 32, size: int = 14) -> Path:
    """FasterNet's partial convolution ``blocks`` times: Split the channels into ``first`` and the rest, a 1x1
    convolution on the first piece, Concat it with the untouched rest."""
    nodes, weights = [], [helper.make_tensor("sizes", TensorProto.INT64, [2], [first, channels - first])]
    current = "x"
    for b in range(blocks):
        w = helper.make_tensor(f"w{b}", TensorProto.FLOAT, [first, first, 1, 1], np.full(first * first, 0.01))
        weights.append(w)
        nodes.append(helper.make_node("Split", [current, "sizes"], [f"a{b}", f"r{b}"], axis=1, name=f"split{b}"))
        nodes.append(helper.make_node("Conv", [f"a{b}", f"w{b}"], [f"c{b}"], name=f"conv{b}"))
        nodes.append(helper.make_node("Concat", [f"c{b}", f"r{b}"], [f"y{b}"], axis=1, name=f"concat{b}"))
        current = f"y{b}"
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes,
        "partial",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, shape)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_the_committed_bundle_charges_long_unequal_splits_under_load_only(tmp_path: Path) -> None:
    """Static detection keeps each Split; four unequal ones of 160 channels (40 + 120) cost the run about four staged
    waits more than four equal ones (80 + 80) at stress 1.0, much less at 0.5 and nothing idle; of 96 channels,
    nothing."""
    pytest.importorskip("onnxruntime")
    if not H100.is_dir():
        pytest.skip("no committed H100 bundle")
    from hase_dagster.learn.bundles import load_bundle

    bundle = load_bundle(H100)
    unequal = partial_conv_network(tmp_path / "unequal_b1.onnx", 40, channels=160)
    equal = partial_conv_network(tmp_path / "equal_b1.onnx", 80, channels=160)
    short = partial_conv_network(tmp_path / "short_b1.onnx", 24, channels=96)
    short_equal = partial_conv_network(tmp_path / "short_equal_b1.onnx", 48, channels=96)
    kernels, _ = bundle.kernels(unequal, 1)
    assert host_staged_kernels(kernels) == pytest.approx(4 * STAGED_SPLIT_SHARE)
    assert host_staged_kernels(bundle.kernels(equal, 1)[0]) == 0
    assert host_staged_kernels(bundle.kernels(short, 1)[0]) == 0
    runs = [
        bundle.predict([unequal, equal, short, short_equal], [1], [load]) for load in ("idle", "level=0.5", "level=1.0")
    ]
    (idle_u, idle_e, _, _), (half_u, half_e, _, _), (loaded_u, loaded_e, loaded_s, loaded_se) = runs
    assert abs(idle_u.predicted_ms - idle_e.predicted_ms) < 0.05
    # the twins measured about a burst a Split at stress 1.0 and a tenth of one at 0.5 (staged-split-axis)
    burst = TimeSlicing().burst_ms
    assert loaded_u.predicted_ms - loaded_e.predicted_ms == pytest.approx(4 * burst, rel=0.3)
    assert half_u.predicted_ms - half_e.predicted_ms < 0.2 * 4 * burst
    assert abs(loaded_s.predicted_ms - loaded_se.predicted_ms) < 0.1


def gpu_composition(slicing: TimeSlicing) -> Composition:
    """A composition fitted on GPU runs idle and under full load, none of them with a staged kernel."""
    return Composition.fit(
        [
            (Sums(0, i, i, 20, u, idle_mean_ms=i, time_slicing=slicing), i * (1 + u / 190), i)
            for i in (1, 2, 4)
            for u in (0, 95)
        ]
    )


def test_host_staged_kernels_are_long_concats_past_the_by_value_limit(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    if not H100.is_dir():
        pytest.skip("no committed H100 bundle")
    from hase_dagster.learn.bundles import load_bundle

    bundle = load_bundle(H100)
    wide = 20  # 33 inputs of 20-22 channels: past HOST_STAGED_MIN_AXIS
    assert 33 * wide > HOST_STAGED_MIN_AXIS > 33 * 4
    at_limit, _ = bundle.kernels(concat_network(tmp_path / "at_b1.onnx", HOST_STAGED_LIMIT, wide), 1)
    past, _ = bundle.kernels(concat_network(tmp_path / "past_b1.onnx", HOST_STAGED_LIMIT + 1, wide), 1)
    short, _ = bundle.kernels(concat_network(tmp_path / "short_b1.onnx", HOST_STAGED_LIMIT + 1, 2), 1)
    assert host_staged_kernels(at_limit) == 0
    assert host_staged_kernels(past) == 1
    assert host_staged_kernels(short) == 0

    # under full load the one long staged Concat costs about a burst more than the 32-input network's
    # (DenseNet-201's: 0.83-0.90 ms each over a 0.95 ms burst)
    paths = [tmp_path / "at_b1.onnx", tmp_path / "past_b1.onnx"]
    idle, loaded = (bundle.predict(paths, [1], [load]) for load in ("idle", "level=1.0"))
    idle_gap = idle[1].predicted_ms - idle[0].predicted_ms
    loaded_gap = loaded[1].predicted_ms - loaded[0].predicted_ms
    assert loaded_gap - idle_gap == pytest.approx(0.9 * TimeSlicing().burst_ms, rel=0.25)


def test_the_staged_wait_is_a_burst_at_saturation_falling_as_the_cube_of_the_busy_share() -> None:
    slicing = TimeSlicing()
    composition = gpu_composition(slicing)
    # nothing the fit saw had a staged kernel: the term keeps its prior
    assert composition.mean_coefficients is not None
    prior = composition.mean_coefficients["host_staged_wait"]
    assert prior == pytest.approx(0.8)

    def extra(util: float, staged: int, slicing_or_none: TimeSlicing | None = slicing) -> float:
        with_staged = Sums(0, 5.0, 5.0, 50, util, idle_mean_ms=5.0, time_slicing=slicing_or_none, host_staged=staged)
        without = Sums(0, 5.0, 5.0, 50, util, idle_mean_ms=5.0, time_slicing=slicing_or_none)
        return composition.apply(with_staged)[0] - composition.apply(without)[0]

    assert STAGED_WAIT_BUSY_POWER == 3
    assert extra(95.0, 18) == pytest.approx(18 * slicing.burst_ms * prior)
    assert extra(47.5, 18) == pytest.approx(18 * slicing.burst_ms * prior * 0.5**3)
    assert extra(0.0, 18) == 0.0
    assert extra(95.0, 18, None) == 0.0  # the CPU EP does not time-slice


def test_a_composition_saved_before_the_term_predicts_as_before() -> None:
    slicing = TimeSlicing()
    composition = gpu_composition(slicing)
    saved = composition.to_json()
    for key in ("mean_coefficients", "p90_coefficients"):
        saved[key].pop("host_staged_wait")
    old = Composition.from_json(saved)
    staged = Sums(0, 5.0, 5.0, 50, 95.0, idle_mean_ms=5.0, time_slicing=slicing, host_staged=18)
    assert old.apply(staged) == old.apply(Sums(0, 5.0, 5.0, 50, 95.0, idle_mean_ms=5.0, time_slicing=slicing))


def test_a_run_whose_kernels_leave_the_gpu_mostly_idle_is_called_host_bound(tmp_path: Path) -> None:
    """The committed bundle warns on a 4-kernel network of 8 channels at 14 px, at idle and under load, and not
    on two 1x1 convolutions of 1024 channels at 112 px, whose kernels keep the GPU busy most of the run."""
    pytest.importorskip("onnxruntime")
    if not H100.is_dir():
        pytest.skip("no committed H100 bundle")
    from hase_dagster.learn.bundles import load_bundle

    bundle = load_bundle(H100)
    small = concat_network(tmp_path / "small_b1.onnx", 4, 4)
    large = concat_network(tmp_path / "large_b1.onnx", 2, 1024, channels=1024, size=112)
    for run in bundle.predict([small], [1], ["idle", "level=1.0"]):
        assert run.gpu_busy_share is not None and run.gpu_busy_share < HOST_BOUND_SHARE
        assert [w for w in run.warnings if w.startswith("host-bound")], run.warnings
    (run,) = bundle.predict([large], [1], ["idle"])
    assert run.gpu_busy_share is not None and run.gpu_busy_share >= HOST_BOUND_SHARE
    assert not [w for w in run.warnings if w.startswith("host-bound")]
