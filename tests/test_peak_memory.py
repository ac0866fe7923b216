"""Peak memory per model (issue 15 B): predicted from tensor lifetimes, measured around real ORT
sessions (RSS on the CPU EP), stored as additive warehouse columns, and compared in the evaluation."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.peak_memory import (
    ARENA_OVERHEAD,
    CUBLAS_WORKSPACE_BYTES,
    SESSION_BYTES,
    predict_peak_memory,
)
from hase_dagster.learn.memory_evaluation import evaluate_memory
from hase_dagster.learn.predict import Composition, predict_model_under
from hase_dagster.measure.benchmark import BenchmarkTarget, run_benchmarks
from hase_dagster.measure.model_memory import MemoryMeter
from hase_dagster.measure.telemetry import HOST_FIELDS, TelemetrySampler, metric_source
from warehouse.store import Warehouse

MIB = 2**20


def _t(name: str, mib: int) -> TensorInfo:
    return TensorInfo(name, "float", (mib * MIB // 4,))


def _kernel(order: int, inputs: list[TensorInfo], outputs: list[TensorInfo], weights: list[TensorInfo] = ()) -> Kernel:
    return Kernel(
        variant_id="v",
        ep="cpu",
        order=order,
        node_name=f"n{order}",
        family="Conv",
        op_type="Conv",
        domain="",
        absorbed_ops=[],
        absorbed_op_types=[],
        attributes={},
        inputs=[*inputs, *weights],
        outputs=outputs,
        weight_names=[w.name for w in weights],
    )


def _residual_block() -> list[Kernel]:
    """x(1) -> a(4) -> b(2) -> c(1) = Add(b', x): x lives to the end (the caller holds it), a dies
    after b is made; the weight w (8) is shared by two kernels."""
    x, a, b, b2, c, w = _t("x", 1), _t("a", 4), _t("b", 2), _t("b2", 2), _t("c", 1), _t("w", 8)
    return [
        _kernel(2, [b], [b2], [w]),  # out of order on purpose: the prediction sorts by order
        _kernel(0, [x], [a], [w]),
        _kernel(1, [a], [b]),
        _kernel(3, [b2, x], [c]),
    ]


def test_peak_follows_tensor_lifetimes_and_counts_shared_weights_once() -> None:
    peak = predict_peak_memory(_residual_block(), "cpu")
    assert peak.weights_bytes == 8 * MIB
    # Live per step: 0: x+a = 5; 1: x+a+b = 7; 2: x+b+b2 = 5; 3: x+b2+c = 4 -> peak 7 MiB at order 1.
    assert peak.activation_peak_bytes == 7 * MIB and peak.peak_at_order == 1 and peak.peak_node == "n1"
    assert peak.workspace_bytes == 0 and peak.session_bytes == SESSION_BYTES["cpu"]
    assert peak.arena_bytes == int(ARENA_OVERHEAD["cpu"] * 7 * MIB)
    assert peak.total_bytes == 15 * MIB + SESSION_BYTES["cpu"] + peak.arena_bytes


def test_cuda_adds_a_workspace_from_the_largest_kernel() -> None:
    peak = predict_peak_memory(_residual_block(), "cuda")
    assert peak.workspace_bytes == CUBLAS_WORKSPACE_BYTES + 6 * MIB  # kernel 1: a (4) in, b (2) out


def test_meter_sees_memory_held_between_readings() -> None:
    meter = MemoryMeter("cpu")
    # Earlier tests' garbage, collected and trimmed between the readings, once took 10 MiB off the difference.
    gc.collect()
    meter.read()
    before = meter.read()
    held = np.ones(64 * MIB // 8)  # 64 MiB, touched
    after = meter.read()
    assert (after.rss - before.rss) >= 0.9 * 64 * MIB
    del held
    assert meter.read().rss < after.rss - 32 * MIB  # freed memory goes back (malloc_trim), not kept


def test_benchmarks_record_the_memory_a_real_session_held(resnet18_onnx: Path, transformer_onnx: Path) -> None:
    import onnx

    from hase_dagster.core.config import TelemetryOptions, TimingOptions

    timing = TimingOptions(warmup=1, min_loops=2, max_loops=2, min_seconds=0, max_seconds=1)
    telemetry = TelemetryOptions(fields=list(HOST_FIELDS), background_window_s=0.05)
    targets = [BenchmarkTarget(resnet18_onnx, {"variant_id": "r"}), BenchmarkTarget(transformer_onnx, {})]
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        rows = run_benchmarks(targets, "cpu", sampler, timing, telemetry, level="all", measure_memory=True)
        plain = run_benchmarks(targets[:1], "cpu", sampler, timing, telemetry, level="all")
    resnet, transformer = rows
    weights = sum(np.prod(t.dims) * 4 for t in onnx.load(str(resnet18_onnx)).graph.initializer) / 1e6
    # The session holds resnet18's 46.8 MB of weights; the tiny transformer much less.
    assert resnet["status"] == "ok" and 0.8 * weights < resnet["peak_memory_mb"] < 4 * weights
    assert transformer["peak_memory_mb"] < resnet["peak_memory_mb"] and resnet["memory_source"] == "rss"
    assert json.loads(resnet["memory_arena"]) == {"enable_cpu_mem_arena": True, "enable_mem_pattern": True}
    assert "peak_memory_mb" not in plain[0]


MEMORY_COLUMNS = ["peak_memory_mb", "memory_source", "rss_delta_mb", "gpu_process_delta_mb", "device_free_delta_mb",
                  "memory_arena"]  # fmt: skip


def _row(variant: str, level: float, **extra: object) -> dict:
    return {"variant_id": variant, "model_name": "m", "input_size": 224, "status": "ok", "path": "p",
            "stress_level": level, "batch_size": 1, "device": "cpu", "ep": "cpu", **extra}  # fmt: skip


def test_a_warehouse_from_before_the_memory_columns_opens_and_keeps_its_rows(tmp_path: Path) -> None:
    import pandas as pd

    database = tmp_path / "old.duckdb"
    store = Warehouse(database)
    with duckdb.connect(str(database)) as connection:
        for column in MEMORY_COLUMNS:
            connection.execute(f"ALTER TABLE model_benchmarks DROP COLUMN {column}")
    old = {"stress_level": 0.0, "batch_size": 1, "ep": "cpu"}
    store.replace_partition("model_benchmarks", old, pd.DataFrame([_row("old", 0.0, mean_ms=1.0)]))
    reopened = Warehouse(database)
    rows = reopened.query("SELECT * FROM model_benchmarks")
    assert list(rows["variant_id"]) == ["old"] and set(MEMORY_COLUMNS) <= set(rows.columns)
    assert rows["peak_memory_mb"].isna().all()


def test_evaluation_compares_prediction_with_measurement(tmp_path: Path) -> None:
    import pandas as pd

    store = Warehouse(tmp_path / "w.duckdb")
    predicted_mb = predict_peak_memory(_residual_block(), "cpu").total_mb
    rows = [_row("v", level, peak_memory_mb=predicted_mb * 1.25, memory_source="rss") for level in (0.0, 0.5)]
    rows.append(_row("unknown", 0.0, peak_memory_mb=5.0, memory_source="rss"))
    for level in (0.0, 0.5):
        partition = {"stress_level": level, "batch_size": 1, "ep": "cpu"}
        store.replace_partition(
            "model_benchmarks", partition, pd.DataFrame([r for r in rows if r["stress_level"] == level])
        )
    result = evaluate_memory(store, "cpu", {"v": _residual_block()})
    [case] = result.cases.to_dict("records")  # "unknown" has no kernels: not a case
    assert case["rows"] == 2 and case["error_pct"] == pytest.approx(-20.0)
    assert result.mape_pct == pytest.approx(20.0) and "MAPE 20.0% over 1" in result.markdown
    empty = evaluate_memory(Warehouse(tmp_path / "e.duckdb"), "cpu", {})
    assert empty.cases.empty and "No benchmark rows with measured memory" in empty.markdown


class _OneMsRegressor:
    """Every kernel 1 ms: enough to run the prediction path around the memory prediction."""

    ep = "cpu"
    load_fields = ["HOST_CPU_UTIL"]
    batch_sizes = [1]

    def predict_kernels(self, records: list, loads: list) -> list:
        ones = np.ones(len(records))
        return [{"median_ms": ones, "mean_ms": ones, "p90_ms": ones} for _ in loads]

    def knows(self, family: str, kernel: object = None) -> bool:
        return True


def test_predictions_report_predicted_peak_memory(capsys: pytest.CaptureFixture) -> None:
    from hase_dagster.orchestration.cli import _print_prediction

    loads = [({"HOST_CPU_UTIL": 0.0}, "idle"), ({"HOST_CPU_UTIL": 50.0}, "level")]
    predictions = predict_model_under("v", _residual_block(), _OneMsRegressor(), Composition(), loads, 1)
    expected = predict_peak_memory(_residual_block(), "cpu")
    for prediction in predictions:
        document = prediction.to_dict()
        assert document["predicted_peak_memory_mb"] == pytest.approx(expected.total_mb)
        assert document["peak_memory"]["weights_bytes"] == 8 * MIB
    _print_prediction(predictions[0], top=0)
    assert f"peak memory (predicted): {expected.total_mb:.1f} MB: weights 8.4, live activations 7.3 (peak at n1)" in (
        capsys.readouterr().out
    )


def test_memory_command_predicts_and_measures(resnet18_onnx: Path, capsys: pytest.CaptureFixture) -> None:
    from hase_dagster.orchestration.cli import main

    assert main(["memory", str(resnet18_onnx), "--runs", "2", "--json"]) == 0
    out = capsys.readouterr().out
    [row] = json.loads(out[out.index("{\n") :])["models"]  # the document, after any library chatter
    assert row["weights_bytes"] == pytest.approx(46.8e6, rel=0.01) and row["memory_source"] == "rss"
    assert row["error_pct"] == pytest.approx((row["predicted_mb"] / row["peak_memory_mb"] - 1) * 100)
    assert main(["memory", str(resnet18_onnx), "--predict-only"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "measured" not in out
    assert main(["memory", "/nonexistent.onnx"]) == 2
    assert capsys.readouterr().err.startswith("hase: error: no such ONNX file: /nonexistent.onnx")


class _Prediction:
    def __init__(self, ep: str, peak_mb: float) -> None:
        self.ep, self.predicted_peak_memory_mb, self.warnings = ep, peak_mb, []


def test_a_model_larger_than_the_free_host_memory_is_warned_about() -> None:
    from hase_dagster.learn.memory_fit import add_fit_warnings

    huge, small = _Prediction("cpu", 1e9), _Prediction("cpu", 1.0)
    add_fit_warnings([huge, small], "cpu", None)
    assert small.warnings == [] and len(huge.warnings) == 1
    assert (
        "predicted peak memory 1000000000 MB exceeds the" in huge.warnings[0]
        and "host available memory" in (huge.warnings[0])
    )


def test_the_gpu_free_frame_buffer_comes_from_prometheus() -> None:
    """A Prometheus-API server on loopback answers DCGM_FI_DEV_FB_FREE = 100 MiB."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from hase_dagster.learn.memory_fit import add_fit_warnings

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "100"]}]},
            }
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fits, too_big = _Prediction("cuda", 100.0), _Prediction("cuda", 200.0)
        add_fit_warnings([fits, too_big], "cuda", f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert fits.warnings == []  # 100 MiB = 104.9 MB free
    assert too_big.warnings == [
        "predicted peak memory 200 MB exceeds the 105 MB free now on cuda (Prometheus DCGM_FI_DEV_FB_FREE): "
        "the model may not fit beside what already runs there"
    ]
