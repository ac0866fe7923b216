"""Issue 11: where a family held out goes wrong at the kernel level. Trains one xgboost kernel regressor
on the merged H100 tables without FAMILY (as the leave-one-family-out setting does) and scores that
family's own kernel rows: MAPE and the time-weighted signed error per op family, per batch size, and for
convolutions per kind (dense, depthwise, grouped: 1 < group < channels).

    .venv/bin/python results/gpu-general/family_out_kernels.py random_nas [text_transformer ...]   # ~10 s each
    .venv/bin/python results/gpu-general/family_out_kernels.py --tables OTHER_TABLES random_nas
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import pandas as pd

from hase_dagster.learn.features import feature_frame
from hase_dagster.learn.regressor import rows_without, train_regressor, training_rows
from hase_dagster.learn.reports import import_tables
from hase_dagster.learn.training import architecture_families

TABLES = Path(__file__).resolve().parent / "tables"


def _summary(rows: pd.DataFrame) -> pd.Series:
    return pd.Series(
        {
            "rows": len(rows),
            "measured_ms": rows.mean_ms.sum(),
            "signed_time_weighted_pct": 100 * (rows.predicted_ms.sum() / rows.mean_ms.sum() - 1),
            "mape_pct": 100 * (rows.predicted_ms / rows.mean_ms - 1).abs().mean(),
        }
    )


def _conv_kind(row: pd.Series) -> str:
    group = json.loads(row.attributes_json).get("group", 1)
    channels = json.loads(row.inputs_json)[0]["shape"][1]
    return "depthwise" if group > 1 and group == channels else "grouped" if group > 1 else "dense"


def main(families: list[str], tables: Path = TABLES) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = import_tables(tables, Path(tmp) / "tables.duckdb")
        rows = training_rows(store, "cuda")
        family_of = architecture_families(store)
    rows = rows[rows.status == "ok"].reset_index(drop=True)
    for family in families:
        kept_index = rows_without(rows, {a for a, f in family_of.items() if f == family}).index
        regressor = train_regressor(rows.loc[kept_index].reset_index(drop=True), "cuda", kind="xgboost")
        held = rows[~rows.index.isin(kept_index)].reset_index(drop=True)
        held["predicted_ms"] = regressor.predict(feature_frame(held, held, regressor.load_fields))["mean_ms"]
        print(f"## {family} held out: {len(held)} kernel rows\n")
        print(_summary(held).round(1).to_frame("all").T.to_markdown(), "\n")
        for title, key in (("op family", held.family), ("batch size", held.batch_size)):
            table = held.groupby(key).apply(_summary, include_groups=False).sort_values("measured_ms", ascending=False)
            print(f"By {title}:\n\n{table.head(12).round(1).to_markdown()}\n")
        conv = held[held.family == "Conv"]
        if len(conv):
            by_kind = conv.groupby(conv.apply(_conv_kind, axis=1)).apply(_summary, include_groups=False)
            print(f"Convolutions by kind:\n\n{by_kind.round(1).to_markdown()}\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=["random_nas"])
    parser.add_argument("--tables", type=Path, default=TABLES)
    arguments = parser.parse_args()
    main(arguments.families, arguments.tables)
