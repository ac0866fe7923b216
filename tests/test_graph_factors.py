"""In-graph factors (learn.graph_factors): the kernel categories, the fit against GPU kernel times, the
file format's checks, the regressor carrying them, and `hase predictor graph-factors` on the committed
H100 bundle with real ONNX files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.graph_factors import (
    CATEGORIES,
    STANDALONE_OVERHEAD_MS,
    GraphFactors,
    fit_graph_factors,
    idle_work_ms,
    kernel_category,
    read_graph_factors,
    write_graph_factors,
)
from hase_dagster.learn.predict import predict_kernels_under
from tests.conftest import conv_network

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "results" / "bundles" / "h100"


def _conv(group: int, weight_shape: tuple[int, ...], attributes: dict | None = None, op: str = "Conv") -> Kernel:
    weight = TensorInfo("w", "float", weight_shape)
    return Kernel(
        variant_id="v",
        ep="cuda",
        order=0,
        node_name="n",
        family=op,
        op_type=op,
        domain="",
        absorbed_ops=[],
        absorbed_op_types=[],
        attributes={"group": group, **(attributes or {})},
        inputs=[TensorInfo("x", "float", (1, 32, 28, 28)), weight],
        outputs=[TensorInfo("y", "float", (1, 32, 28, 28))],
        weight_names=["w"],
    )


def test_kernel_categories_follow_groups_and_kernel_shape() -> None:
    assert kernel_category(_conv(32, (32, 1, 3, 3))) == "conv_depthwise"
    assert kernel_category(_conv(4, (32, 8, 3, 3))) == "conv_grouped"
    assert kernel_category(_conv(1, (64, 32, 1, 1))) == "conv_1x1"
    assert kernel_category(_conv(1, (64, 32, 3, 3))) == "conv_kxk"
    # kernel_shape from the attribute wins over the weight's, and FusedConv is a convolution too
    assert kernel_category(_conv(1, (64, 32, 3, 3), {"kernel_shape": [1, 1]}, op="FusedConv")) == "conv_1x1"
    matmul = _conv(1, (64, 32, 1, 1), op="MatMul")
    assert kernel_category(matmul) == "matmul"
    assert kernel_category(_conv(1, (64, 32, 1, 1), op="Relu")) == "other"


def test_fit_recovers_known_factors_and_leaves_absent_categories_at_one() -> None:
    rng = np.random.default_rng(3)
    truth = {"conv_1x1": 0.8, "conv_kxk": 1.05, "conv_depthwise": 1.15, "conv_grouped": 1.0, "matmul": 0.9}
    work = [{c: float(rng.uniform(0.05, 2.0)) for c in truth} | {"other": 0.0} for _ in range(60)]
    gpu = [sum(truth[c] * w[c] for c in truth) for w in work]
    fitted = fit_graph_factors(work, gpu, ridge=0.0)
    for category, factor in truth.items():
        assert fitted.factors[category] == pytest.approx(factor, abs=0.01)
    assert fitted.factors["other"] == 1.0  # no network has it
    assert fitted.scores["mean_abs_error_pct_after"] < 0.5 < fitted.scores["mean_abs_error_pct_before"]
    # a strong pull keeps the factors near 1
    pulled = fit_graph_factors(work, gpu, ridge=1e6)
    assert all(abs(f - 1.0) < 0.01 for f in pulled.factors.values())


def test_fit_refuses_empty_or_non_positive_times() -> None:
    with pytest.raises(HaseError, match="need networks"):
        fit_graph_factors([], [])
    with pytest.raises(HaseError, match="positive"):
        fit_graph_factors([{"conv_1x1": 1.0}], [0.0])


def test_scale_keeps_the_clock_overhead_and_files_round_trip(tmp_path: Path) -> None:
    factors = GraphFactors({c: 1.0 for c in CATEGORIES} | {"conv_1x1": 0.5})
    assert factors.scale("conv_1x1", STANDALONE_OVERHEAD_MS + 0.1) == pytest.approx(STANDALONE_OVERHEAD_MS + 0.05)
    assert factors.scale("conv_1x1", STANDALONE_OVERHEAD_MS / 2) == STANDALONE_OVERHEAD_MS / 2
    assert factors.scale("matmul", 0.3) == pytest.approx(0.3)
    path = write_graph_factors(factors, tmp_path / "f.json")
    assert read_graph_factors(path) == factors
    data = json.loads(path.read_text())
    for bad, message in (
        ({**data, "factors": {"conv_3d": 1.0}}, "unknown kernel categories"),
        ({**data, "factors": {"conv_1x1": 7.0}}, "outside"),
        ({**data, "format": "other"}, "not a graph-factors document"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(HaseError, match=message):
            read_graph_factors(path)
    path.write_text("{")
    with pytest.raises(HaseError, match="cannot read graph factors"):
        read_graph_factors(path)


@pytest.fixture(scope="module")
def h100_bundle():
    if not H100.is_dir():
        pytest.skip("no committed H100 bundle")
    from hase_dagster.learn.bundles import load_bundle

    return load_bundle(H100)


def test_graph_factors_command_fits_the_committed_bundle_on_real_files(tmp_path: Path, h100_bundle) -> None:
    files = tmp_path / "files"
    files.mkdir()
    shapes = [(4, 32, 56), (16, 64, 28), (1, 96, 112), (8, 128, 14), (2, 48, 56), (32, 32, 28)]
    paths = [conv_network(files / f"net{i}_b{b}.onnx", b, c, s) for i, (b, c, s) in enumerate(shapes)]
    regressor = h100_bundle.predictor.regressor
    rows = []
    for path, (batch, _, _) in zip(paths, shapes, strict=True):
        kernels, _ = h100_bundle.kernels(path, batch)
        work = idle_work_ms(regressor, kernels, STANDALONE_OVERHEAD_MS)
        # the GPU ran the 1x1 convolutions at half their standalone prediction, the rest as predicted
        rows.append({"file": path.name, "gpu_kernel_ms": sum(work.values()) - 0.5 * work["conv_1x1"]})
    cupti = tmp_path / "gpu_time.jsonl"
    cupti.write_text("".join(json.dumps(r) + "\n" for r in rows) + json.dumps({"file": "elsewhere.onnx"}) + "\n")
    out = tmp_path / "factors.json"
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "predictor", "graph-factors"]
    done = subprocess.run(
        [*command, "--predictor", str(H100), "--cupti", str(cupti), "--files", str(files), "--out", str(out)]
        + ["--ridge", "0.001"],  # six small networks: a stronger pull toward 1 would outweigh them
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    factors = read_graph_factors(out)
    assert factors.fitted_on == len(paths)
    # the ridge pulls the halving (0.5) toward 1: 0.654 with the h100 bundle of 2026-11-29 03:00 UTC, 0.700 with
    # that of 06:10 UTC
    assert factors.factors["conv_1x1"] < 0.75
    assert factors.factors["conv_kxk"] == pytest.approx(1.0, abs=0.1)
    assert factors.scores["mean_abs_error_pct_after"] < factors.scores["mean_abs_error_pct_before"]

    # the regressor carries them: kernel times scale by category, and a saved entry names them
    kernels, _ = h100_bundle.kernels(paths[0], shapes[0][0])
    idle = dict.fromkeys(regressor.load_fields, 0.0)
    (plain,) = predict_kernels_under(regressor, kernels, [idle])
    regressor.graph_factors = factors
    try:
        (scaled,) = predict_kernels_under(regressor, kernels, [idle])
    finally:
        regressor.graph_factors = None
    for kernel, before, after in zip(kernels, plain, scaled, strict=True):
        assert after.mean_ms == pytest.approx(factors.scale(kernel_category(kernel), before.mean_ms))
    assert any(after.mean_ms < before.mean_ms for after, before in zip(scaled, plain, strict=True))
    entry = json.loads((H100 / "predictor" / "predictor.json").read_text())["regressor"]
    assert (
        type(regressor).load(entry | {"graph_factors": factors.to_json()}, H100 / "predictor").graph_factors == factors
    )

    # bad input: a one-line error and exit 2
    cupti.write_text("not json\n")
    failed = subprocess.run(
        [*command, "--predictor", str(H100), "--cupti", str(cupti), "--files", str(files), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert failed.returncode == 2
    assert failed.stderr.startswith("hase: error:") and "is not a GPU-time row" in failed.stderr
    assert "Traceback" not in failed.stderr
