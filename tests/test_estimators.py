"""Kernel estimators: what they learn, how they extrapolate, and the non-executable save format."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hase_dagster.core.errors import HaseError
from hase_dagster.learn.estimators import KINDS, FeatureLayout, RooflineResidual, load_estimator, make_estimator
from hase_dagster.learn.features import NUMERIC_FEATURES, alignment, as_matrix, kernel_features, numeric_columns
from hase_dagster.learn.predict import Composition
from hase_dagster.learn.regressor import LatencyRegressor, _train, train_regressor
from hase_dagster.learn.training import Predictor

LOAD = ["HOST_CPU_UTIL"]


def _kernels(flops: np.ndarray, family: str = "Conv", op: str = ".Conv") -> pd.DataFrame:
    """Feature rows of synthetic convolutions: bytes proportional to FLOPs^0.6, idle device."""
    frame = pd.DataFrame(0.0, index=range(len(flops)), columns=list(NUMERIC_FEATURES))
    frame["log_flops"] = np.log1p(flops)
    frame["log_input_bytes"] = np.log1p(flops**0.6 * 40)
    frame["log_output_bytes"] = np.log1p(flops**0.6 * 40)
    frame["group"] = 1
    frame["family"], frame["op"] = family, op
    frame["load_HOST_CPU_UTIL"] = 0.0
    return frame


def _truth_ms(flops: np.ndarray) -> np.ndarray:
    """A roofline device: 5 us floor, 50 TFLOP/s, 2 TB/s."""
    megabytes = 2 * flops**0.6 * 40 / 1e6
    return 0.005 + flops / 50e12 * 1e3 + megabytes / 2e3 * 1e3


def _layout(families: list[str], ops: list[str]) -> FeatureLayout:
    numeric = numeric_columns(LOAD)
    return FeatureLayout({n: i for i, n in enumerate(numeric)}, len(numeric), families, ops)


def test_roofline_base_extrapolates_where_trees_cannot() -> None:
    train_flops = np.geomspace(1e6, 1e9, 200)
    frame = _kernels(train_flops)
    x = as_matrix(frame, ["Conv"], [".Conv"], LOAD)
    y = np.log(_truth_ms(train_flops))
    big = np.array([1e10, 3e10])  # 10-30x past the largest kernel trained on
    x_big = as_matrix(_kernels(big), ["Conv"], [".Conv"], LOAD)
    roofline = make_estimator("roofline_xgboost", _layout(["Conv"], [".Conv"])).fit(x, y)
    trees = make_estimator("xgboost", _layout(["Conv"], [".Conv"])).fit(x, y)
    roofline_error = np.abs(np.exp(roofline.predict(x_big)) / _truth_ms(big) - 1)
    tree_error = np.abs(np.exp(trees.predict(x_big)) / _truth_ms(big) - 1)
    assert roofline_error.max() < 0.15
    assert tree_error.min() > 0.5  # flat beyond the training range


def test_roofline_classes_keep_grouped_convolutions_apart() -> None:
    frame = pd.concat([_kernels(np.geomspace(1e6, 1e9, 40)), _kernels(np.geomspace(1e6, 1e9, 40))], ignore_index=True)
    frame.loc[40:, "group"] = 32
    x = as_matrix(frame, ["Conv"], [".Conv"], LOAD)
    model = RooflineResidual(_layout(["Conv"], [".Conv"]))
    assert set(model.op_classes(x)) == {".Conv", ".Conv:grouped"}


def test_a_grouped_fused_convolution_shares_the_plain_grouped_class_and_an_older_model_keeps_its_own(
    tmp_path: Path,
) -> None:
    """The CPU EP runs a grouped FusedConv as the plain grouped Conv (one small GEMM per group) plus an
    activation: trained on plain grouped rows only, the fused ones get their roofline, not the fast
    dense convolutions'. A model saved before the classes were shared loads with its own classes."""
    families, ops = ["Conv", "Conv_Relu"], [".Conv", "com.microsoft.FusedConv"]
    dense = _kernels(np.geomspace(1e6, 1e9, 40), "Conv_Relu", "com.microsoft.FusedConv")
    grouped = _kernels(np.geomspace(1e6, 1e8, 20))
    grouped["group"], grouped["channels_per_group"] = 32, 4
    frame = pd.concat([dense, grouped], ignore_index=True)
    x = as_matrix(frame, families, ops, LOAD)
    # grouped convolutions run 4x slower per FLOP than the roofline of dense ones
    y = np.log(np.r_[_truth_ms(dense_flops := np.geomspace(1e6, 1e9, 40)), 4 * _truth_ms(np.geomspace(1e6, 1e8, 20))])
    del dense_flops
    model = RooflineResidual(_layout(families, ops)).fit(x, y)
    fused_grouped = _kernels(np.array([3e7]), "Conv_Relu", "com.microsoft.FusedConv").assign(
        group=32, channels_per_group=4
    )
    x_new = as_matrix(fused_grouped, families, ops, LOAD)
    assert list(model.op_classes(x_new)) == [".Conv:grouped"]
    assert np.exp(model.predict(x_new))[0] / _truth_ms(np.array([3e7]))[0] > 2.5
    again = load_estimator(_layout(families, ops), model.save(tmp_path, "mean_ms"), tmp_path)
    np.testing.assert_allclose(again.predict(x_new), model.predict(x_new), rtol=1e-6)
    older = model.save(tmp_path, "mean_ms")
    del older["fused_grouped_as_plain"]
    assert list(load_estimator(_layout(families, ops), older, tmp_path).op_classes(x_new)) == [
        "com.microsoft.FusedConv:grouped"
    ]


