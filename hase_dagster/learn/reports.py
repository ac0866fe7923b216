"""Markdown summaries of what the warehouse holds (committed next to the commands that made them)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd

from hase_dagster.core.errors import HaseError
from warehouse.store import Warehouse

EXPORT_TABLES = ("model_files", "kernels", "kernel_models", "kernel_benchmarks", "model_benchmarks")
# Exported tables are committed. The H100's kernel benchmarks (52,075 rows, 57 columns, 31 of them floating point:
# timings and telemetry) take 5.26 MB with zstd at level 9 and dictionary-encoded floats, 4.88 MB with the floats
# byte-stream-split (their exponent bytes compress together) and zstd at level 15 (1.5 s to write on the VM).
# pandas, pyarrow and DuckDB read both the same.
PARQUET_COMPRESSION = {"compression": "zstd", "compression_level": 15}


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """One exported table as Parquet (exact types, no index), compressed for committing: floating-point columns
    byte-stream-split, the others dictionary-encoded."""
    floats = [str(c) for c in frame.columns if frame[c].dtype.kind == "f"]
    frame.to_parquet(
        path,
        index=False,
        use_dictionary=[str(c) for c in frame.columns if str(c) not in floats],
        column_encoding=dict.fromkeys(floats, "BYTE_STREAM_SPLIT"),
        **PARQUET_COMPRESSION,
    )


def export_tables(
    store: Warehouse, out_dir: str | os.PathLike[str], tables: tuple[str, ...] = EXPORT_TABLES
) -> list[Path]:
    """Write each table as Parquet (exact types) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        path = out / f"{table}.parquet"
        write_table(store.query(f"SELECT * FROM {table}"), path)
        written.append(path)
    return written


def import_tables(tables_dir: str | os.PathLike[str], database: str | os.PathLike[str]) -> Warehouse:
    """A warehouse filled from Parquet files written by :func:`export_tables` (e.g. a GPU host's)."""
    store = Warehouse(database)
    with store.connect() as connection:
        for path in sorted(Path(tables_dir).glob("*.parquet")):
            if path.stem not in EXPORT_TABLES:
                raise HaseError(f"{path.name} is not one of the exported tables {EXPORT_TABLES}")
            connection.execute(f"DELETE FROM {path.stem}")
            try:
                connection.execute(f"INSERT INTO {path.stem} BY NAME SELECT * FROM read_parquet(?)", [str(path)])
            except duckdb.Error as exc:  # a column this warehouse does not know, a file that is no Parquet
                first_line = str(exc).splitlines()[0]
                raise HaseError(f"{path} does not fit the warehouse's {path.stem} table: {first_line}") from exc
    return store


# What identifies a row of each table (its primary key, plus the stress level of benchmark rows):
# a later export replaces the rows it measured again and adds the others.
_ROW_KEYS: dict[str, tuple[str, ...]] = {
    "model_files": ("variant_id",),
    "kernels": ("variant_id", "ep", "kernel_order"),
    "kernel_models": ("instance_id", "ep", "batch_size"),
    "kernel_benchmarks": ("instance_id", "ep", "batch_size", "stress_level"),
    "model_benchmarks": ("variant_id", "ep", "batch_size", "stress_level"),
}


# Whole-model timing columns that ``pool_models`` averages over sessions.
_POOLED_TIMINGS = ("mean_ms", "median_ms", "p90_ms", "min_ms", "std_ms")


