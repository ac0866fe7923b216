"""The zoo's precision dimension (issue 15 C): variants per precision, kernels' precision from their
element types, precision features, detection of a file's precision, merges of old exports and the
evaluation's speed-ups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.analysis.costs import estimate_flops
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.precision import detect_precision, fp16_variant, int8_variant
from hase_dagster.analysis.zoo import variants
from hase_dagster.core.config import load_config
from hase_dagster.core.dtypes import precision_of
from hase_dagster.core.errors import ConfigError
from hase_dagster.learn.evaluation import precision_speedups
from hase_dagster.learn.features import kernel_features
from hase_dagster.learn.reports import merge_exports


def _profile(tmp_path: Path, test_config: Path, **resnet: object):
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["models"][0] |= resnet
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_config(path).profiles["tiny"]


def test_precisions_become_variants_and_fp32_ids_stay(tmp_path: Path, test_config: Path) -> None:
    profile = _profile(tmp_path, test_config, precisions=["fp32", "int8", "fp16"], precision_batch_sizes=[1])
    at_one = [v.variant_id for v in variants(profile, 1)]
    assert at_one == [
        "resnet18_i64_b1",
        "transformer_encoder_s16_b1",
        "resnet18_i64_b1_int8",
        "resnet18_i64_b1_fp16",
    ]
    # Only batch 1 gets the other precisions; every variant's fp32 source is a variant of the batch.
    assert [v.variant_id for v in variants(profile, 2)] == ["resnet18_i64_b2", "transformer_encoder_s16_b2"]
    assert {v.fp32.variant_id for v in variants(profile, 1)} <= set(at_one)


def test_precisions_need_fp32_and_known_names(tmp_path: Path, test_config: Path) -> None:
    with pytest.raises(ConfigError, match="lack fp32"):
        _profile(tmp_path, test_config, precisions=["int8"])
    with pytest.raises(ConfigError, match=r"precisions\.1"):
        _profile(tmp_path, test_config, precisions=["fp32", "bf16"])
    with pytest.raises(ConfigError, match="repeat"):
        _profile(tmp_path, test_config, precisions=["fp32", "fp32"])


def test_a_kernel_precision_comes_from_its_element_types() -> None:
    assert precision_of(["uint8", "float", "int8", "int32"]) == "int8"  # QLinearConv
    assert precision_of(["tensor(float16)"]) == "fp16"  # a Cast out of fp16
    assert precision_of(["float", "int64"]) == "fp32"
    assert precision_of([]) == "fp32"


def _conv(dtype: str, weight_dtype: str | None = None) -> dict:
    return {
        "family": "Conv",
        "op_type": "Conv",
        "domain": "",
        "inputs": [
            {"name": "x", "dtype": dtype, "shape": [1, 8, 16, 16], "weight": False},
            {"name": "w", "dtype": weight_dtype or dtype, "shape": [8, 8, 3, 3], "weight": True},
        ],
        "outputs": [{"name": "y", "dtype": dtype, "shape": [1, 8, 16, 16]}],
        "attributes": {"kernel_shape": [3, 3]},
        "flops": 1000,
    }


def test_precision_features_tell_an_fp16_conv_from_an_fp32_one() -> None:
    fp32, fp16, int8 = (
        kernel_features(_conv("float")),
        kernel_features(_conv("float16")),
        kernel_features(_conv("uint8", "int8")),
    )
    assert (fp32["elem_bytes"], fp16["elem_bytes"], int8["elem_bytes"]) == (4, 2, 1)
    assert (fp32["weight_elem_bytes"], fp16["weight_elem_bytes"], int8["weight_elem_bytes"]) == (4, 2, 1)
    assert (fp32["precision_fp16"], fp16["precision_fp16"], int8["precision_int8"]) == (0, 1, 1)
    # A row from before dtypes were recorded reads as fp32.
    legacy = _conv("float")
    for tensor in legacy["inputs"]:
        del tensor["dtype"]
    assert kernel_features(legacy)["elem_bytes"] == 4 and kernel_features(legacy)["precision_int8"] == 0


def test_a_quantized_convolution_costs_the_flops_of_its_float_one() -> None:
    x = TensorInfo("x", "uint8", (1, 8, 16, 16))
    w = TensorInfo("w", "int8", (16, 8, 3, 3))
    y = TensorInfo("y", "uint8", (1, 16, 16, 16))
    bias = TensorInfo("b", "int32", (16,))
    scale, point = TensorInfo("s", "float", ()), TensorInfo("z", "uint8", ())
    float_conv = estimate_flops(
        "Conv", {}, [TensorInfo("x", "float", x.shape), TensorInfo("w", "float", w.shape), bias], [y]
    )
    quantized = [x, scale, point, w, scale, point, scale, point, bias]
    assert estimate_flops("QLinearConv", {}, quantized, [y]) == float_conv > 0
    assert estimate_flops("ConvInteger", {}, [x, w], [y]) == float_conv - 16 * 16 * 16  # no bias


def _matmul_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
        [numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_file_precision_is_detected(tmp_path: Path) -> None:
    source = _matmul_model(tmp_path / "mm.onnx")
    half = fp16_variant(source, tmp_path / "mm_fp16.onnx")
    quantized = int8_variant(source, tmp_path / "mm_int8.onnx")
    assert [detect_precision(onnx.load(str(p))) for p in (source, half, quantized)] == ["fp32", "fp16", "int8"]
    # The converter's Casts come out in topological order: ONNX's checker accepts the file.
    onnx.checker.check_model(str(half))


def test_merging_an_export_from_before_precisions_reads_fp32(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    pd.DataFrame({"variant_id": ["a_b1"], "model_name": ["a"]}).to_parquet(old / "model_files.parquet")
    pd.DataFrame({"variant_id": ["a_b1_int8"], "model_name": ["a"], "precision": ["int8"]}).to_parquet(
        new / "model_files.parquet"
    )
    merge_exports([old, new], tmp_path / "merged")
    merged = pd.read_parquet(tmp_path / "merged" / "model_files.parquet").set_index("variant_id")
    assert merged["precision"].to_dict() == {"a_b1": "fp32", "a_b1_int8": "int8"}


def test_speedups_pair_each_variant_with_its_fp32_one_in_the_same_setting_and_load() -> None:
    cases = pd.DataFrame(
        [
            # setting, variant, precision, stress, measured, predicted
            ("trained_on_all", "m_b1", "fp32", 0.0, 10.0, 9.0),
            ("trained_on_all", "m_b1_int8", "int8", 0.0, 5.0, 6.0),
            ("trained_on_all", "m_b1", "fp32", 0.5, 20.0, 20.0),
            ("trained_on_all", "m_b1_int8", "int8", 0.5, 8.0, 10.0),
            ("held_out_family", "m_b1_int8", "int8", 0.0, 5.0, 4.0),  # its fp32 case is missing
            # An unseen precision is predicted by the held-out architecture's predictor: paired with that fp32 case.
            ("held_out_architecture", "m_b1", "fp32", 0.0, 10.0, 8.0),
            ("unseen_precision", "m_b1_int8", "int8", 0.0, 5.0, 8.0),
        ],
        columns=["setting", "variant_id", "precision", "stress_level", "measured_mean_ms", "predicted_mean_ms"],
    ).assign(architecture="m", batch_size=1)
    models = pd.DataFrame(
        {"variant_id": ["m_b1", "m_b1_int8"], "base_variant_id": ["m_b1", "m_b1"], "top1_agreement": [None, 0.75]}
    )
    speedups = precision_speedups(cases, models)
    unseen = speedups[speedups["setting"] == "unseen_precision"].iloc[0]
    assert (unseen["measured_speedup"], unseen["predicted_speedup"]) == (2.0, 1.0)
    speedups = speedups[speedups["setting"] == "trained_on_all"].set_index("stress_level")
    assert len(speedups) == 2 and set(precision_speedups(cases, models)["setting"]) == {
        "trained_on_all",
        "unseen_precision",
    }
    assert speedups.loc[0.0, "measured_speedup"] == 2.0 and speedups.loc[0.0, "predicted_speedup"] == 1.5
    assert speedups.loc[0.5, "measured_speedup"] == 2.5 and speedups.loc[0.5, "speedup_error_pct"] == pytest.approx(-20)
    assert (speedups["top1_agreement"] == 0.75).all()
    assert precision_speedups(cases[cases["precision"] == "fp32"], models).empty


def _rows(architecture: str, precisions: str, dtype: str, count: int, rng: np.random.Generator) -> pd.DataFrame:
    records = []
    for _ in range(count):
        channels = int(rng.integers(4, 64))
        kernel = _conv(dtype) | {"flops": channels * 1000, "input_bytes": channels * 64, "output_bytes": channels * 64}
        kernel["inputs"][0]["shape"] = [1, channels, 16, 16]
        records.append(
            kernel
            | {
                "architecture": architecture,
                "model_precisions": precisions,
                "median_ms": channels * 0.01 * (0.5 if dtype == "uint8" else 1.0),
                "stress_level": 0.0,
                "batch_size": 1,
                "bg_HOST_CPU_UTIL": 10.0,
            }
        )
    return pd.DataFrame(records)


def test_leaving_an_architecture_out_scores_only_precisions_another_one_has() -> None:
    """The only int8 model's kernels are not scored when its architecture is left out (its precision
    leaves with it); once another architecture has int8 variants they are."""
    from hase_dagster.learn.features import feature_frame
    from hase_dagster.learn.regressor import _held_out_architectures

    rng = np.random.default_rng(0)
    parts = [_rows(a, "fp32", "float", 25, rng) for a in ("a", "b", "c")] + [_rows("a", "int8", "uint8", 10, rng)]
    rows = pd.concat(parts, ignore_index=True)
    frame = feature_frame(rows, rows, ["HOST_CPU_UTIL"])
    alone = _held_out_architectures("flops_baseline", frame, rows, "cpu", ["HOST_CPU_UTIL"])
    assert alone["a"]["rows"] == 25 and alone["a"]["unseen_precision_rows"] == 10
    assert "unseen_precision_rows" not in alone["b"] and alone["overall"]["rows"] == 75

    shared = pd.concat([rows, _rows("b", "int8", "uint8", 10, rng)], ignore_index=True)
    frame = feature_frame(shared, shared, ["HOST_CPU_UTIL"])
    both = _held_out_architectures("flops_baseline", frame, shared, "cpu", ["HOST_CPU_UTIL"])
    assert both["a"]["rows"] == 35 and "unseen_precision_rows" not in both["a"]


def test_precision_features_are_used_only_where_the_rows_hold_more_than_fp32() -> None:
    """An fp32-only training set gets the feature columns it had before precisions existed (so the
    trees sample the same columns); one with int8 rows gets the precision features too."""
    from hase_dagster.learn.features import PRECISION_FEATURES, feature_frame
    from hase_dagster.learn.regressor import _train

    rng = np.random.default_rng(1)
    fp32 = pd.concat([_rows(a, "fp32", "float", 15, rng) for a in ("a", "b")], ignore_index=True)
    regressor = _train(
        "xgboost", feature_frame(fp32, fp32, ["HOST_CPU_UTIL"]), fp32, "cpu", ["HOST_CPU_UTIL"], ("median_ms",)
    )
    assert not set(PRECISION_FEATURES) & set(regressor.numeric_columns)
    mixed = pd.concat([fp32, _rows("c", "fp32,int8", "uint8", 15, rng)], ignore_index=True)
    regressor = _train(
        "xgboost", feature_frame(mixed, mixed, ["HOST_CPU_UTIL"]), mixed, "cpu", ["HOST_CPU_UTIL"], ("median_ms",)
    )
    assert set(PRECISION_FEATURES) <= set(regressor.numeric_columns)
    predicted = regressor.predict(feature_frame(mixed, mixed, ["HOST_CPU_UTIL"]))["median_ms"]
    assert predicted.shape == (len(mixed),) and np.isfinite(predicted).all()