def test_a_bicubic_resize_has_a_roofline_class_of_its_own_and_an_older_model_keeps_one(tmp_path: Path) -> None:
    """A bicubic Resize reads about 100x the time per element of a bilinear one. As a class of its own, its roofline
    base carries that cost, so the trees need not (they learned it only in part from the CPU's 66 bicubic rows among
    5,900: CrossViT's 240 px resize was predicted 43% fast with one class, 2% with its own). A model saved before the
    mode classes keeps one class."""
    families, ops = ["Resize", "Resize@cubic"], [".Resize"]
    linear_flops, cubic_flops = np.geomspace(1e6, 1e9, 60), np.geomspace(1e6, 1e8, 30)
    frame = pd.concat(
        [_kernels(linear_flops, "Resize", ".Resize"), _kernels(cubic_flops, "Resize@cubic", ".Resize")],
        ignore_index=True,
    )
    x = as_matrix(frame, families, ops, LOAD)
    y = np.log(np.r_[_truth_ms(linear_flops), 100 * _truth_ms(cubic_flops)])
    big = np.array([1e9, 3e9])  # 10-30x past the largest bicubic row
    x_big = as_matrix(_kernels(big, "Resize@cubic", ".Resize"), families, ops, LOAD)
    model = RooflineResidual(_layout(families, ops)).fit(x, y)
    assert set(model.op_classes(x)) == {".Resize", "Resize@cubic"}
    assert np.all(np.abs(model.base_ms(x_big) / (100 * _truth_ms(big)) - 1) < 0.3)
    single = RooflineResidual(_layout(families, ops), mode_classes=False).fit(x, y)
    assert set(single.op_classes(x)) == {".Resize"}
    assert np.all(single.base_ms(x_big) / (100 * _truth_ms(big)) < 0.3)  # the base of both modes at once
    older = model.save(tmp_path, "mean_ms")
    del older["mode_classes"]
    assert set(load_estimator(_layout(families, ops), older, tmp_path).op_classes(x)) == {".Resize"}


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_saves_as_data_and_loads_the_same_predictions(kind: str, tmp_path: Path) -> None:
    flops = np.geomspace(1e6, 1e9, 80)
    frame = _kernels(flops)
    frame.loc[::2, "load_HOST_CPU_UTIL"] = 100.0
    x = as_matrix(frame, ["Conv"], [".Conv"], LOAD)
    y = np.log(_truth_ms(flops) * (1 + frame["load_HOST_CPU_UTIL"].to_numpy() / 100))
    layout = _layout(["Conv"], [".Conv"])
    model = make_estimator(kind, layout).fit(x, y)
    entry = model.save(tmp_path, "median_ms")
    again = load_estimator(layout, entry, tmp_path)
    np.testing.assert_allclose(again.predict(x), model.predict(x), rtol=1e-6)
    assert not list(tmp_path.glob("*.pkl"))


def _predictor() -> Predictor:
    flops = np.geomspace(1e6, 1e9, 60)
    frame = _kernels(flops)
    rows = pd.DataFrame({t: _truth_ms(flops) for t in ("median_ms", "mean_ms", "p90_ms")}).assign(batch_size=1)
    regressor: LatencyRegressor = _train("xgboost", frame, rows, "cpu", LOAD)
    return Predictor(regressor, Composition(None, None))


