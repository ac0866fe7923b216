"""Issue 11: how much slower a network runs under load than idle, per H100 machine, from committed
timings of the same files (median over networks of loaded mean / idle mean, by batch size). Where idle
batch-1 runs are slow (the machine-dependent host-bound state) the ratio drops toward 1; the loaded
times themselves agree between machines (README, "A fifth machine").

    .venv/bin/python results/gpu-general/idle_vs_loaded.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent


def _parquets(pattern: str) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in sorted(HERE.glob(pattern))]
    return pd.concat(frames).rename(columns={"variant_id": "model"}) if frames else pd.DataFrame()


def _timings(folder: Path) -> pd.DataFrame:
    files = sorted((folder / "timings").glob("level-*.json"))
    return pd.DataFrame([r for p in files for r in json.loads(p.read_text())])


SOURCES = {
    "tables (pooled labels; training, first never-seen)": lambda: _parquets("tables/model_benchmarks.parquet"),
    "M5 (training networks, 2026-11-24 11:05)": lambda: _parquets("runs/h100-m5/tables/model_benchmarks.parquet"),
    "ns2 M1 (second never-seen set, 2026-11-23 22:31)": lambda: _parquets("never-seen-2/remeasure/*.parquet"),
    "ns2 M2 (control)": lambda: _parquets("never-seen-2/control/remeasure/*.parquet"),
    "independent generator (2026-11-24 05:53)": lambda: pd.concat(
        [_timings(RESULTS / "cpu-general" / "gpu"), _timings(RESULTS / "cpu-general" / "gpu-small")]
    ),
    "set D (2026-11-24 10:21)": lambda: _timings(RESULTS / "cpu-general" / "gpu-setD"),
    "set E, second machine (2026-11-24 13:43)": lambda: _timings(RESULTS / "cpu-general" / "gpu-setE"),
}


def ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Median loaded/idle mean latency by batch size, per stress level (0.5, 1.0) present."""
    rows = rows[rows["status"] == "ok"]
    table = rows.pivot_table(index=["model", "batch_size"], columns="stress_level", values="mean_ms")
    out = {}
    for level in (0.5, 1.0):
        if level in table and 0.0 in table:
            ratio = (table[level] / table[0.0]).dropna()
            out[f"stress {level} / idle"] = ratio.groupby(level="batch_size").median().round(2)
            out[f"n ({level})"] = ratio.groupby(level="batch_size").size()
    return pd.DataFrame(out)


def main() -> None:
    for name, load in SOURCES.items():
        print(f"### {name}\n\n{ratios(load()).to_markdown()}\n")


if __name__ == "__main__":
    main()
