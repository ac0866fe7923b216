"""Reference tables: another machine's design-space probe rows, brought to this machine's speed and
trained on beside its own rows."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml

from assets.learning import reference_kernel_rows
from hase_dagster.core.config import load_config
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.evaluation import _reference_rows_markdown
from hase_dagster.learn.reference_rows import (
    MIN_PAIRS,
    CalibrationError,
    calibrated_reference_rows,
    fit_calibration,
    refresh_reference_rows,
    shared_timings,
)
from hase_dagster.learn.regressor import training_rows
from hase_dagster.learn.reports import import_tables
from hase_dagster.orchestration.cli import main
from resources.hase import HaseResource
from tests.conftest import TEST_PROFILE
from warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[1]
CPU_TABLES = REPO / "results" / "cpu" / "tables"


def _rows(n: int, seed: int = 0) -> pd.DataFrame:
    """Kernel benchmark rows of ``n`` instances with times from 5 us to 50 ms."""
    rng = np.random.default_rng(seed)
    mean_ms = np.exp(rng.uniform(np.log(0.005), np.log(50), n))
    return pd.DataFrame(
        {
            "instance_id": [f"k{seed}_{i}" for i in range(n)],
            "batch_size": 1,
            "stress_level": 0.0,
            "ep": "cpu",
            "status": "ok",
            "mean_ms": mean_ms,
            "median_ms": mean_ms,
            "p90_ms": mean_ms * 1.1,
            "min_ms": mean_ms * 0.9,
            "std_ms": mean_ms * 0.05,
            "flops": (mean_ms * 2e7).astype(np.int64),
            "input_bytes": 4096,
            "output_bytes": 4096,
            "weight_bytes": 0,
        }
    )


def _faster(rows: pd.DataFrame) -> pd.DataFrame:
    """The same kernels on a machine where kernels over 0.1 ms run 2x faster and small ones 1.25x."""
    local = rows.copy()
    local["mean_ms"] = np.where(rows["mean_ms"] > 0.1, rows["mean_ms"] / 2.0, rows["mean_ms"] / 1.25)
    return local


def test_the_ratio_follows_the_kernels_size() -> None:
    reference = _rows(400)
    calibration = fit_calibration(shared_timings(_faster(reference), reference))
    unseen = _rows(100, seed=1)
    ratio = calibration.ratios(unseen)
    expected = np.where(unseen["mean_ms"] > 0.1, 0.5, 0.8)
    far_from_the_step = (unseen["mean_ms"] - 0.1).abs() > 0.05
    assert np.allclose(ratio[far_from_the_step], expected[far_from_the_step], rtol=0.05)
    assert calibration.pairs == 400 and calibration.cross_validated_error_pct < 5


def test_too_few_shared_timings_are_an_error() -> None:
    reference = _rows(MIN_PAIRS - 1)
    with pytest.raises(HaseError, match=f"share {MIN_PAIRS - 1} kernel timings"):
        fit_calibration(shared_timings(_faster(reference), reference))


def test_a_failed_or_unshared_timing_is_no_pair() -> None:
    reference = _rows(10)
    local = _faster(reference).iloc[:6].copy()
    local.loc[local.index[0], "status"] = "error"
    assert len(shared_timings(local, reference)) == 5


def test_this_machines_own_instances_win_and_the_rest_are_scaled() -> None:
    reference = _rows(300)
    local = _faster(reference.iloc[:200])
    probes = reference.iloc[150:].assign(architecture="dsp_a", sample_architectures="dsp_a")
    rows, calibration = calibrated_reference_rows(local, probes, reference)
    assert set(rows["instance_id"]) == set(reference["instance_id"].iloc[200:])
    original = probes.set_index("instance_id").loc[rows["instance_id"], "mean_ms"].to_numpy()
    assert np.allclose(rows["mean_ms"].to_numpy(), original * rows["speed_ratio"].to_numpy())
    assert ((rows["speed_ratio"] > 0.4) & (rows["speed_ratio"] < 0.9)).all()


def _slower_machine_without_probes(database: Path, slower_by: float) -> Warehouse:
    """The CPU tables as a machine ``slower_by`` times slower that timed no design-space probe of its own."""
    store = import_tables(CPU_TABLES, database)
    with store.connect() as connection:
        connection.execute(
            """DELETE FROM kernel_benchmarks WHERE instance_id IN (
                   SELECT instance_id FROM kernels k JOIN model_files f USING (variant_id)
                   GROUP BY 1 HAVING bool_and(f.family = 'design_space'))"""
        )
        connection.execute(
            "UPDATE kernel_benchmarks SET mean_ms = ? * mean_ms, median_ms = ? * median_ms, p90_ms = ? * p90_ms",
            [slower_by] * 3,
        )
    return store


@pytest.fixture(scope="module")
def slower_machine(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return _slower_machine_without_probes(tmp_path_factory.mktemp("slower") / "hase.duckdb", 2.0)


def test_the_probes_of_the_reference_train_at_this_machines_speed(slower_machine: Warehouse, tmp_path: Path) -> None:
    store = slower_machine
    own = training_rows(store, "cpu")
    rows, calibration = refresh_reference_rows(store, "cpu", CPU_TABLES, tmp_path / "reference.duckdb")
    assert calibration is not None and calibration.median_ratio == pytest.approx(2.0, rel=0.01)
    assert len(rows) > 1000 and rows["sample_architectures"].notna().all()
    assert rows["speed_ratio"].median() == pytest.approx(2.0, rel=0.05)
    kernels = rows["instance_id"].nunique()
    assert calibration.describe(rows).startswith(f"{len(rows)} reference rows of {kernels} kernels")
    trained_on = training_rows(store, "cpu")
    assert len(trained_on) == len(own) + len(rows)
    reference = import_tables(CPU_TABLES, tmp_path / "again.duckdb").query(
        "SELECT instance_id, batch_size, stress_level, mean_ms FROM kernel_benchmarks"
    )
    scaled = trained_on.merge(reference, on=["instance_id", "batch_size", "stress_level"], suffixes=("", "_ref"))
    scaled = scaled[scaled["sample_architectures"].notna()]
    assert (scaled["mean_ms"] / scaled["mean_ms_ref"]).median() == pytest.approx(2.0, rel=0.05)
    # The evaluation report says what the predictors trained on besides this machine's rows.
    section = _reference_rows_markdown(store, "cpu")
    last_row = [cell.strip() for cell in section.splitlines()[-1].strip("|").split("|")]
    assert section.startswith("## Reference rows") and last_row[0] == str(len(rows)) and last_row[2] == "2"
    # Without reference tables the rows go again.
    refresh_reference_rows(store, "cpu", None, tmp_path / "reference.duckdb")
    assert len(training_rows(store, "cpu")) == len(own)
    assert "_none:" in _reference_rows_markdown(store, "cpu")


def test_the_cpu_profiles_reference_tables_are_the_committed_ones() -> None:
    profile = load_config().profiles["cpu"]
    assert profile.reference_tables is not None and Path(profile.reference_tables) == CPU_TABLES


def test_missing_reference_tables_are_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code = main(
        ["evaluate-tables", str(CPU_TABLES), "--ep", "cpu", "--out", str(tmp_path / "out")]
        + ["--reference-tables", str(tmp_path / "empty")]
    )
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(error) == 1
    assert error[0].startswith("hase: error: reference tables") and "kernel_benchmarks.parquet" in error[0]


def test_a_failed_calibration_leaves_no_rows_of_an_earlier_one(tmp_path: Path) -> None:
    store = _slower_machine_without_probes(tmp_path / "hase.duckdb", 1.5)
    refresh_reference_rows(store, "cpu", CPU_TABLES, tmp_path / "reference.duckdb")
    assert store.count("reference_kernel_rows", ep="cpu") > 1000
    with store.connect() as connection:  # another ORT build: almost no kernel fingerprint in common
        connection.execute(
            "DELETE FROM kernel_benchmarks "
            "WHERE instance_id NOT IN (SELECT instance_id FROM kernel_benchmarks LIMIT 10)"
        )
    with pytest.raises(CalibrationError, match="at least 50 are needed"):
        refresh_reference_rows(store, "cpu", CPU_TABLES, tmp_path / "reference.duckdb")
    assert store.count("reference_kernel_rows", ep="cpu") == 0


def _tiny_profile(tmp_path: Path, **fields: str) -> HaseResource:
    """The test profile with ``fields`` set, written to ``tmp_path/hase.yaml``, its data under ``tmp_path/data``."""
    config = yaml.safe_load(yaml.safe_dump(TEST_PROFILE))
    config["profiles"]["tiny"].update(fields)
    (tmp_path / "hase.yaml").write_text(yaml.safe_dump(config))
    return HaseResource(config_path=str(tmp_path / "hase.yaml"), data_directory=str(tmp_path / "data"))


def test_the_asset_writes_the_rows_and_passes_its_check(tmp_path: Path) -> None:
    """The asset on a warehouse 1.5x slower than the CPU tables, its profile naming them as reference."""
    _slower_machine_without_probes(tmp_path / "data" / "hase.duckdb", 1.5)
    hase = _tiny_profile(tmp_path, reference_tables=str(CPU_TABLES))
    result = dg.materialize([reference_kernel_rows], resources={"hase": hase})
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "reference_rows_calibrated" and check.passed
    metadata = result.asset_materializations_for_node("reference_kernel_rows")[0].metadata
    assert metadata["rows"].value > 1000 and metadata["kernels"].value < metadata["rows"].value
    assert metadata["median_speed_ratio"].value == pytest.approx(1.5, rel=0.01)


def test_the_calibrated_bundle_asset_carries_a_bundle_to_this_machines_speed(tmp_path: Path) -> None:
    """The shipped cpu bundle (trained on the CPU tables) carried to a machine 1.5x slower, through the asset."""
    from assets.learning import calibrated_bundle
    from hase_dagster.learn.bundles import read_bundle
    from hase_dagster.learn.predict import predict_kernels_under
    from hase_dagster.learn.training import kernels_by_variant

    store = _slower_machine_without_probes(tmp_path / "data" / "hase.duckdb", 1.5)
    hase = _tiny_profile(tmp_path, reference_tables=str(CPU_TABLES), calibrate_bundle="cpu")
    result = dg.materialize([calibrated_bundle], resources={"hase": hase})
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "calibration_cross_validated" and check.passed
    metadata = result.asset_materializations_for_node("calibrated_bundle")[0].metadata
    assert metadata["median_speed_ratio"].value == pytest.approx(1.5, rel=0.01)
    bundle = read_bundle(tmp_path / "data" / "bundles" / "tiny-calibrated")
    source = read_bundle(REPO / "results" / "bundles" / "cpu")
    assert bundle.document["provenance"]["calibrated_from"]["bundle"] == "cpu"
    kernels = next(iter(kernels_by_variant(store, "cpu").values()))
    load = source.load_for("idle")[0]
    before = predict_kernels_under(source.predictor.regressor, kernels, [load])[0]
    after = predict_kernels_under(bundle.predictor.regressor, kernels, [load])[0]
    ratios = [a.mean_ms / b.mean_ms for a, b in zip(after, before, strict=True)]
    assert np.median(ratios) == pytest.approx(1.5, rel=0.05)


def test_the_calibrated_bundle_asset_writes_nothing_without_a_bundle_to_calibrate(tmp_path: Path) -> None:
    from assets.learning import calibrated_bundle

    hase = _tiny_profile(tmp_path)
    result = dg.materialize([calibrated_bundle], resources={"hase": hase})
    [check] = result.get_asset_check_evaluations()
    assert check.passed and "no calibrate_bundle" in str(check.metadata["reason"].value)
    assert not (tmp_path / "data" / "bundles").exists()


def test_calibrate_bundle_without_reference_tables_is_a_config_error(tmp_path: Path) -> None:
    hase = _tiny_profile(tmp_path, calibrate_bundle="cpu")
    with pytest.raises(HaseError, match="calibrate_bundle needs reference_tables"):
        load_config(hase.config_path)