def test_a_predictor_folder_round_trips(tmp_path: Path) -> None:
    predictor = _predictor()
    folder = predictor.save(tmp_path / "predictor")
    loaded = Predictor.load(folder)
    frame = _kernels(np.array([2e7, 5e8]))
    for target, values in predictor.regressor.predict(frame).items():
        np.testing.assert_allclose(loaded.regressor.predict(frame)[target], values, rtol=1e-6)
    assert sorted(p.name for p in folder.iterdir()) == [
        "mean_ms.xgb.ubj",
        "median_ms.xgb.ubj",
        "p90_ms.xgb.ubj",
        "predictor.json",
    ]
    # Saving again replaces the folder whole.
    predictor.save(folder)
    assert not (tmp_path / "predictor.partial").exists() and Predictor.load(folder).regressor.kind == "xgboost"


def test_an_old_pickle_is_refused_without_being_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "executed"

    class Trap:
        def __reduce__(self):  # unpickling this would create the marker file
            return (Path.touch, (marker,))

    (tmp_path / "predictor.pkl").write_bytes(pickle.dumps(Trap()))
    with pytest.raises(HaseError, match="pickled predictor from an older Hase"):
        Predictor.load(tmp_path / "predictor")
    with pytest.raises(HaseError, match="pickled predictor"):
        Predictor.load(tmp_path / "predictor.pkl")
    assert not marker.exists()


def test_a_damaged_or_foreign_predictor_is_refused(tmp_path: Path) -> None:
    folder = _predictor().save(tmp_path / "predictor")
    (folder / "median_ms.xgb.ubj").write_bytes(b"not a model")
    with pytest.raises(HaseError, match="damaged predictor"):
        Predictor.load(folder)
    (folder / "predictor.json").write_text('{"format": "something-else"}')
    with pytest.raises(HaseError, match="does not hold a Hase predictor"):
        Predictor.load(folder)
    (folder / "predictor.json").write_text("{not json")
    with pytest.raises(HaseError, match="not a readable predictor"):
        Predictor.load(folder)


