"""The DuckDB warehouse: schema, partition-replacing writes, and reads.

Every write replaces exactly one partition's slice inside a transaction, so re-materializing a
partition never duplicates rows and a failed write leaves the previous rows in place.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from warehouse.benchmark_schema import BENCHMARK_SCHEMA_SQL

SCHEMA_SQL = resources.files("warehouse").joinpath("schema.sql").read_text() + BENCHMARK_SCHEMA_SQL


class Warehouse:
    """A DuckDB file holding every Hase table. Connections are short-lived: DuckDB allows one
    writing process at a time, so nothing holds the file between operations."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as connection:
            connection.execute(SCHEMA_SQL)

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        connection = duckdb.connect(str(self.path), read_only=read_only)
        try:
            yield connection
        finally:
            connection.close()

    def replace_partition(self, table: str, partition: Mapping[str, Any], rows: pd.DataFrame) -> int:
        """Delete the rows of ``table`` matching ``partition`` and insert ``rows``, atomically.

        Every row must carry the partition's values, so the slice deleted is the slice written.
        """
        _check_identifier(table)
        for column, value in partition.items():
            _check_identifier(column)
            if len(rows) and not (rows[column] == value).all():
                raise ValueError(f"rows for {table} do not all have {column} = {value!r}")
        where = " AND ".join(f"{column} = ?" for column in partition) or "TRUE"
        with self.connect() as connection:
            connection.execute("BEGIN TRANSACTION")
            try:
                connection.execute(f"DELETE FROM {table} WHERE {where}", list(partition.values()))
                if len(rows):
                    # DuckDB infers an object column's type from a sample of its values: one of small integers
                    # came out INT and a later 3.3 GB input_bytes failed to convert (reference rows of batch-128
                    # kernels). So columns keep their own dtype, and the sample is every row.
                    connection.execute(f"SET pandas_analyze_sample = {max(len(rows), 1000)}")
                    connection.register("incoming", _nulls_as_none(rows))
                    columns = ", ".join(rows.columns)
                    connection.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM incoming")
                    connection.unregister("incoming")
                connection.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full, I/O error) has already ended the transaction, and ROLLBACK
                # then fails with "no transaction is active": that must not hide the real cause.
                try:
                    connection.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
        return len(rows)

    def query(self, sql: str, parameters: list[Any] | None = None) -> pd.DataFrame:
        """Run a read query and return a DataFrame."""
        with self.connect() as connection:
            return connection.execute(sql, parameters or []).df()

    def count(self, table: str, **where: Any) -> int:
        """Rows of ``table``, optionally only those matching ``column=value`` pairs."""
        _check_identifier(table)
        for column in where:
            _check_identifier(column)
        clause = " AND ".join(f"{c} = ?" for c in where) or "TRUE"
        return int(self.query(f"SELECT count(*) AS n FROM {table} WHERE {clause}", list(where.values()))["n"][0])


def _nulls_as_none(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each column that has missing values as objects, None where missing (so NaN is never cast
    into an integer column); the other columns keep their dtypes."""
    missing = rows.isna().any()
    out = rows.copy()
    for column in rows.columns[missing.to_numpy()]:
        out[column] = rows[column].astype(object).where(rows[column].notna(), None)
    return out


def _check_identifier(name: str) -> None:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not a plain SQL identifier: {name!r}")
