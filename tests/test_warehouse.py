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