def test_channels_per_group_is_each_groups_input_width_and_zero_without_groups() -> None:
    def conv(group: int) -> dict[str, object]:
        inputs = [
            {"name": "x", "shape": [1, 128, 56, 56]},
            {"name": "w", "shape": [128, 128 // group, 3, 3], "weight": True},
        ]
        return {"family": "Conv", "op_type": "Conv", "inputs": inputs, "outputs": [{"shape": [1, 128, 56, 56]}],
                "attributes": {"group": group, "kernel_shape": [3, 3]}}  # fmt: skip

    assert kernel_features(conv(32))["channels_per_group"] == 4.0
    assert kernel_features(conv(1))["channels_per_group"] == 0.0


def test_changed_dims_tell_orts_pad_paths_apart() -> None:
    def pad(shape_in: list[int], shape_out: list[int]) -> dict[str, int]:
        kernel = {"family": "Pad", "op_type": "Pad", "inputs": [{"name": "x", "shape": shape_in}],
                  "outputs": [{"shape": shape_out}], "attributes": {"mode": "constant"}}  # fmt: skip
        features = kernel_features(kernel)
        return {i: features[f"changed_d{i}"] for i in range(4)}

    # a channels-first pad of the last dims (ORT's fast path), Swin's channels-last pad (the generic kernel),
    # a pad of nothing (a copy); a 3-D input is left-padded with 1s like the in_d/out_d features
    assert pad([16, 96, 112, 112], [16, 96, 113, 113]) == {0: 0, 1: 0, 2: 1, 3: 1}
    assert pad([64, 14, 14, 384], [64, 16, 16, 384]) == {0: 0, 1: 1, 2: 1, 3: 0}
    assert pad([64, 56, 56, 96], [64, 56, 56, 96]) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert pad([8, 49, 32], [8, 64, 32]) == {0: 0, 1: 0, 2: 1, 3: 0}


def test_a_computed_shape_operand_gives_the_features_of_a_constant_one() -> None:
    # Swin V2's window pad as static detection finds it (its pads computed by a Cast) and as ORT's optimised
    # graph holds it in the tables (folded into an initializer): the same kernel, so the same features
    def pad(pads_is_weight: bool) -> dict[str, object]:
        x = {"name": "x", "dtype": "float", "shape": [64, 14, 14, 384], "weight": False}
        pads = {"name": "pads", "dtype": "int64", "shape": [8], "weight": pads_is_weight}
        return kernel_features(
            {"family": "Pad", "op_type": "Pad", "inputs": [x, pads], "outputs": [{"shape": [64, 16, 16, 384]}],
             "attributes": {"mode": "constant"}, "weight_bytes": 64 if pads_is_weight else 0}
        )  # fmt: skip

    computed, constant = pad(False), pad(True)
    assert computed == constant
    assert computed["n_activation_inputs"] == 1 and computed["in_numel"] == 64 * 14 * 14 * 384
    # a large integer input is data (indices of a gather), not a parameter
    gather = {"family": "Gather", "op_type": "Gather", "outputs": [{"shape": [4096, 64]}],
              "inputs": [{"name": "table", "dtype": "float", "shape": [50000, 64], "weight": True},
                         {"name": "ids", "dtype": "int64", "shape": [4096], "weight": False}]}  # fmt: skip
    assert kernel_features(gather)["n_activation_inputs"] == 1
    assert kernel_features(gather)["in_numel"] == 4096


def test_a_convolution_without_a_bias_is_told_from_one_with_a_bias() -> None:
    # VisFormer's 1x1 convolutions after a norm have no bias: ORT's CUDA Conv skips its bias pass over the output
    def conv(bias: bool, op_type: str = "Conv") -> dict[str, object]:
        inputs = [
            {"name": "x", "dtype": "float", "shape": [64, 96, 28, 28], "weight": False},
            {"name": "w", "dtype": "float", "shape": [192, 96, 1, 1], "weight": True},
        ] + ([{"name": "b", "dtype": "float", "shape": [192], "weight": True}] if bias else [])
        return kernel_features(
            {"family": op_type, "op_type": op_type, "inputs": inputs, "outputs": [{"shape": [64, 192, 28, 28]}],
             "attributes": {"kernel_shape": [1, 1]}}
        )  # fmt: skip

    assert conv(True)["conv_bias"] == 1 and conv(False)["conv_bias"] == 0
    assert conv(True, "FusedConv")["conv_bias"] == 1
    # a MatMul's rank-1 weight is no convolution's bias
    assert conv(True, "MatMul")["conv_bias"] == 0


def test_a_reduction_says_whether_ort_runs_it_as_a_matrix_reduction() -> None:
    # ORT's CUDA EP reduces a sum or mean over leading or trailing axes in its own kernel, anything else in cuDNN's
    def reduce(op_type: str, in_shape: list[int], out_shape: list[int], axes: list[int] | None) -> int:
        kernel = {"family": op_type, "op_type": op_type, "outputs": [{"shape": out_shape}],
                  "inputs": [{"name": "x", "dtype": "float", "shape": in_shape, "weight": False}],
                  "attributes": {"axes": axes} if axes is not None else {}}  # fmt: skip
        return int(kernel_features(kernel)["reduce_matrix_path"])

    spatial = ([64, 160, 56, 56], [64, 160, 1, 1])
    assert reduce("ReduceMean", *spatial, [2, 3]) == 1 and reduce("ReduceMean", *spatial, [-2, -1]) == 1
    assert reduce("ReduceSum", *spatial, None) == 1  # its axes an input: read off the kept dims
    assert reduce("ReduceL2", *spatial, [2, 3]) == 0 and reduce("ReduceMax", *spatial, [2, 3]) == 0  # ConvNeXtV2
    assert reduce("ReduceMean", [64, 160, 56, 56], [64, 1, 56, 56], [1]) == 0  # a middle axis: cuDNN
    assert reduce("ReduceMean", [1, 160, 56, 56], [1, 1, 56, 56], [1]) == 1  # leading once batch 1 is dropped
    assert reduce("ReduceMean", [64, 160], [64], [1]) == 1  # trailing, the rank dropped
    assert reduce("Add", *spatial, None) == 0


def test_a_row_wise_kernel_says_how_long_its_rows_are_and_what_follows_its_axis() -> None:
    # ORT's CUDA Softmax over the last axis streams; over another axis (attention over the tokens) it runs several
    # times slower, and a LayerNormalization over short rows slower per byte than over long ones
    def rows(op_type: str, shape: list[int], attributes: dict[str, int]) -> tuple[int, int]:
        kernel = {"family": op_type, "op_type": op_type, "outputs": [{"shape": shape}], "attributes": attributes,
                  "inputs": [{"name": "x", "dtype": "float", "shape": shape, "weight": False}]}  # fmt: skip
        features = kernel_features(kernel)
        return int(features["axis_length"]), int(features["axis_inner"])

    assert rows("Softmax", [64, 6, 197, 197], {}) == (197, 1)  # the default axis: the last
    assert rows("Softmax", [64, 6, 197, 197], {"axis": -1}) == rows("Softmax", [64, 6, 197, 197], {"axis": 3})
    assert rows("Softmax", [16, 256, 6, 64], {"axis": 1}) == (256, 6 * 64)
    assert rows("LogSoftmax", [8, 1000], {"axis": 0}) == (8, 1000)
    assert rows("LayerNormalization", [12544, 16, 24], {}) == (24, 1)
    assert rows("LayerNormalization", [64, 197, 384], {"axis": 1}) == (197 * 384, 1)  # every dim from the axis on
    assert rows("Relu", [64, 6, 197, 197], {"axis": 1}) == (0, 0)


def _pads(bytes_moved: np.ndarray, changed: tuple[int, ...]) -> pd.DataFrame:
    """Feature rows of synthetic pads moving ``bytes_moved`` bytes (half in, half out) on one path."""
    frame = pd.DataFrame(0.0, index=range(len(bytes_moved)), columns=list(NUMERIC_FEATURES))
    frame["log_input_bytes"] = np.log1p(bytes_moved / 2)
    frame["log_output_bytes"] = np.log1p(bytes_moved / 2)
    for i in changed:
        frame[f"changed_d{i}"] = 1
    frame["family"], frame["op"] = "Pad", ".Pad"
    frame["load_HOST_CPU_UTIL"] = 0.0
    return frame


def test_path_rate_feature_takes_each_paths_rate_and_falls_back_to_the_familys(tmp_path: Path) -> None:
    # ORT's two pads on the H100: the last two dims of a channels-first map at 1.5 TB/s, the spatial dims of
    # a channels-last map at 57 GB/s; a third path with too few rows for a rate of its own.
    fast_bytes, slow_bytes, rare_bytes = np.geomspace(1e5, 1e9, 60), np.geomspace(1e5, 1e8, 20), np.array([1e6, 1e7])
    frame = pd.concat(
        [_pads(fast_bytes, (2, 3)), _pads(slow_bytes, (1, 2)), _pads(rare_bytes, (0,))], ignore_index=True
    )
    ms = np.concatenate([fast_bytes / 1.5e9, slow_bytes / 57e6, rare_bytes / 1e9])
    layout = _layout(["Pad"], [".Pad"])
    model = make_estimator("xgboost_path_rate", layout).fit(as_matrix(frame, ["Pad"], [".Pad"], LOAD), np.log(ms))
    assert model.path_rates.keys() == {"Pad:0011", "Pad:0110"}  # the rare path has 2 rows, under MIN_PATH_ROWS
    queries = pd.concat([_pads(np.array([1e7]), c) for c in ((2, 3), (1, 2), (0,))], ignore_index=True)
    feature = np.exp(model.path_feature(as_matrix(queries, ["Pad"], [".Pad"], LOAD)))  # ms, from rate x bytes
    assert feature[0] == pytest.approx(1e7 / 1.5e9, rel=0.01)
    assert feature[1] == pytest.approx(1e7 / 57e6, rel=0.01)
    assert feature[2] == pytest.approx(np.exp(model.family_rates["Pad"]) * 1e7, rel=0.01)  # the family's rate
    entry = model.save(tmp_path, "mean_ms")
    loaded = load_estimator(layout, entry, tmp_path)
    x = as_matrix(queries, ["Pad"], [".Pad"], LOAD)
    assert np.array_equal(loaded.predict(x), model.predict(x))


def _recurrent(steps: np.ndarray, batch: int, op: str = "LSTM", load: float = 0.0) -> pd.DataFrame:
    """Feature rows of synthetic recurrent layers: (1, steps, batch, 64) in, (steps, 1, batch, 128) out."""
    frame = pd.DataFrame(0.0, index=range(len(steps)), columns=list(NUMERIC_FEATURES))
    frame["in_d1"], frame["in_d2"], frame["in_d3"] = steps, batch, 64
    frame["out_d0"], frame["out_d1"], frame["out_d2"], frame["out_d3"] = steps, 1, batch, 128
    frame["log_flops"] = np.log1p(steps * 2 * batch * 4 * 128 * 192)
    frame["family"], frame["op"] = op, f".{op}"
    frame["load_HOST_CPU_UTIL"] = load
    return frame


def _recurrent_truth_ms(steps: np.ndarray, load: float = 0.0) -> np.ndarray:
    """A host-bound layer: 0.3 ms, 10 us a step, 1.2x under full load."""
    return (0.3 + 0.010 * steps) * (1 + 0.2 * load / 100)


@pytest.mark.parametrize("kind", ["xgboost_recurrent_base", "roofline_xgboost_recurrent_base"])
def test_a_recurrent_layer_follows_its_steps_past_the_longest_sequence_trained_on(kind: str) -> None:
    families, ops = ["Conv", "LSTM"], [".Conv", ".LSTM"]
    steps = np.geomspace(9, 256, 30).round()
    conv_flops = np.geomspace(1e6, 1e9, 60)
    frame = pd.concat(
        [_kernels(conv_flops), _recurrent(steps, 1), _recurrent(steps, 16, load=100.0)], ignore_index=True
    )
    x = as_matrix(frame, families, ops, LOAD)
    y = np.log(np.concatenate([_truth_ms(conv_flops), _recurrent_truth_ms(steps), _recurrent_truth_ms(steps, 100.0)]))
    layout = _layout(families, ops)
    based = make_estimator(kind, layout).fit(x, y)
    trees = make_estimator("xgboost", layout).fit(x, y)
    assert based.kind == kind
    long = np.array([1024.0, 2048.0])  # 4-8x the longest sequence trained on
    x_long = as_matrix(_recurrent(long, 1), families, ops, LOAD)
    based_error = np.abs(np.exp(based.predict(x_long)) / _recurrent_truth_ms(long) - 1)
    tree_error = np.abs(np.exp(trees.predict(x_long)) / _recurrent_truth_ms(long) - 1)
    assert based_error.max() < 0.05 and tree_error.min() > 0.5
    # under full load the layer's fitted slowdown, and the convolutions stay the trees'
    x_loaded = as_matrix(_recurrent(long, 1, load=100.0), families, ops, LOAD)
    assert np.allclose(np.exp(based.predict(x_loaded)) / _recurrent_truth_ms(long, 100.0), 1, atol=0.05)
    x_conv = as_matrix(_kernels(conv_flops[::10]), families, ops, LOAD)
    assert np.allclose(np.exp(based.predict(x_conv)) / _truth_ms(conv_flops[::10]), 1, atol=0.1)


def test_the_recurrent_base_saves_as_data_and_loads_the_same_predictions(tmp_path: Path) -> None:
    families, ops = ["Conv", "GRU"], [".Conv", ".GRU"]
    steps = np.geomspace(9, 512, 20).round()
    frame = pd.concat([_kernels(np.geomspace(1e6, 1e9, 20)), _recurrent(steps, 4, "GRU")], ignore_index=True)
    x = as_matrix(frame, families, ops, LOAD)
    y = np.log(np.concatenate([_truth_ms(np.geomspace(1e6, 1e9, 20)), _recurrent_truth_ms(steps)]))
    layout = _layout(families, ops)
    model = make_estimator("xgboost_recurrent_base", layout).fit(x, y)
    entry = model.save(tmp_path, "mean_ms")
    assert not list(tmp_path.glob("*.pkl")) and entry["kind"] == "xgboost_recurrent_base"
    assert entry["trees"]["kind"] == "xgboost"  # the rest, saved as its own kind
    loaded = load_estimator(layout, entry, tmp_path)
    assert np.allclose(loaded.predict(x), model.predict(x))


def _se_scale(small_first: bool) -> dict[str, object]:
    """EfficientNet's squeeze-excitation scale: a map times per-channel weights, in either operand order."""
    x = {"name": "x", "dtype": "float", "shape": [64, 32, 112, 112], "weight": False}
    s = {"name": "s", "dtype": "float", "shape": [64, 32, 1, 1], "weight": False}
    return {"family": "Mul", "op_type": "Mul", "inputs": [s, x] if small_first else [x, s],
            "outputs": [{"shape": [64, 32, 112, 112]}], "flops": 64 * 32 * 112 * 112}  # fmt: skip


def test_a_broadcasting_elementwise_op_reads_its_largest_operand_first() -> None:
    # ``s * x`` and ``x * s`` run the same kernel at the same speed: the same features
    assert kernel_features(_se_scale(True)) == kernel_features(_se_scale(False))
    assert kernel_features(_se_scale(True))["in_d3"] == 112
    # in graph order (how regressors saved before the choice read them) the small operand came first
    assert kernel_features(_se_scale(True), "graph")["in_d3"] == 1
    assert kernel_features(_se_scale(True), "graph") != kernel_features(_se_scale(False), "graph")
    # an op whose operands are not elementwise keeps the graph's order
    matmul = {"family": "MatMul", "op_type": "MatMul", "outputs": [{"shape": [8, 512]}],
              "inputs": [{"name": "a", "shape": [8, 64]}, {"name": "b", "shape": [64, 512]}]}  # fmt: skip
    assert kernel_features(matmul)["in_d3"] == 64


def test_a_layout_saved_without_an_operand_order_reads_operands_in_graph_order() -> None:
    layout = _layout(["Mul"], [".Mul"])
    assert FeatureLayout.from_json(layout.to_json()).operand_order == "largest_first"
    old = {k: v for k, v in layout.to_json().items() if k != "operand_order"}
    assert FeatureLayout.from_json(old).operand_order == "graph"
    with pytest.raises(HaseError, match="operand order 'smallest_first'"):
        FeatureLayout.from_json({**old, "operand_order": "smallest_first"})


def test_alignment_tells_a_text_encoders_rows_from_a_vision_transformers() -> None:
    def softmax(tokens: int) -> dict[str, object]:
        shape = [64, 4, tokens, tokens]
        return {"family": "Softmax", "op_type": "Softmax", "inputs": [{"name": "x", "shape": shape}],
                "outputs": [{"shape": shape}]}  # fmt: skip

    assert kernel_features(softmax(1024))["align_in"] == 16 and kernel_features(softmax(1024))["align_out"] == 16
    assert kernel_features(softmax(1025))["align_in"] == 1  # odd: a class token on a 32 x 32 grid
    assert kernel_features(softmax(196))["align_in"] == 4
    assert alignment([]) == 1 and alignment([12608, 768]) == 16 and alignment([8, 197, 768]) == 1


def _batch_norm(shape: list[int], mean_ms: float = 0.0, instance: str = "bn") -> dict[str, object]:
    """A BatchNormalization kernel over ``shape`` (its scale a weight), as a training row when timed."""
    numel = int(np.prod(shape))
    return {
        "instance_id": instance, "family": "BatchNormalization", "op_type": "BatchNormalization", "domain": "",
        "inputs": [{"name": "x", "dtype": "float", "shape": shape},
                   {"name": "scale", "dtype": "float", "shape": [shape[1]], "weight": True}],
        "outputs": [{"name": "y", "dtype": "float", "shape": shape}], "attributes": {},
        "flops": 2 * numel, "input_bytes": 4 * numel, "output_bytes": 4 * numel, "weight_bytes": 16 * shape[1],
        "status": "ok", "mean_ms": mean_ms, "median_ms": mean_ms, "p90_ms": mean_ms * 1.05,
        "batch_size": shape[0], "stress_level": 0.0, "bg_DCGM_FI_DEV_GPU_UTIL": 0.0, "architecture": instance,
    }  # fmt: skip


def test_a_batch_norm_over_rows_and_a_bicubic_resize_are_families_of_their_own_and_old_layouts_keep_the_catalogs() -> (
    None
):
    def resize(mode: str) -> dict[str, object]:
        return {"family": "Resize", "op_type": "Resize", "attributes": {"mode": mode},
                "inputs": [{"name": "x", "shape": [1, 3, 240, 240]}, {"name": "sizes", "shape": [4], "weight": True}],
                "outputs": [{"shape": [1, 3, 224, 224]}]}  # fmt: skip

    assert kernel_features(resize("cubic"))["family"] == "Resize@cubic"
    assert kernel_features(resize("linear"))["family"] == kernel_features(resize("nearest"))["family"] == "Resize"
    assert kernel_features(resize("cubic"), family_variants=False)["family"] == "Resize"
    assert kernel_features(_batch_norm([3136, 256]))["family"] == "BatchNormalization@rank2"
    assert kernel_features(_batch_norm([16, 256, 28, 28]))["family"] == "BatchNormalization"
    assert kernel_features(_batch_norm([3136, 256]), family_variants=False)["family"] == "BatchNormalization"
    layout = _layout(["BatchNormalization"], [".BatchNormalization"])
    assert FeatureLayout.from_json(layout.to_json()).family_variants is True
    old = {k: v for k, v in layout.to_json().items() if k != "family_variants"}
    assert FeatureLayout.from_json(old).family_variants is False


def test_rows_of_a_slow_2d_batch_norm_leave_the_4d_ones_at_their_own_speed() -> None:
    """The H100's case (results/gpu-general/README.md): 2-D BatchNorms move 13 GB/s, 4-D ones 1 TB/s. Trained
    on both, a 4-D one of a size only 2-D rows had is predicted at the 4-D speed, and a regressor that saw
    only 4-D ones does not claim to know the 2-D family."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        rows_, channels = int(rng.choice([196, 784, 3136, 12544])), int(rng.choice([64, 128, 256, 512]))
        rows.append(_batch_norm([rows_, channels], 8 * rows_ * channels / 13e6, f"r{i}"))
        n, side = int(rng.choice([1, 4, 16])), int(rng.choice([7, 14, 28]))
        rows.append(_batch_norm([n, channels, side, side], 0.004 + 8 * n * channels * side**2 / 1e9, f"m{i}"))
    frame = pd.DataFrame(rows)
    for column in ("inputs", "outputs", "attributes"):
        frame[f"{column}_json"] = frame[column].map(json.dumps)
    regressor = train_regressor(frame, "cuda", kind="xgboost")
    unseen_4d = _batch_norm([16, 512, 28, 28])  # 6.4M elements: as many as the largest 2-D rows
    predicted = regressor.predict_kernels([unseen_4d], [{"DCGM_FI_DEV_GPU_UTIL": 0.0}])[0]["mean_ms"][0]
    four_d_speed, two_d_speed = 0.004 + 8 * 16 * 512 * 28**2 / 1e9, 8 * 16 * 512 * 28**2 / 13e6
    assert predicted < 3 * four_d_speed < two_d_speed / 10
    rows_kernel, map_kernel = _batch_norm([3136, 256]), _batch_norm([16, 256, 28, 28])
    assert regressor.knows("BatchNormalization", rows_kernel) and regressor.knows("BatchNormalization", map_kernel)
    only_4d = train_regressor(frame[frame["instance_id"].str.startswith("m")], "cuda", kind="xgboost")
    assert only_4d.knows("BatchNormalization", map_kernel) and not only_4d.knows("BatchNormalization", rows_kernel)


def test_a_gpu_regressor_adds_the_conv_bias_pass_that_bias_free_convolutions_skip(tmp_path: Path) -> None:
    """On a device whose Conv adds its bias in a second pass over the output (2.5 TB/s streaming, as large ReLUs
    show), a regressor for ``cuda`` trained on many biased and few bias-free convolutions predicts bias-free ones
    without the pass; the same kind for ``cpu`` (no pass) and plain XGBoost charge them for it."""
    rng = np.random.default_rng(0)
    bandwidth = 2.5e12  # bytes a second

    def convs(n: int, bias: int) -> tuple[pd.DataFrame, np.ndarray]:
        frame = _kernels(np.exp(rng.uniform(np.log(1e8), np.log(2e10), n)))
        frame["log_output_bytes"] = np.log1p(np.exp(rng.uniform(np.log(5e6), np.log(4e8), n)))
        frame["conv_bias"] = bias
        output = np.expm1(frame["log_output_bytes"].to_numpy())
        conv_ms = 0.004 + np.expm1(frame["log_flops"].to_numpy()) / 60e12 * 1e3 + output / bandwidth * 1e3
        return frame, conv_ms + bias * 2 * output / bandwidth * 1e3

    def relus(n: int) -> tuple[pd.DataFrame, np.ndarray]:
        frame = _kernels(np.full(n, 1e6), "Relu", ".Relu")
        moved = np.exp(rng.uniform(np.log(2e7), np.log(8e8), n))
        frame["log_input_bytes"] = frame["log_output_bytes"] = np.log1p(moved)
        return frame, 0.003 + 2 * moved / bandwidth * 1e3

    parts = [convs(600, 1), convs(12, 0), relus(40)]
    frame = pd.concat([p[0] for p in parts], ignore_index=True)
    families, ops = ["Conv", "Relu"], [".Conv", ".Relu"]
    x, y = as_matrix(frame, families, ops, LOAD), np.log(np.concatenate([p[1] for p in parts]))
    layout = _layout(families, ops)
    gpu = make_estimator("xgboost_recurrent_base", layout, "cuda").fit(x, y)
    cpu = make_estimator("xgboost_recurrent_base", layout, "cpu").fit(x, y)
    test, truth = convs(200, 0)
    x_test = as_matrix(test, families, ops, LOAD)
    gpu_error = np.exp(gpu.predict(x_test)) / truth - 1
    cpu_error = np.exp(cpu.predict(x_test)) / truth - 1
    assert np.median(np.abs(gpu_error)) < 0.08 and np.median(cpu_error) > max(0.1, 3 * np.median(np.abs(gpu_error)))
    # the biased ones stay right, and a saved model loads with its bandwidth
    biased, biased_truth = convs(200, 1)
    x_biased = as_matrix(biased, families, ops, LOAD)
    assert np.median(np.abs(np.exp(gpu.predict(x_biased)) / biased_truth - 1)) < 0.08
    entry = gpu.save(tmp_path, "mean_ms")
    assert abs(entry["bias_pass_gbps"] - 2500) < 150 and "bias_pass_gbps" not in cpu.save(tmp_path, "cpu")
    assert np.allclose(load_estimator(layout, entry, tmp_path).predict(x_test), gpu.predict(x_test))
