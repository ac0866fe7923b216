"""The compute floor: a kernel is never predicted under its FLOPs at the device's measured peak (the peaks from a real
device profile, the predictions from the shipped h200 bundle)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.bundles import floor_bundle, load_bundle, read_bundle
from hase_dagster.learn.compute_floor import ComputePeaks, compute_peaks
from hase_dagster.learn.predict import predict_kernels_under
from hase_dagster.learn.training import Predictor
from hase_dagster.measure.device_profile import read_profile
from hase_dagster.orchestration.cli import main

REPO = Path(__file__).resolve().parents[1]
H100_PROFILE = REPO / "results" / "device" / "h100" / "gpu"
H100_HOST_PROFILE = REPO / "results" / "device" / "h100" / "cpu"


def _projection(tokens: int, width: int, out: int, dtype: str = "float") -> Kernel:
    """``x @ W`` over ``[tokens, width]`` by a ``[width, out]`` weight, without a bias (ORT's MatMul)."""
    return Kernel(
        variant_id="v", ep="cuda", order=0, node_name=f"proj{tokens}_{width}_{out}", family="MatMul", op_type="MatMul",
        domain="", absorbed_ops=["mm"], absorbed_op_types=["MatMul"], attributes={},
        inputs=[TensorInfo("x", dtype, (64, tokens, width)), TensorInfo("w", dtype, (width, out))],
        outputs=[TensorInfo("y", dtype, (64, tokens, out))], weight_names=["w"], flops=2 * 64 * tokens * width * out,
        input_bytes=4 * 64 * tokens * width, output_bytes=4 * 64 * tokens * out, weight_bytes=4 * width * out,
    )  # fmt: skip


def test_cuda_fp32_kernels_get_the_tf32_peak_and_int8_ones_no_floor() -> None:
    profile = read_profile(H100_PROFILE)
    peaks = compute_peaks(profile, "cuda")
    measured = profile["peaks"]["tflops"]
    # ORT's CUDA EP runs fp32 products on TF32 tensor cores: the fp32 floor is the faster of the two figures.
    assert peaks.tflops["fp32"] == max(measured["fp32"], measured["tf32"]) > 5 * measured["fp32"]
    assert peaks.tflops["fp16"] == max(measured["fp16"], measured["bf16"])
    assert "int8" not in peaks.tflops and peaks.device_name == "NVIDIA H100 80GB HBM3"
    kernels = [_projection(577, 2048, 8192), _projection(577, 2048, 8192, "int8")]
    records = [k.to_dict() for k in kernels]
    records.append({**records[0], "flops": 0})
    floor = peaks.floor_ms(records)
    assert floor[0] == pytest.approx(kernels[0].flops / (peaks.tflops["fp32"] * 1e9))
    assert list(floor[1:]) == [0.0, 0.0]
    # A CPU's floor is its best FP32 GEMM on any thread count.
    host = read_profile(H100_HOST_PROFILE)
    assert compute_peaks(host, "cpu").tflops == {"fp32": host["peaks"]["tflops"]["fp32"]}


def test_a_profile_of_another_device_or_without_gemms_is_refused() -> None:
    profile = read_profile(H100_PROFILE)
    with pytest.raises(HaseError, match="the kernels run on cpu"):
        compute_peaks(profile, "cpu")
    with pytest.raises(HaseError, match="holds no GEMM peak"):
        compute_peaks({**profile, "peaks": {"tflops": {"int8": 137.0}}}, "cuda")
    with pytest.raises(HaseError, match="no compute floor for the rocm EP"):
        compute_peaks(profile, "rocm")
    assert ComputePeaks.from_json(json.loads(json.dumps(compute_peaks(profile, "cuda").to_json()))) == compute_peaks(
        profile, "cuda"
    )


def test_the_floored_bundle_lifts_only_kernels_the_trees_put_above_the_peak(tmp_path: Path) -> None:
    shipped = load_bundle("h200")
    # The shipped bundle carries its own device's floor; the trees alone are what the floor is measured against.
    assert shipped.predictor.regressor.compute_peaks is not None
    assert shipped.predictor.regressor.compute_peaks.device_name == "NVIDIA H200"
    unfloored = replace(shipped.predictor.regressor, compute_peaks=None)
    source = replace(shipped, predictor=Predictor(unfloored, shipped.predictor.composition))
    peaks = compute_peaks(read_profile(H100_PROFILE), "cuda")
    floored = read_bundle(floor_bundle(source, peaks, tmp_path / "h200-floor", "h200-floor"))
    assert floored.predictor.regressor.compute_peaks == peaks
    assert floored.document["provenance"]["compute_floor"]["tflops"] == peaks.tflops
    # 8.8 TFLOP of bias-free projection 4096 -> 16384 wide over 1024 tokens, twice as wide as any row: the trees answer
    # from the widest rows they have, at a rate above the measured peak; a narrow one stays far under it.
    wide, narrow = _projection(1024, 4096, 16384), _projection(49, 256, 256)
    idle = source.load_for("idle")[0]
    for load in (idle, source.load_for("level=1.0")[0]):
        before = predict_kernels_under(source.predictor.regressor, [wide, narrow], [load])[0]
        after = predict_kernels_under(floored.predictor.regressor, [wide, narrow], [load])[0]
        floor = wide.flops / (peaks.tflops["fp32"] * 1e9)
        if load is idle:
            assert before[0].mean_ms < 0.8 * floor  # what the floor is for
        assert after[0].mean_ms >= floor * (1 - 1e-9) and after[0].p90_ms >= floor * (1 - 1e-9)
        assert after[0].mean_ms == pytest.approx(max(before[0].mean_ms, floor))
        assert after[1].mean_ms == pytest.approx(before[1].mean_ms)  # far from the peak: untouched
        # the answer says which kernel the floor, not the trees, gave
        assert after[0].at_compute_floor and not after[1].at_compute_floor
        assert not before[0].at_compute_floor


def test_predictor_floor_writes_the_bundle_and_refuses_a_bad_profile_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    assert main(["predictor", "floor", "h200", "h200f", "--device-profile", str(H100_PROFILE)]) == 0
    assert "compute floor at NVIDIA H100 80GB HBM3's measured peaks (fp16 796 TFLOPS, fp32 410 TFLOPS)" in (
        capsys.readouterr().out
    )
    assert load_bundle("h200f").predictor.regressor.compute_peaks is not None
    for argv, message in (
        (["predictor", "floor", "h200", "x", "--device-profile", str(tmp_path / "nowhere")], "no device profile"),
        (["predictor", "floor", "h200", "x", "--device-profile", str(H100_HOST_PROFILE)], "the kernels run on cuda"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("hase: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "data" / "bundles" / "x").exists()
