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
