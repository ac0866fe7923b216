"""Regressor, prediction and evaluation on real measurements of a tiny zoo (in-process Dagster)."""

import base64
import copy
import json
import struct
from dataclasses import replace
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml

from assets.analysis import analysis_assets
from assets.learning import learning_assets
from assets.measurement import measurement_assets
from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.predict import (
    HOST_BOUND_SHARE,
    Composition,
    KernelPrediction,
    Sums,
    gpu_busy_share,
    kernel_sums,
    pipelined_end_ms,
)
from hase_dagster.learn.predict_file import resolve_load, with_batch_size
from hase_dagster.learn.regressor import mape, training_rows, within
from hase_dagster.learn.timeslice import TimeSlicing
from hase_dagster.learn.training import Predictor, load_at_level, predictor_path, train_predictor
from hase_dagster.orchestration.cli import main
from resources.hase import HaseResource
from resources.prometheus import PrometheusResource
from resources.stressor import StressorResource
from tests.conftest import TEST_PROFILE
from warehouse.store import Warehouse


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Analysis, benchmarks at stress 0 and 0.5, and the learning assets, for batch size 1."""
    root = tmp_path_factory.mktemp("learning")
    config = root / "hase.yaml"
    document = copy.deepcopy(TEST_PROFILE)
    document["profiles"]["tiny"]["models"].append({"name": "squeezenet1_1", "held_out": True})
    # A design-space probe (a 7x7 depthwise cell): its kernels train, it is never a test case.
    document["profiles"]["tiny"]["models"].append({"name": "dsp_s12", "kind": "design_probe", "seed": 12})
    # resnet18 also in fp16 and int8 (issue 15 C): trained on with the fp32 models, evaluated per precision.
    document["profiles"]["tiny"]["models"][0]["precisions"] = ["fp32", "fp16", "int8"]
    # As the default cpu profile: the composition fitted on out-of-sample kernel sums.
    document["profiles"]["tiny"]["cross_fit_composition"] = True
    config.write_text(yaml.safe_dump(document))
    hase = HaseResource(config_path=str(config), data_directory=str(root / "data"))
    resources = {
        "hase": hase,
        "stressor": StressorResource(),
        "prometheus": PrometheusResource(url="http://127.0.0.1:9"),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["1"])
    assert dg.materialize(analysis_assets, partition_key="1", resources=resources, instance=instance).success
    for level in ("0.00", "0.50"):
        key = dg.MultiPartitionKey({"stress_level": level, "batch_size": "1"})
        assert dg.materialize(measurement_assets, partition_key=key, resources=resources, instance=instance).success
    result = dg.materialize(learning_assets, resources=resources, instance=instance)
    return {
        "hase": hase,
        "resources": resources,
        "instance": instance,
        "result": result,
        "root": root,
        "config": config,
    }


def test_learning_assets_train_predict_and_report(trained: dict) -> None:
    result, hase = trained["result"], trained["hase"]
    assert result.success
    metadata = result.asset_materializations_for_node("latency_regressor")[0].metadata
    comparison = metadata["comparison"].value
    assert all(kind in comparison for kind in ("flops_baseline", "random_forest", "xgboost"))
    assert set(metadata["held_out_architectures"].value) >= {"resnet18", "transformer_encoder"}
    assert "dsp_s12" not in metadata["held_out_architectures"].value  # a probe is always trained on
    saved = json.loads((predictor_path(hase.paths().root, "cpu") / "predictor.json").read_text())
    assert saved["regressor"]["load_fields"] == ["HOST_CPU_UTIL"] and "xgboost" in saved["regressor"]["versions"]
    assert set(saved["regressor"]["targets"]) == {"median_ms", "mean_ms", "p90_ms"}
    assert saved["composition"]["cross_fitted"] is True  # the profile asks for it
    store = hase.warehouse()
    predictions = store.query("SELECT * FROM latency_predictions")
    # every variant at both benchmarked loads; Prometheus is unreachable here, so no current-load row
    assert set(predictions["load_source"]) == {"level=0.00", "level=0.50"}
    assert len(predictions) == 6 * 2 and (predictions["predicted_ms"] > 0).all()
    assert (predictions["p90_ms"] >= predictions["predicted_ms"]).all()
    report = hase.paths().root / "reports" / "cpu"
    assert (report / "evaluation.png").stat().st_size > 1000
    assert "held_out_architecture" in (report / "evaluation.md").read_text()
    cases = store.query("SELECT * FROM evaluation_cases")
    # 2 training architectures (each its own family) x 2 levels x 3 settings, resnet18's fp16 and int8
    # x 2 levels x 2 settings (trained_on_all, unseen_precision: no other model has them), 2 never-seen cases;
    # the design-space probe is in none of them (and no family left out is design_space).
    assert len(cases) == 2 * 2 * 3 + 2 * 2 * 2 + 2
    assert set(cases.loc[cases["setting"] == "unseen_precision", "precision"]) == {"fp16", "int8"}
    by_family = cases[cases["setting"] == "held_out_family"]
    assert set(by_family["family"]) == {"residual_cnn", "text_transformer"}
    assert set(cases["size"]) <= {"under_2ms", "2ms_and_more"} and cases["size"].notna().all()
    never_seen = cases[cases["setting"] == "never_seen"]
    assert set(never_seen["architecture"]) == {"squeezenet1_1"} and never_seen["idle_kernel_sum_ms"].notna().all()
    assert set(cases.loc[cases["setting"] != "never_seen", "architecture"]) == {"resnet18", "transformer_encoder"}


def test_precisions_are_trained_on_predicted_and_reported(trained: dict) -> None:
    hase = trained["hase"]
    store = hase.warehouse()
    cases = store.query("SELECT * FROM evaluation_cases WHERE architecture = 'resnet18'")
    assert sorted(cases["precision"].unique()) == ["fp16", "fp32", "int8"]
    predictions = store.query("SELECT variant_id, precision FROM latency_predictions")
    assert set(predictions.loc[predictions["variant_id"] == "resnet18_i64_b1_int8", "precision"]) == {"int8"}
    # The int8 kernels were timed and trained on, with precision among the regressor's features.
    kernels = store.query("SELECT precision, count(*) AS n FROM kernel_benchmarks GROUP BY 1").set_index("precision")
    assert kernels.loc["int8", "n"] > 20
    predictor = Predictor.load(predictor_path(hase.paths().root, "cpu"))
    assert {"elem_bytes", "precision_int8", "precision_fp16"} <= set(predictor.regressor.numeric_columns)
    assert "com.microsoft.QLinearConv" in predictor.regressor.ops or ".QLinearConv" in predictor.regressor.ops
    report = (hase.paths().root / "reports" / "cpu" / "evaluation.md").read_text()
    assert "## By precision" in report and "## Precision speed-ups" in report
    from hase_dagster.learn.evaluation import kernel_precisions_of_variants

    placed = kernel_precisions_of_variants(store, "cpu").set_index(["variant_id", "kernel_precision"])
    # Every int8 convolution runs in INT8 on the CPU EP; the fp16 model's convolutions run in fp32.
    int8 = placed.loc[("resnet18_i64_b1_int8", "int8")]
    assert "QLinearConv" in int8["ops"] and int8["provider"] == "CPUExecutionProvider" and int8["idle_ms"] > 0
    assert "FusedConv" in placed.loc[("resnet18_i64_b1_fp16", "fp32"), "ops"]
    speedups = trained["result"].asset_materializations_for_node("evaluation_report")[0].metadata
    table = speedups["precision_speedups"].value
    # fp16 and int8 of resnet18, trained on and with their precision unseen, at both stress levels.
    assert table.count("resnet18_i64_b1_int8") == 2 * 2 and table.count("resnet18_i64_b1_fp16") == 2 * 2
    assert "unseen_precision" in table


def test_the_evaluation_plot_fits_the_ui_metadata_dialog(trained: dict) -> None:
    """The UI shows a markdown image at its own size: the plot in the metadata is 640 px wide at most
    (the report's side-by-side plot was 1980 px, wider than the dialog)."""
    metadata = trained["result"].asset_materializations_for_node("evaluation_report")[0].metadata
    markdown = metadata["scatter"].value
    assert markdown.startswith("![predicted vs measured](data:image/png;base64,")
    png = base64.b64decode(markdown.split("base64,", 1)[1].rstrip(")"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert 300 <= width <= 640 and height > width  # three settings stacked
    assert metadata["plot"].value.endswith("evaluation.png")


def test_predictor_bundle_asset_writes_a_bundle_that_predicts_as_its_predictor(trained: dict) -> None:
    from hase_dagster.learn.bundles import read_bundle

    result = trained["result"]
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["bundle_predicts_as_its_predictor"]
    folder = Path(result.asset_materializations_for_node("predictor_bundle")[0].metadata["path"].value)
    bundle = read_bundle(folder)
    assert folder.parent == trained["hase"].paths().bundles and bundle.ep == "cpu"
    assert sorted(bundle.levels) == [0.0, 0.5]
    assert bundle.document["provenance"]["training"]["never_seen"] == {"squeezenet1_1": "dense_concat"}
    # the design-space probe trains the bundle but is no case of its figures
    networks = (
        trained["hase"]
        .warehouse()
        .query(
            """SELECT count(*) AS n FROM model_benchmarks b JOIN model_files f USING (variant_id)
           WHERE b.status = 'ok' AND NOT f.held_out AND f.family != 'design_space'"""
        )["n"][0]
    )
    assert bundle.document["evaluation"]["whole_model"]["trained_on_all"]["cases"] == networks > 0


def test_a_cpu_bundle_records_its_timings_host_reading_and_predicts_at_another(
    trained: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The composition keeps the median loop reading of the idle model timings it was fitted on; with it a CPU
    prediction at idle moves with a host reading (elasticity 0.85), a loaded one stays and says why."""
    from hase_dagster.learn.host_speed import CPU_HOST_ELASTICITY
    from hase_dagster.measure.host_speed import interpreter

    result = trained["result"]
    folder = Path(result.asset_materializations_for_node("predictor_bundle")[0].metadata["path"].value)
    readings = (
        trained["hase"]
        .warehouse()
        .query(
            """SELECT b.host_loop_ms FROM model_benchmarks b JOIN model_files f USING (variant_id)
               WHERE b.ep = 'cpu' AND b.status = 'ok' AND b.stress_level = 0 AND NOT f.held_out"""
        )["host_loop_ms"]
    )
    composition = Predictor.load(predictor_path(Path(trained["hase"].data_directory), "cpu")).composition
    assert readings.notna().all() and composition.host_loop_ms == pytest.approx(readings.median())
    fast, slow = composition.host_loop_range_ms or (0.0, 0.0)  # the readings' 10th and 90th percentiles
    assert fast == pytest.approx(readings.quantile(0.1)) and slow == pytest.approx(readings.quantile(0.9))
    assert composition.host_loop_python == interpreter()

    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    model = export_variant(ModelVariant(ZooModel(name="squeezenet1_1"), 64, 1), tmp_path, 17).path

    def answer(load: str, *extra: str) -> dict:
        argv = ["predict", str(model), "--predictor", str(folder), "--batch-size", "1", "--load", load]
        assert main([*argv, "--top", "0", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    slower = str(2 * composition.host_loop_ms)
    idle, idle_slow = answer("idle"), answer("idle", "--host-reading", slower)
    assert idle_slow["predicted_ms"] == pytest.approx(idle["predicted_ms"] * (1 + CPU_HOST_ELASTICITY), rel=1e-3)
    loaded, loaded_slow = answer("level=0.5"), answer("level=0.5", "--host-reading", slower)
    assert loaded_slow["predicted_ms"] == pytest.approx(loaded["predicted_ms"])
    assert any("at idle only" in w for w in loaded_slow["warnings"])
    # the host's range: an idle CPU run moves by the elasticity over the readings' deciles, a loaded one not at all
    assert idle["host_range_ms"] == pytest.approx(
        [idle["predicted_ms"] * (1 + CPU_HOST_ELASTICITY * (ms / composition.host_loop_ms - 1)) for ms in (fast, slow)]
    )
    assert loaded["host_range_ms"] == pytest.approx([loaded["predicted_ms"]] * 2)


def test_the_evaluation_predicts_each_cpu_case_at_its_timings_host_reading(trained: dict) -> None:
    """Every case also carries its timing's loop reading and the prediction at it (hase predict --host-reading):
    idle cases move from the setting's reference, loaded ones stay; the report shows both figures."""
    from hase_dagster.learn.host_speed import CPU_HOST_ELASTICITY

    hase = trained["hase"]
    store = hase.warehouse()
    cases = store.query("SELECT * FROM evaluation_cases")
    readings = store.query(
        "SELECT variant_id, stress_level, host_loop_ms AS timed_reading FROM model_benchmarks WHERE status = 'ok'"
    )
    cases = cases.merge(readings, on=["variant_id", "stress_level"])
    assert cases["host_loop_ms"].notna().all()
    assert cases["host_loop_ms"].to_numpy() == pytest.approx(cases["timed_reading"].to_numpy())
    assert cases["predicted_at_reading_ms"].notna().all()
    reference = Predictor.load(predictor_path(Path(hase.data_directory), "cpu")).composition.host_loop_ms
    shipped = cases[cases["setting"].isin(["trained_on_all", "never_seen"])]
    idle, loaded = shipped[shipped["stress_level"] == 0], shipped[shipped["stress_level"] > 0]
    factor = 1 + CPU_HOST_ELASTICITY * (idle["host_loop_ms"] / reference - 1)
    assert len(idle) and len(loaded)
    assert idle["predicted_at_reading_ms"].to_numpy() == pytest.approx((idle["predicted_mean_ms"] * factor).to_numpy())
    assert loaded["predicted_at_reading_ms"].to_numpy() == pytest.approx(loaded["predicted_mean_ms"].to_numpy())
    # the host range of every shipped case brackets its prediction; a loaded case's is its point
    low, high = shipped["host_range_low_ms"].to_numpy(), shipped["host_range_high_ms"].to_numpy()
    assert (low <= shipped["predicted_mean_ms"].to_numpy() * (1 + 1e-9)).all()
    assert (shipped["predicted_mean_ms"].to_numpy() <= high * (1 + 1e-9)).all()
    assert (idle["host_range_high_ms"] > idle["host_range_low_ms"]).all()
    assert loaded["host_range_low_ms"].to_numpy() == pytest.approx(loaded["host_range_high_ms"].to_numpy())
    report = (hase.paths().root / "reports" / "cpu" / "evaluation.md").read_text()
    assert "## At each timing's host reading" in report and "at_reading_mape_pct" in report
    assert "host_range_within_10_pct" in report


def test_held_out_model_is_measured_but_never_trained_on(trained: dict) -> None:
    store = trained["hase"].warehouse()
    only_held_out = store.query(
        """SELECT k.instance_id FROM kernels k JOIN model_files f USING (variant_id)
           GROUP BY 1 HAVING bool_and(f.held_out)"""
    )["instance_id"]
    assert len(only_held_out) > 5
    timed = store.query("SELECT instance_id, stress_level FROM kernel_benchmarks")
    held_out_levels = timed[timed["instance_id"].isin(only_held_out)]["stress_level"]
    # timed at idle (the load-blind baseline needs it), never under load
    assert set(held_out_levels) == {0.0}
    rows = training_rows(store, "cpu")
    assert not rows["instance_id"].isin(only_held_out).any()
    assert "dsp_s12" in ",".join(rows["architecture"])  # the probe's kernels train the regressor
    assert "squeezenet1_1" not in ",".join(rows["architecture"])
    models = store.query("SELECT DISTINCT variant_id FROM model_benchmarks")["variant_id"]
    assert "squeezenet1_1_i64_b1" in set(models)
    assert "dsp_s12_i64_b1" not in set(models)  # and it is not timed whole (time_design_probes is off)


def test_blocking_check_stops_downstream_when_mape_too_high(trained: dict) -> None:
    document = yaml.safe_load(trained["config"].read_text())
    document["max_held_out_rows_mape_pct"] = 0.001
    strict = trained["root"] / "strict.yaml"
    strict.write_text(yaml.safe_dump(document))
    hase = HaseResource(config_path=str(strict), data_directory=trained["hase"].data_directory)
    resources = {**trained["resources"], "hase": hase}
    result = dg.materialize(learning_assets, resources=resources, instance=trained["instance"], raise_on_error=False)
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    # (the test profile names no reference tables and no bundle to calibrate: those checks pass, with the reason)
    assert checks == {
        "reference_rows_calibrated": True,
        "calibration_cross_validated": True,
        "held_out_rows_mape_within_limit": False,
    }
    assert not result.asset_materializations_for_node("latency_predictions")


def test_predict_a_model_outside_the_zoo(
    trained: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASE_DATA_DIR", trained["hase"].data_directory)
    model = export_variant(ModelVariant(ZooModel(name="squeezenet1_1"), 64, 1), tmp_path, 17).path
    assert main(["predict", str(model), "--batch-size", "1", "--load", "level=0.5", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"predicted_ms", "p90_ms", "critical_path_ms", "coverage", "kernels"} <= set(document)
    assert document["predicted_ms"] > 0 and document["p90_ms"] >= document["predicted_ms"]
    coverage = document["coverage"]
    # squeezenet's Concat was never benchmarked: flagged, counted and still estimated, never dropped
    assert "Concat" in coverage["fallback_families"] and coverage["fallback"] == 8
    assert len(document["kernels"]) == coverage["kernels"] == coverage["covered"] + coverage["fallback"]
    assert any("families without a trained regressor" in w for w in document["warnings"])
    assert sum(k["fallback"] for k in document["kernels"]) == coverage["fallback"]
    # and how much of the kernel sum rests on those estimates
    fallback_ms = sum(k["mean_ms"] for k in document["kernels"] if k["fallback"])
    share = fallback_ms / sum(k["mean_ms"] for k in document["kernels"])
    assert 0 < coverage["fallback_share"] < 1 and coverage["fallback_share"] == pytest.approx(share, abs=1e-4)


def test_predict_an_int8_file_at_its_own_precision(
    trained: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hase_dagster.analysis.precision import int8_variant

    monkeypatch.setenv("HASE_DATA_DIR", trained["hase"].data_directory)
    model = export_variant(ModelVariant(ZooModel(name="resnet18"), 64, 1), tmp_path, 17).path
    quantized = int8_variant(model, tmp_path / "resnet18_q.onnx")
    assert main(["predict", str(model), str(quantized), "--batch-size", "1", "--load", "idle", "--json"]) == 0
    fp32, int8 = json.loads(capsys.readouterr().out)["predictions"]
    assert (fp32["precision"], int8["precision"]) == ("fp32", "int8")
    # The int8 file is analysed as ORT runs it: its convolutions are the QLinearConv kernels trained on.
    families = [k["family"] for k in int8["kernels"]]
    assert families.count("QLinearConv") == 20 and "QLinearConv" not in {k["family"] for k in fp32["kernels"]}
    assert int8["predicted_ms"] > 0 and int8["predicted_ms"] != fp32["predicted_ms"]


def test_unbenchmarked_batch_and_load_errors(trained: dict, tmp_path: Path) -> None:
    store = Warehouse(Path(trained["hase"].data_directory) / "hase.duckdb")
    with pytest.raises(HaseError, match=r"never benchmarked on cpu; benchmarked: \[0.0, 0.5\]"):
        load_at_level(store, "cpu", 1.0)
    with pytest.raises(HaseError, match="prometheus, idle or level=X"):
        resolve_load("busy", store, "cpu", ["HOST_CPU_UTIL"], "http://127.0.0.1:9")
    with pytest.raises(HaseError, match="does not answer"):
        resolve_load("prometheus", store, "cpu", ["HOST_CPU_UTIL"], "http://127.0.0.1:9")
    predictor = Predictor.load(predictor_path(Path(trained["hase"].data_directory), "cpu"))
    from hase_dagster.learn.predict import predict_model
    from hase_dagster.learn.training import kernels_by_variant

    kernels = kernels_by_variant(store, "cpu")["resnet18_i64_b1"]
    prediction = predict_model(
        "r18", kernels, predictor.regressor, predictor.composition, load_at_level(store, "cpu", 0.0), "idle", 8
    )
    assert any("batch size 8 was never benchmarked" in w for w in prediction.warnings)


def test_empty_benchmarks_and_missing_predictor_are_clear(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "empty.duckdb")
    with pytest.raises(HaseError, match="only 0 measured kernel rows"):
        train_predictor(store, "cpu")
    with pytest.raises(HaseError, match="materialize latency_regressor first"):
        Predictor.load(tmp_path / "nothing")


def test_batch_size_of_a_file(tmp_path: Path, resnet18_onnx: Path) -> None:
    assert with_batch_size(resnet18_onnx, 1, tmp_path) == resnet18_onnx
    with pytest.raises(HaseError, match="fixed batch size of 1, not 4"):
        with_batch_size(resnet18_onnx, 4, tmp_path)


def test_composition_recovers_a_known_law() -> None:
    rng = np.random.default_rng(0)
    points = []
    for _ in range(12):
        idle = float(rng.uniform(1, 50))
        util = float(rng.uniform(0, 100))
        kernels = int(rng.integers(5, 200))
        sums = Sums(
            median_ms=0,
            mean_ms=idle * float(rng.uniform(1, 3)),
            p90_ms=0,
            kernels=kernels,
            load_util=util,
            idle_mean_ms=idle,
        )
        # a law that ignores the loaded sum, with a per-kernel saving and a per-run overhead
        truth = 1.1 * idle + 0.8 * util / 100 * idle - 0.002 * kernels + 0.5
        points.append((sums, truth, truth * 1.2))
    fitted = Composition.fit(points)
    assert fitted.mean_coefficients is not None
    coefficients = {name: fitted.mean_coefficients[name] for name in ("idle_kernels", "load_share_x_idle", "per_run")}
    assert coefficients == pytest.approx({"idle_kernels": 1.1, "load_share_x_idle": 0.8, "per_run": 0.5}, abs=0.02)
    assert fitted.mean_coefficients["loaded_kernels"] == pytest.approx(0.0, abs=0.01)
    mean, p90 = fitted.apply(Sums(0, 30.0, 12.0, 5, 50.0, idle_mean_ms=10.0))
    assert mean == pytest.approx(11.0 + 4.0 - 0.01 + 0.5, rel=0.01) and p90 >= mean
    assert Composition.fit(points[:2]).apply(Sums(0, 10.0, 12.0, 5, 50.0)) == (10.0, 12.0)


def test_composition_learns_a_per_kernel_dispatch_cost() -> None:
    """Device-clocked kernels lack the host's dispatch gap between kernels: the fitted per-kernel
    term must be able to add time, not only take it away."""
    points = []
    for idle, kernels in [(1.0, 120), (2.0, 60), (5.0, 300), (8.0, 150), (3.0, 500)]:
        truth = idle + 0.004 * kernels + 0.1
        points.append((Sums(0, idle, idle, kernels, 0.0, idle_mean_ms=idle), truth, truth))
    fitted = Composition.fit(points)
    assert fitted.mean_coefficients is not None and fitted.mean_coefficients["per_kernel"] == pytest.approx(
        0.004, abs=5e-4
    )
    assert fitted.apply(Sums(0, 4.0, 4.0, 100, 0.0, idle_mean_ms=4.0))[0] == pytest.approx(4.5, rel=0.02)


def test_composition_learns_a_per_run_wait_under_load() -> None:
    """Under GPU time-slicing a run waits out the co-tenant's slice once, whatever its length: a
    0.1 ms model and a 20 ms model both pay about 1 ms at full load."""
    points = []
    for idle in (0.1, 0.3, 1.0, 3.0, 10.0, 20.0):
        for util in (0.0, 50.0, 100.0):
            truth = idle + 1.0 * util / 100 + 0.1 * util / 100 * idle
            points.append((Sums(0, idle, idle, 10, util, idle_mean_ms=idle), truth, truth))
    fitted = Composition.fit(points)
    assert fitted.mean_coefficients is not None
    assert fitted.mean_coefficients["load_share_per_run"] == pytest.approx(1.0, abs=0.05)
    small = fitted.apply(Sums(0, 0.09, 0.09, 10, 100.0, idle_mean_ms=0.09))[0]
    assert small == pytest.approx(0.09 + 1.0 + 0.009, rel=0.05)


def test_composition_finds_the_launch_bound_regime() -> None:
    """Kernels shorter than the host's dispatch leave the GPU idle: a model of many tiny kernels
    takes dispatch x count, not the sum of its kernels."""
    rng = np.random.default_rng(1)
    points = []
    for _ in range(20):
        count = int(rng.integers(5, 300))
        kernel_ms = tuple(float(v) for v in rng.lognormal(np.log(rng.uniform(0.002, 0.2)), 0.5, count))
        idle = sum(kernel_ms)
        truth = sum(max(g, 0.008) for g in kernel_ms) + 0.05
        points.append((Sums(0, idle, idle, count, 0.0, idle_mean_ms=idle, idle_kernel_ms=kernel_ms), truth, truth))
    fitted = Composition.fit(points)
    assert fitted.dispatch_ms == 0.008
    tiny = tuple([0.002] * 100)
    assert fitted.apply(Sums(0, 0.2, 0.2, 100, 0.0, idle_mean_ms=0.2, idle_kernel_ms=tiny))[0] == pytest.approx(
        0.85, rel=0.05
    )


def test_pipelined_dispatch_hides_short_kernels_queued_behind_a_long_one() -> None:
    """The host issues a kernel every 10 us; tiny kernels queued behind a 1 ms kernel cost no GPU
    idle time, while the same tiny kernels alone leave the GPU waiting on the host."""
    queued = (1.0,) + (0.001,) * 50
    assert pipelined_end_ms(queued, 0.010) == pytest.approx(0.010 + 1.0 + 50 * 0.001)
    alone = (0.001,) * 50
    assert pipelined_end_ms(alone, 0.010) == pytest.approx(50 * 0.010 + 0.001)
    behind = Sums(0, 1.05, 1.05, 51, 0.0, idle_mean_ms=1.05, idle_kernel_ms=queued)
    assert behind.dispatch_stall_ms(0.010) == pytest.approx(0.010)
    assert behind.launch_shortfall_ms(0.010) == pytest.approx(50 * 0.009)


def test_composition_fits_a_pipelined_host() -> None:
    """Models whose latency is the pipelined dispatch's end: the fit picks that dispatch time and
    predicts a host-bound model it never saw."""
    rng = np.random.default_rng(2)
    points = []
    for _ in range(24):
        count = int(rng.integers(10, 300))
        kernel_ms = tuple(float(v) for v in rng.lognormal(np.log(rng.uniform(0.003, 0.3)), 1.0, count))
        truth = pipelined_end_ms(kernel_ms, 0.012)
        idle = sum(kernel_ms)
        points.append((Sums(0, idle, idle, count, 0.0, idle_mean_ms=idle, idle_kernel_ms=kernel_ms), truth, truth))
    fitted = Composition.fit(points)
    assert fitted.dispatch_ms == 0.012
    tiny = (0.5,) + (0.002,) * 100
    unseen = Sums(0, 0.7, 0.7, 101, 0.0, idle_mean_ms=0.7, idle_kernel_ms=tiny)
    assert fitted.apply(unseen)[0] == pytest.approx(pipelined_end_ms(tiny, 0.012), rel=0.05)


def test_a_loaded_launch_bound_run_hides_part_of_its_wait_in_its_own_dispatch_gaps() -> None:
    """Truth: idle launch-bound latency plus a load penalty in proportion to the kernels' sum, less half
    the launch shortfall at full load (the co-tenant runs while the GPU would wait on the host). The fit
    finds the negative shortfall-under-load term and predicts an unseen loaded host-bound model; the
    term can never be fitted positive."""
    rng = np.random.default_rng(3)
    gpu = TimeSlicing()
    points = []
    for _ in range(40):
        count = int(rng.integers(10, 300))
        kernel_ms = tuple(float(v) for v in rng.lognormal(np.log(rng.uniform(0.002, 0.2)), 0.5, count))
        idle = sum(kernel_ms)
        for util in (0.0, 50.0, 100.0):
            sums = Sums(0, idle, idle, count, util, idle_mean_ms=idle, idle_kernel_ms=kernel_ms, time_slicing=gpu)
            shortfall = sums.launch_shortfall_ms(0.010)
            truth = idle + shortfall + util / 100 * (0.6 * idle - 0.5 * shortfall)
            points.append((sums, truth, truth))
    fitted = Composition.fit(points)
    assert fitted.dispatch_ms == 0.010
    assert fitted.mean_coefficients is not None
    assert fitted.mean_coefficients["load_share_x_shortfall"] == pytest.approx(-0.5, abs=0.05)
    tiny = (0.002,) * 200
    unseen = Sums(0, 0.4, 0.4, 200, 100.0, idle_mean_ms=0.4, idle_kernel_ms=tiny, time_slicing=gpu)
    shortfall = unseen.launch_shortfall_ms(0.010)
    # The CPU EP does not time-slice: there the term is 0 whatever the load.
    assert replace(unseen, time_slicing=None).values(0.010)["load_share_x_shortfall"] == 0.0
    assert fitted.apply(unseen)[0] == pytest.approx(0.4 + shortfall + 0.6 * 0.4 - 0.5 * shortfall, rel=0.03)
    # A load that lengthens launch-bound runs is no evidence for hiding: the term stays at its bound, 0.
    lengthened = [(s, t + 2 * s.load_util / 100 * s.launch_shortfall_ms(0.010)) for s, t, _ in points]
    refitted = Composition.fit([(s, t, t) for s, t in lengthened]).mean_coefficients
    assert refitted is not None and refitted["load_share_x_shortfall"] == pytest.approx(0.0, abs=1e-9)


def test_view_ops_cost_a_model_nothing_and_an_older_fit_still_charges_them() -> None:
    """A model aliases its view ops (Reshape, Squeeze...): their standalone time is no cost, even when
    the training models that have views happen to measure slower. A composition fitted before the term
    was retired still loads and applies its view coefficient."""
    points = []
    for i, idle in enumerate((0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)):
        views = 0.1 * idle if i % 2 else 0.0
        # Models with views measure 5% slower here: a fitted view term would take that as their cost.
        truth = 1.1 * (idle - views) * (1.05 if views else 1.0) + 0.05
        sums = Sums(0, idle, idle, 20, 0.0, idle_mean_ms=idle, view_idle_ms=views, view_mean_ms=views)
        points.append((sums, truth, truth))
    fitted = Composition.fit(points)
    assert fitted.mean_coefficients is not None and "view_ops" not in fitted.mean_coefficients
    view_heavy = Sums(0, 10.0, 10.0, 20, 0.0, idle_mean_ms=10.0, view_idle_ms=4.0, view_mean_ms=4.0)
    without_views = Sums(0, 6.0, 6.0, 20, 0.0, idle_mean_ms=6.0)
    assert fitted.apply(view_heavy)[0] == pytest.approx(fitted.apply(without_views)[0])
    older = {**fitted.to_json(), "mean_coefficients": {**fitted.mean_coefficients, "view_ops": 0.5}}
    assert Composition.from_json(older).apply(view_heavy)[0] == pytest.approx(fitted.apply(view_heavy)[0] + 2.0)


def test_the_per_kernel_term_counts_launching_kernels_and_an_older_fit_counts_views_too() -> None:
    """Truth: idle sum plus 2 us per kernel that launches on the device; the training models have few views.
    The fit recovers the launch cost and gives a view-heavy model nothing for its views, where counting them
    would charge (or, fitted negative, discount) every Reshape. A composition fitted before still counts views."""
    points = []
    for i, idle in enumerate((0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)):
        kernels, views = 100 + 40 * i, i % 2
        truth = idle + 0.002 * (kernels - views)
        points.append((Sums(0, idle, idle, kernels, 0.0, idle_mean_ms=idle, view_kernels=views), truth, truth))
    fitted = Composition.fit(points)
    assert fitted.mean_coefficients is not None
    assert fitted.mean_coefficients["per_kernel"] == pytest.approx(0.002, rel=0.05)
    view_heavy = Sums(0, 5.0, 5.0, 600, 0.0, idle_mean_ms=5.0, view_kernels=300)
    assert fitted.apply(view_heavy)[0] == pytest.approx(5.0 + 0.002 * 300, rel=0.02)
    older = Composition.from_json({k: v for k, v in fitted.to_json().items() if k != "per_kernel_counts_views"})
    assert older.per_kernel_counts_views
    assert older.apply(view_heavy)[0] == pytest.approx(fitted.apply(view_heavy)[0] + 300 * 0.002, rel=0.02)


def test_composition_round_trips_through_json() -> None:
    points = [(Sums(0, i, i, 10, 0.0, idle_mean_ms=i), 1.2 * i + 0.1, 1.5 * i) for i in (1.0, 2.0, 5.0, 9.0)]
    fitted = Composition.fit(points)
    again = Composition.from_json(json.loads(json.dumps(fitted.to_json())))
    assert again == fitted
    with pytest.raises(ValueError, match="unknown terms"):
        Composition.from_json({**fitted.to_json(), "mean_coefficients": {"made_up": 1.0}})


def _record_regressor_fits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, frozenset[str]]]:
    """Every kernel regressor trained from here on, as (kind, architectures it was trained without)."""
    from hase_dagster.learn import training

    fits = []
    real = training.train_predictor_regressor

    def recording(store, ep, kind=None, graph_factors=None, exclude_architectures=()):  # type: ignore[no-untyped-def]
        fits.append((kind, frozenset(exclude_architectures)))
        return real(store, ep, kind, graph_factors, exclude_architectures)

    monkeypatch.setattr(training, "train_predictor_regressor", recording)
    return fits


def test_a_cross_fitted_composition_sums_each_architecture_with_a_regressor_that_never_saw_it(
    trained: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hase_dagster.learn import training

    store = trained["hase"].warehouse()
    shipped = Predictor.load(predictor_path(trained["hase"].paths().root, "cpu"))
    trained_without = _record_regressor_fits(monkeypatch)
    cross_fitted = training.fit_cross_fitted_composition(store, "cpu", shipped.regressor)
    kind = shipped.regressor.kind
    assert sorted(trained_without, key=lambda fit: sorted(fit[1])) == [
        (kind, frozenset({"resnet18"})),
        (kind, frozenset({"transformer_encoder"})),
    ]
    in_sample = training.fit_composition(store, "cpu", shipped.regressor)
    # In sample: 4 variants x 2 levels. Cross-fitted: resnet18's fp16 and int8 are left out (no other architecture
    # has their precision, so the regressor without resnet18 never saw it).
    assert (in_sample.fitted_on, cross_fitted.fitted_on) == (8, 4)
    assert cross_fitted.cross_fitted and not in_sample.cross_fitted
    assert cross_fitted.mean_coefficients != in_sample.mean_coefficients
    assert Composition.from_json(json.loads(json.dumps(cross_fitted.to_json()))) == cross_fitted
    # With one training architecture nothing is out of sample: the in-sample fit, still marked cross-fitted so that
    # the evaluation's held-out predictors are fitted the same way.
    trained_without.clear()
    alone = training.train_predictor(
        store, "cpu", exclude_architectures={"transformer_encoder"}, kind=kind, cross_fit=True
    )
    assert trained_without == [(kind, frozenset({"transformer_encoder"}))]
    assert alone.composition.cross_fitted and alone.composition.fitted_on == 6


def test_the_evaluation_fits_its_held_out_predictors_as_the_shipped_one_was(
    trained: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hase_dagster.learn import evaluation, training

    store = trained["hase"].warehouse()
    shipped = Predictor.load(predictor_path(trained["hase"].paths().root, "cpu"))
    asked = []
    real = training.train_predictor

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("cross_fit", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "train_predictor", recording)
    fitted = _record_regressor_fits(monkeypatch)
    in_sample = replace(shipped, composition=training.fit_composition(store, "cpu", shipped.regressor))
    evaluation.evaluate(store, "cpu", in_sample)
    # one predictor per held-out architecture and per held-out family (two of each here)
    assert asked == [False] * 4
    # each family here is one architecture: its predictor's regressor is that architecture's, trained once
    assert sorted((without for _, without in fitted), key=sorted) == [
        frozenset({"resnet18"}),
        frozenset({"transformer_encoder"}),
    ]
    asked.clear()
    assert shipped.composition.cross_fitted  # the profile's setting
    evaluation.evaluate(store, "cpu", shipped)
    assert asked == [True] * 4


def test_error_measures() -> None:
    predicted, measured = np.array([1.09, 2.0, 2.5]), np.array([1.0, 2.0, 2.0])
    assert mape(predicted, measured) == pytest.approx((9 + 0 + 25) / 3)
    assert within(predicted, measured) == pytest.approx(200 / 3)


def test_evaluate_tables_with_a_kind_trains_that_kind_only(
    trained: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASE_DATA_DIR", trained["hase"].data_directory)
    assert main(["report", "--export", str(tmp_path / "tables")]) == 0
    capsys.readouterr()
    out = tmp_path / "evaluation"
    assert (
        main(["evaluate-tables", str(tmp_path / "tables"), "--ep", "cpu", "--kind", "random_forest", "--out", str(out)])
        == 0
    )
    assert "random_forest, as asked (no comparison)" in (out / "regressor.md").read_text()
    assert "'cross_fitted': False" in (out / "regressor.md").read_text()
    assert "held_out_family" in (out / "evaluation.md").read_text() and "never_seen" in capsys.readouterr().out
    crossed = tmp_path / "cross-fitted"
    argv = ["evaluate-tables", str(tmp_path / "tables"), "--ep", "cpu", "--kind", "random_forest", "--cross-fit"]
    assert main([*argv, "--out", str(crossed)]) == 0
    assert "'cross_fitted': True" in (crossed / "regressor.md").read_text()
    assert (crossed / "evaluation.md").read_text() != (out / "evaluation.md").read_text()


def test_host_clocked_kernels_pay_the_runners_cost_once_per_run_not_per_kernel() -> None:
    """On the CPU EP every standalone kernel time includes the runner's cost per call (the floor); a
    model fitted on models of milliseconds must still predict a tiny model of many tiny kernels as the
    sum of its kernels' own work, where the sum of standalone times is twice too slow."""
    floor = 0.005
    rng = np.random.default_rng(3)
    points = []
    for _ in range(12):
        work = tuple(float(w) for w in rng.uniform(0.05, 2.0, size=int(rng.integers(20, 80))))
        standalone = [
            KernelPrediction(i, f"n{i}", "Conv", f"k{i}", w + floor, w + floor, w + floor, False)
            for i, w in enumerate(work)
        ]
        sums = kernel_sums(standalone, 0.0, standalone, None, floor)
        points.append((sums, sum(work), sum(work) * 1.1))
    fitted = Composition.fit(points, host_floor_ms=floor)
    assert fitted.mean_coefficients is not None and fitted.host_floor_ms == floor
    # GPU physics and the per-kernel constant are not fitted on host clocks
    assert not set(fitted.mean_coefficients) & {"per_kernel", "launch_shortfall", "dispatch_stall", "timeslice_wait"}
    tiny = [
        KernelPrediction(i, f"t{i}", "Add", f"t{i}", floor + 0.001, floor + 0.001, floor + 0.001, False)
        for i in range(100)
    ]
    predicted = fitted.apply(kernel_sums(tiny, 0.0, tiny, None, fitted.host_floor_ms))[0]
    assert predicted == pytest.approx(0.1, abs=0.006)  # 100 x 1 us, plus at most one floor per run
    # the composition survives its JSON (a bundle), and one saved before the floor keeps device clocks
    assert Composition.from_json(fitted.to_json()).host_floor_ms == floor
    older = {k: v for k, v in fitted.to_json().items() if k != "host_floor_ms"}
    assert Composition.from_json(older).host_floor_ms == 0.0


def test_a_host_clocked_run_under_load_pays_in_proportion_to_its_length_not_a_wait_per_run() -> None:
    """Runs back to back share a CPU core with the stressor in the scheduler's slices: a short model's
    loaded time scales with its own length. Training models of 5-100 ms whose loaded timings carry a
    constant 1 ms (noise a fit can take for a per-run wait) must not charge a 0.5 ms model that 1 ms."""
    floor = 0.005
    rng = np.random.default_rng(5)

    def sums(work: list[float], share: float) -> Sums:
        idle = [
            KernelPrediction(i, f"n{i}", "Conv", f"k{i}", w + floor, w + floor, w + floor, False)
            for i, w in enumerate(work)
        ]
        slow = 1 + 0.5 * share
        loaded = [
            replace(k, median_ms=k.median_ms * slow, mean_ms=k.mean_ms * slow, p90_ms=k.p90_ms * slow) for k in idle
        ]
        return kernel_sums(loaded, share * 100, idle, None, floor)

    points = []
    for _ in range(10):
        work = [float(w) for w in rng.uniform(0.1, 2.0, size=int(rng.integers(10, 60)))]
        for share in (0.0, 0.5, 1.0):
            measured = sum(work) * (1 + 0.5 * share) + share * 1.0
            points.append((sums(work, share), measured, measured * 1.1))
    fitted = Composition.fit(points, host_floor_ms=floor)
    assert "load_share_per_run" not in (fitted.mean_coefficients or {})
    short = [0.05] * 10  # 0.5 ms of work
    assert fitted.apply(sums(short, 1.0))[0] < 1.0  # about 0.75 ms, not 0.75 + 1 ms


def test_the_host_floor_is_the_cheapest_idle_host_clocked_kernels(tmp_path: Path) -> None:
    from hase_dagster.learn.training import host_floor_ms

    store = Warehouse(tmp_path / "w.duckdb")
    # a few empty calls among real kernels, one timing a little under the floor
    times = [0.0045] + [0.005] * 9 + [0.01 * i for i in range(1, 291)]
    rows = pd.DataFrame(
        {
            "instance_id": [f"k{i}" for i in range(len(times))],
            "family": "Conv",
            "status": "ok",
            "mean_ms": times,
            "clock": "host",
            "stress_level": 0.0,
            "batch_size": 1,
            "ep": "cpu",
            "path": "k.onnx",
            "device": "cpu",
        }
    )
    store.replace_partition("kernel_benchmarks", {"ep": "cpu"}, rows)
    assert host_floor_ms(store, "cpu") == pytest.approx(0.005, abs=2e-4)
    gpu = rows.assign(ep="cuda", clock="device", device="gpu")
    store.replace_partition("kernel_benchmarks", {"ep": "cuda"}, gpu)
    assert host_floor_ms(store, "cuda") == 0.0  # device clocks: the GPU time of the kernel alone
    assert host_floor_ms(store, "nowhere") == 0.0
    # a GPU's LSTM timed on the host clock (the device clock could not) does not make the EP host-clocked
    with_recurrent = pd.concat([gpu, rows.head(20).assign(ep="cuda", family="LSTM", device="gpu")])
    store.replace_partition("kernel_benchmarks", {"ep": "cuda"}, with_recurrent)
    assert host_floor_ms(store, "cuda") == 0.0


def test_the_load_at_a_level_is_the_whole_model_benchmarks_background(tmp_path: Path) -> None:
    """The composition is fitted on whole-model rows: a level's load is their background, not the kernel
    benchmarks' (whose window also catches the benchmark's own kernels), and the kernels' where no model
    was benchmarked at that level."""
    store = Warehouse(tmp_path / "w.duckdb")
    kernel = {"instance_id": "k", "family": "Conv", "status": "ok", "mean_ms": 0.1, "batch_size": 1,
              "ep": "cuda", "path": "k.onnx", "device": "gpu", "bg_HOST_CPU_UTIL": 3.0}  # fmt: skip
    kernels = pd.DataFrame(
        [
            {**kernel, "stress_level": level, "bg_DCGM_FI_DEV_GPU_UTIL": util}
            for level, util in ((0.0, 0.0), (0.0, 14.0), (1.0, 96.0))
        ]
    )
    store.replace_partition("kernel_benchmarks", {"ep": "cuda"}, kernels)
    model = {"variant_id": "m_b1", "model_name": "m", "input_size": 224, "status": "ok", "path": "m.onnx",
             "batch_size": 1, "device": "gpu", "ep": "cuda", "mean_ms": 1.0}  # fmt: skip
    failed = {**model, "status": "error", "bg_DCGM_FI_DEV_GPU_UTIL": 50.0}
    models = pd.DataFrame(
        [{**model, "stress_level": 0.0, "bg_DCGM_FI_DEV_GPU_UTIL": u} for u in (0.0, 0.2)]
        + [{**failed, "stress_level": 0.0}]
    )
    store.replace_partition("model_benchmarks", {"ep": "cuda"}, models)
    idle = load_at_level(store, "cuda", 0.0)
    # The models' mean utilisation (the failed row left out); a field the models lack comes from the kernels.
    assert idle["DCGM_FI_DEV_GPU_UTIL"] == pytest.approx(0.1) and idle["HOST_CPU_UTIL"] == 3.0
    assert load_at_level(store, "cuda", 1.0)["DCGM_FI_DEV_GPU_UTIL"] == 96.0  # no model at 1.0: the kernels'
    with pytest.raises(HaseError, match="never benchmarked on cuda"):
        load_at_level(store, "cuda", 0.5)


def test_a_run_of_many_short_kernels_is_flagged_host_bound_and_a_long_one_is_not() -> None:
    """gpu_busy_share: the kernels' idle sum (views apart) over the idle prediction. A composition that
    charges 0.3 ms a run makes 20 kernels of 10 us host-bound, 20 of 1 ms not; a view is no device
    work; host-clocked kernels (the CPU EP) and a run without device time slicing get none."""
    composition = Composition({"loaded_kernels": 1.0, "per_run": 0.3}, {"loaded_kernels": 1.0}, 0.0, 10)

    def kernels(ms: float, family: str = "Conv") -> list[KernelPrediction]:
        return [KernelPrediction(i, f"n{i}", family, f"k{i}", ms, ms, ms, False) for i in range(20)]

    short = gpu_busy_share(composition, kernels(0.01), TimeSlicing())
    long = gpu_busy_share(composition, kernels(1.0), TimeSlicing())
    assert short == pytest.approx(0.2 / 0.5) and short < HOST_BOUND_SHARE
    assert long == pytest.approx(20 / 20.3) and long > HOST_BOUND_SHARE
    with_views = kernels(1.0) + [KernelPrediction(20, "v", "Reshape", "v", 5.0, 5.0, 5.0, False)]
    # The view adds neither device work nor predicted time (counted busy, the share would be 1).
    assert gpu_busy_share(composition, with_views, TimeSlicing()) == pytest.approx(20 / 20.3)
    assert gpu_busy_share(composition, kernels(1.0), None) is None
    host_clocked = Composition(composition.mean_coefficients, composition.p90_coefficients, 0.0, 10, 0.005)
    assert gpu_busy_share(host_clocked, kernels(1.0), TimeSlicing()) is None


def test_no_time_slicing_wait_is_charged_on_kernels_whose_loaded_times_hold_it() -> None:
    # a 10 ms LSTM timed on the host clock (its loaded time holds the co-tenant's slices) and 1 ms of convolutions
    idle = [
        KernelPrediction(0, "lstm", "LSTM", "l", 10.0, 10.0, 10.0, False),
        KernelPrediction(1, "conv", "Conv", "c", 1.0, 1.0, 1.0, False),
    ]
    charged = kernel_sums(idle, 100.0, idle, TimeSlicing())
    spared = kernel_sums(idle, 100.0, idle, TimeSlicing(), wait_included_families=("LSTM",))
    conv_only = kernel_sums(idle[1:], 100.0, idle[1:], TimeSlicing())
    assert spared.wait_included_idle_ms == 10.0 and charged.wait_included_idle_ms == 0.0
    assert spared.timeslice_wait_ms() == conv_only.timeslice_wait_ms()  # the wait of the 1 ms alone
    assert charged.timeslice_wait_ms()[0] > 3 * spared.timeslice_wait_ms()[0]
    # under load the LSTM counts at its idle time, the convolution at its loaded one
    loaded = [replace(p, mean_ms=2 * p.mean_ms) for p in idle]
    under_load = kernel_sums(loaded, 100.0, idle, TimeSlicing(), wait_included_families=("LSTM",))
    assert under_load.mean_ms == 10.0 + 2.0 and kernel_sums(loaded, 100.0, idle, TimeSlicing()).mean_ms == 22.0
    # the composition keeps the families and reads them back
    composition = Composition(wait_included_families=("GRU", "LSTM"))
    assert Composition.from_json(composition.to_json()).wait_included_families == ("GRU", "LSTM")
    assert Composition.from_json({}).wait_included_families == ()


def test_the_host_clocked_families_of_a_device_clocked_ep(tmp_path: Path) -> None:
    from hase_dagster.learn.training import host_clocked_families

    store = Warehouse(tmp_path / "w.duckdb")
    base = {"status": "ok", "stress_level": 0.0, "batch_size": 1, "path": "k.onnx", "device": "gpu", "ep": "cuda"}
    rows = pd.DataFrame(
        [
            {**base, "instance_id": "c", "family": "Conv", "mean_ms": 0.1, "clock": "device"},
            {**base, "instance_id": "l", "family": "LSTM", "mean_ms": 5.0, "clock": "host"},
            {**base, "instance_id": "g", "family": "GRU", "mean_ms": 4.0, "clock": "host"},
            {**base, "instance_id": "x", "family": "Pad", "mean_ms": 4.0, "clock": "host", "status": "error"},
        ]
    )
    store.replace_partition("kernel_benchmarks", {"ep": "cuda"}, rows)
    assert host_clocked_families(store, "cuda") == ("GRU", "LSTM")
    cpu = rows.assign(ep="cpu", clock="host", device="cpu")
    store.replace_partition("kernel_benchmarks", {"ep": "cpu"}, cpu)
    assert host_clocked_families(store, "cpu") == ()  # the CPU's kernels are all host-clocked: the EP's way
