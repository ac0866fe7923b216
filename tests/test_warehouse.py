from pathlib import Path

import duckdb
import pandas as pd
import pytest

from warehouse.store import Warehouse


def _edges(batch: int, n: int, ep: str = "cpu") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant_id": [f"m_b{batch}"] * n,
            "ep": [ep] * n,
            "batch_size": [batch] * n,
            "src_kernel": [f"k{i}" for i in range(n)],
            "dst_kernel": [f"k{i + 1}" for i in range(n)],
            "tensor": [f"t{i}" for i in range(n)],
            "bytes": [4] * n,
            "run_id": ["r"] * n,
        }
    )


def test_replace_partition_replaces_only_its_slice(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "w.duckdb")
    store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(1, 3))
    store.replace_partition("dag_edges", {"batch_size": 2, "ep": "cpu"}, _edges(2, 5))
    store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(1, 2))
    assert store.count("dag_edges", batch_size=1) == 2
    assert store.count("dag_edges", batch_size=2) == 5


def test_rows_outside_the_partition_are_refused(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "w.duckdb")
    with pytest.raises(ValueError, match="batch_size = 2"):
        store.replace_partition("dag_edges", {"batch_size": 2, "ep": "cpu"}, _edges(1, 3))


def test_failed_insert_keeps_previous_rows(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "w.duckdb")
    store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(1, 3))
    broken = _edges(1, 2).assign(bytes=["many", "more"])  # not a BIGINT
    with pytest.raises(duckdb.ConversionException, match="many"):
        store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, broken)
    assert store.count("dag_edges", batch_size=1) == 3