def _pool_model_rows(merged: pd.DataFrame, frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``frame``'s model rows, each a session mean with the rows of ``merged`` it measures again:
    timings averaged with every session weighing the same (``sessions`` counts them), ``n`` summed,
    the other columns the later session's."""
    frame = frame.copy()
    frame["sessions"] = frame["sessions"].fillna(1) if "sessions" in frame else 1
    earlier = merged.assign(sessions=merged["sessions"].fillna(1) if "sessions" in merged else 1)
    earlier = earlier.drop_duplicates(keys, keep="last").set_index(keys)
    joined = frame.set_index(keys)
    seen = joined.index.isin(earlier.index)
    before = earlier.reindex(joined.index[seen])
    weight_before, weight_now = before["sessions"].to_numpy(float), joined.loc[seen, "sessions"].to_numpy(float)
    for column in _POOLED_TIMINGS:
        if column in joined and column in before:
            pooled = (
                before[column].to_numpy(float) * weight_before + joined.loc[seen, column].to_numpy(float) * weight_now
            )
            joined.loc[seen, column] = pooled / (weight_before + weight_now)
    if "n" in joined and "n" in before:
        joined.loc[seen, "n"] = joined.loc[seen, "n"].to_numpy() + before["n"].to_numpy()
    joined.loc[seen, "sessions"] = weight_before + weight_now
    joined["sessions"] = joined["sessions"].astype("Int64")
    return joined.reset_index()


def merge_exports(
    sources: list[str | os.PathLike[str]], out_dir: str | os.PathLike[str], pool_models: bool = False
) -> dict[str, int]:
    """Merge folders written by :func:`export_tables` (several GPU sessions, each a few partitions or
    models) into ``out_dir``: for every table, each later source replaces the rows it measured again
    (same model or kernel, EP, batch size and stress level) and adds the rest.

    Args:
        sources: exported folders, earliest first.
        out_dir: where the merged tables go (may be one of ``sources``).
        pool_models: whole-model rows measured again are averaged with the earlier ones instead of
            replacing them, every session weighing the same: an idle host-bound model's latency moves
            by 20-30% between H100 machines and sessions (results/gpu-general/never-seen-2), so a label
            is the mean over the sessions that timed it.

    Returns:
        The rows written per table.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}
    for table in EXPORT_TABLES:
        merged: pd.DataFrame | None = None
        for source in sources:
            path = Path(source) / f"{table}.parquet"
            if not path.exists():
                continue
            frame = pd.read_parquet(path)
            if merged is None:
                merged = frame
                continue
            keys = [c for c in _ROW_KEYS[table] if c in frame.columns and c in merged.columns]
            if len(keys) != len(_ROW_KEYS[table]):
                raise ValueError(f"{path} lacks the key columns {_ROW_KEYS[table]} of {table}")
            if pool_models and table == "model_benchmarks":
                frame = _pool_model_rows(merged, frame, keys)
            replaced = merged.set_index(keys).index.isin(frame.set_index(keys).index.unique())
            merged = pd.concat([merged[~replaced], frame], ignore_index=True)
        if merged is not None:
            if "precision" in merged.columns:
                # Rows of exports from before the column are fp32, as the warehouse reads them.
                merged["precision"] = merged["precision"].fillna("fp32")
            write_table(merged, out / f"{table}.parquet")
            written[table] = len(merged)
    if not written:
        raise ValueError(f"none of {[str(s) for s in sources]} holds an exported table")
    return written


def error_cell(errors_pct: pd.Series) -> str:
    """One table cell for signed percent errors: their MAPE and, in brackets, the share within +-10%.

    Args:
        errors_pct: signed errors, predicted over measured minus one, in percent.

    Returns:
        For example ``"8.4% (72%)"``.
    """
    absolute = errors_pct.abs()
    return f"{absolute.mean():.1f}% ({(absolute <= 10).mean() * 100:.0f}%)"


def _md(frame: pd.DataFrame, digits: int = 3) -> str:
    return frame.round(digits).to_markdown(index=False) if len(frame) else "_no rows_"


def benchmark_report(store: Warehouse) -> str:
    """Latency vs stress level: whole models (mean, median, p90) and kernels, with the load measured."""
    load = "coalesce(avg(bg_DCGM_FI_DEV_GPU_UTIL), avg(bg_HOST_CPU_UTIL))"
    models = store.query(
        """SELECT ep, device, variant_id, stress_level, round(mean_ms, 3) AS mean_ms, round(median_ms, 3) AS median_ms,
                   round(p90_ms, 3) AS p90_ms, n,
                   round(coalesce(bg_DCGM_FI_DEV_GPU_UTIL, bg_HOST_CPU_UTIL), 1) AS background_util
            FROM model_benchmarks WHERE status = 'ok' ORDER BY ep, variant_id, stress_level"""
    )
    kernels = store.query(
        f"""SELECT ep, batch_size, stress_level, count(*) AS kernels, sum(status <> 'ok')::INT AS failed,
                   median(median_ms) AS median_kernel_ms, sum(mean_ms) AS sum_of_means_ms, sum(p90_ms) AS sum_of_p90_ms,
                   {load} AS background_util,
                   -- from the first timed window's start to the last one's end: sessions, cuDNN searches
                   -- and warmups of all but the first kernel included
                   round(count(*) / ((max(end_ns) - min(start_ns)) / 60e9), 0) AS kernels_per_minute
            FROM kernel_benchmarks GROUP BY ALL ORDER BY ep, batch_size, stress_level"""
    )
    ratio = store.query(
        """WITH idle AS (SELECT instance_id, ep, batch_size, median_ms AS idle_ms, p90_ms AS idle_p90
                         FROM kernel_benchmarks WHERE stress_level = 0 AND status = 'ok')
           SELECT k.ep, k.stress_level, median(k.median_ms / idle_ms) AS median_slowdown,
                  median(k.p90_ms / idle_p90) AS p90_slowdown, count(*) AS kernels
           FROM kernel_benchmarks k JOIN idle USING (instance_id, ep, batch_size)
           WHERE k.status = 'ok' GROUP BY ALL ORDER BY 1, 2"""
    )
    return "\n\n".join(
        [
            "## Whole models\n\n" + _md(models),
            "## Kernels per partition\n\n" + _md(kernels),
            "## Kernel slowdown vs the idle partition (same instance)\n\n" + _md(ratio),
        ]
    )


def regressor_report(metrics: dict) -> str:
    """Markdown of a regressor's comparison: kernel-level MAPE on held-out rows (median, mean and p90
    targets) and on held-out architectures, per kind, and per family for the best kind; for a kind
    given rather than chosen (no comparison ran), one line that says so."""
    if "comparison" not in metrics:
        heading = f"## Kernel regressor ({metrics['training_rows']} measured rows)"
        return f"{heading}\n\n{metrics['best']}, as asked (no comparison)"
    rows = []
    for kind, result in metrics["comparison"].items():
        by_target = result["held_out_rows_by_target"]
        architectures = result["held_out_architectures"]
        rows.append(
            {
                "kind": kind + (" (kept)" if kind == metrics["best"] else ""),
                "rows: median MAPE %": by_target["median_ms"],
                "rows: mean MAPE %": by_target["mean_ms"],
                "rows: p90 MAPE %": by_target["p90_ms"],
                "rows: median within 10 %": result["held_out_rows"]["within_10"],
                **{f"arch {a}: MAPE %": v["mape"] for a, v in architectures.items()},
            }
        )
    best = metrics["comparison"][metrics["best"]]["held_out_rows"]
    families = pd.DataFrame(sorted(best["per_family"].items()), columns=["family", "held-out rows median MAPE %"])
    levels = pd.DataFrame(
        sorted(best["per_stress_level"].items()), columns=["stress level", "held-out rows median MAPE %"]
    )
    return "\n\n".join(
        [
            f"## Kernel regressor ({metrics['training_rows']} measured rows)\n\n" + _md(pd.DataFrame(rows), 2),
            "### Best kind per stress level\n\n" + _md(levels, 2),
            "### Best kind per family\n\n" + _md(families, 2),
        ]
    )