def test_merged_exports_replace_rows_measured_again_and_keep_the_rest(tmp_path: Path) -> None:
    from hase_dagster.learn.reports import merge_exports

    def export(name: str, rows: list[tuple[str, int, float, float]]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        frame = pd.DataFrame(rows, columns=["variant_id", "batch_size", "stress_level", "mean_ms"]).assign(ep="cuda")
        frame.to_parquet(folder / "model_benchmarks.parquet", index=False)
        return folder

    first = export("a", [("r18", 16, 0.0, 1.0), ("r18", 16, 1.0, 2.0), ("r18", 64, 0.0, 4.0)])
    # A later session re-measures one row and adds another model in a slice the first one had.
    second = export("b", [("r18", 64, 0.0, 4.1), ("nas", 16, 0.0, 8.0)])
    assert merge_exports([first, second], tmp_path / "out") == {"model_benchmarks": 4}
    merged = pd.read_parquet(tmp_path / "out" / "model_benchmarks.parquet").sort_values(
        ["variant_id", "batch_size", "stress_level"]
    )
    assert merged["mean_ms"].tolist() == [8.0, 1.0, 2.0, 4.1]
    with pytest.raises(ValueError, match="holds an exported table"):
        merge_exports([tmp_path / "nothing"], tmp_path / "out2")


def test_pooled_exports_average_a_model_over_the_sessions_that_timed_it(tmp_path: Path) -> None:
    """With ``pool_models`` a model timed again is the mean over sessions (each weighing the same, however
    many runs it made), n sums, a model timed once keeps its row, and a third session joins the mean of two."""
    from hase_dagster.learn.reports import merge_exports

    def export(name: str, rows: list[tuple[str, float, float, int]]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        frame = pd.DataFrame(rows, columns=["variant_id", "stress_level", "mean_ms", "n"])
        frame.assign(ep="cuda", batch_size=1, median_ms=frame.mean_ms, p90_ms=2 * frame.mean_ms).to_parquet(
            folder / "model_benchmarks.parquet", index=False
        )
        return folder

    first = export("a", [("r18", 0.0, 1.0, 100), ("nas", 0.0, 3.0, 50)])
    second = export("b", [("r18", 0.0, 2.0, 900), ("r18", 1.0, 5.0, 10)])
    third = export("c", [("r18", 0.0, 4.0, 10)])
    merge_exports([first, second], tmp_path / "two", pool_models=True)
    two = pd.read_parquet(tmp_path / "two" / "model_benchmarks.parquet").set_index(["variant_id", "stress_level"])
    assert two.loc[("r18", 0.0), ["mean_ms", "p90_ms", "n", "sessions"]].tolist() == [1.5, 3.0, 1000, 2]
    assert two.loc[("nas", 0.0), "mean_ms"] == 3.0 and pd.isna(two.loc[("nas", 0.0), "sessions"])
    assert two.loc[("r18", 1.0), "mean_ms"] == 5.0 and two.loc[("r18", 1.0), "sessions"] == 1
    merge_exports([tmp_path / "two", third], tmp_path / "three", pool_models=True)
    three = pd.read_parquet(tmp_path / "three" / "model_benchmarks.parquet").set_index(["variant_id", "stress_level"])
    assert three.loc[("r18", 0.0), ["mean_ms", "sessions"]].tolist() == [(1.0 + 2.0 + 4.0) / 3, 3]
    # Without pooling the later session replaces the row, as before.
    merge_exports([first, second], tmp_path / "replaced")
    replaced = pd.read_parquet(tmp_path / "replaced" / "model_benchmarks.parquet").set_index(
        ["variant_id", "stress_level"]
    )
    assert replaced.loc[("r18", 0.0), "mean_ms"] == 2.0


def test_tables_the_warehouse_cannot_hold_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exported table with a column the warehouse lacks is a HaseError naming the file and the column,
    and ``hase predictor export --tables`` says so in one line with exit status 2 (it printed a traceback)."""
    from hase_dagster.core.errors import HaseError
    from hase_dagster.learn.reports import import_tables
    from hase_dagster.orchestration.cli import main

    folder = tmp_path / "tables"
    folder.mkdir()
    pd.DataFrame({"variant_id": ["r18"], "bogus": [1]}).to_parquet(folder / "model_benchmarks.parquet", index=False)
    with pytest.raises(HaseError, match="model_benchmarks.parquet does not fit .*bogus"):
        import_tables(folder, tmp_path / "w.duckdb")
    assert (
        main(["predictor", "export", "x", "--tables", str(folder), "--ep", "cuda", "--out", str(tmp_path / "b")]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("hase: error: ") and "bogus" in err and len(err.strip().splitlines()) == 1


def test_a_value_past_32_bits_late_in_a_long_write_is_stored(tmp_path: Path) -> None:
    # DuckDB infers a Python-object column's type from a sample: 1,999 small byte counts and a 3.3 GB tensor at the
    # end (a batch-128 kernel among reference rows) once came out INT and failed the whole write
    store = Warehouse(tmp_path / "w.duckdb")
    edges = _edges(128, 2000)
    edges.loc[1999, "bytes"] = 3_288_354_976
    assert store.replace_partition("dag_edges", {"batch_size": 128, "ep": "cpu"}, edges) == 2000
    assert store.query("SELECT max(bytes) AS b FROM dag_edges")["b"][0] == 3_288_354_976


def test_missing_values_are_stored_as_null_even_in_integer_columns(tmp_path: Path) -> None:
    store = Warehouse(tmp_path / "w.duckdb")
    rows = pd.DataFrame(
        {
            "instance_id": ["a", "b", "c"], "family": ["Conv"] * 3, "status": ["ok", "error", "ok"],
            "path": ["k.onnx"] * 3, "stress_level": [0.0] * 3, "batch_size": [1] * 3, "device": ["cpu"] * 3,
            "ep": ["cpu"] * 3, "n": [50.0, float("nan"), 20.0], "mean_ms": [0.1, float("nan"), 0.2],
        }
    )  # fmt: skip
    store.replace_partition("kernel_benchmarks", {"ep": "cpu"}, rows)
    stored = store.query("SELECT instance_id, n, mean_ms FROM kernel_benchmarks ORDER BY instance_id")
    assert stored["n"].isna().tolist() == [False, True, False]
    assert stored["n"].dropna().tolist() == [50, 20] and stored["mean_ms"].isna().tolist() == [False, True, False]


def test_an_error_cell_reads_the_mape_and_the_share_within_ten_percent() -> None:
    from hase_dagster.learn.reports import error_cell

    # |errors| 5, 10, 15, 30: MAPE 15.0, two of four within +-10% (10 counts as within)
    assert error_cell(pd.Series([-5.0, 10.0, -15.0, 30.0])) == "15.0% (50%)"
    assert error_cell(pd.Series([2.5])) == "2.5% (100%)"
