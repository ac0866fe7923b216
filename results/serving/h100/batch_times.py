"""Batch times of the H100 serving run: the cost of a change of batch size, and Hase's predicted batch
times against the measured ones.

Reads ``bench/requests.csv`` (one row per request: run, model, batch start and end, batch size) and
``predicted_exec_ms.json`` (Hase's predicted mean batch time per load, model and batch size), and
writes ``batch_times.md`` beside this script.

    .venv/bin/python results/serving/h100/batch_times.py
    # another run folder (bench/requests.csv or bench/requests.csv.xz), e.g. the per-batch-session rerun;
    # the predicted times stay this folder's (same bundle, same models):
    .venv/bin/python results/serving/h100/batch_times.py --dir results/serving/h100-per-batch
    # predicted_exec_ms.json, once (about 5 s; needs the two served models, from `hase serving-models`):
    .venv/bin/python results/serving/h100/batch_times.py --predict PLAN_DIR/plan.yaml
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
PREDICTED = HERE / "predicted_exec_ms.json"
LEVELS = ["level=0", "level=0.5", "level=1"]


def predict(plan_yaml: Path) -> None:
    """Write Hase's predicted (mean, p90) batch times for the plan's models at every stress level."""
    from hase_dagster.core.serving_spec import load_plan_spec
    from hase_dagster.learn.serving_plan import exec_time_for

    spec = load_plan_spec(plan_yaml)
    # The plan names a predictor bundle, so no data directory or Prometheus is read.
    table = exec_time_for(spec, Path("/nonexistent"), "http://127.0.0.1:1", LEVELS).table
    out = {
        level: {m: {str(b): {"mean_ms": v[0], "p90_ms": v[1]} for b, v in t.items()} for m, t in table[level].items()}
        for level in LEVELS
    }
    PREDICTED.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {PREDICTED}")


def batches(requests_csv: Path) -> pd.DataFrame:
    """One row per executed batch, with its time and whether its size differs from the model's previous
    batch in the same run (``switch``)."""
    r = pd.read_csv(requests_csv)
    r = r[np.isfinite(r.start_ms)]  # requests never served have no batch
    b = (
        r.groupby(["run_id", "model", "start_ms"])
        .agg(done_ms=("done_ms", "first"), batch=("batch", "first"))
        .reset_index()
        .sort_values(["run_id", "model", "start_ms"])
    )
    b["ms"] = b.done_ms - b.start_ms
    b["stress"] = b.run_id.str.extract(r"^s([\d.]+)-")[0].astype(float)
    b["previous"] = b.groupby(["run_id", "model"]).batch.shift(1)
    b["switch"] = b.previous.notna() & (b.previous != b.batch)
    b["first_of_run"] = b.previous.isna()
    return b


def report(
    b: pd.DataFrame,
    predicted: dict[str, dict[str, dict[str, dict[str, float]]]] | None,
    source: str = "bench/requests.csv",
) -> str:
    """The markdown of the batch times ``b`` against the ``predicted`` means, read from ``source``."""
    lines = [
        "# Batch times of the H100 serving run",
        "",
        f"Written by `results/serving/h100/batch_times.py` from `{source}`.",
        "",
    ]
    lines += [
        "## A change of batch size",
        "",
        "A batch whose size differs from the model's previous batch in the same run"
        " (the first batch of a run left out).",
        "",
        "| model | kind | batches | median ms | p10 ms | p90 ms | max ms | share over 20 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in sorted(b.model.unique()):
        x = b[(b.model == model) & ~b.first_of_run]
        for kind, sel in (("size changed", x[x.switch]), ("same size", x[~x.switch])):
            ms = sel.ms
            lines.append(
                f"| {model} | {kind} | {len(ms)} | {ms.median():.2f} | {ms.quantile(0.1):.2f} | "
                f"{ms.quantile(0.9):.2f} | {ms.max():.1f} | {(ms > 20).mean():.1%} |"
            )
    lines += [
        "",
        "## Predicted against measured batch times (same-size batches only)",
        "",
        "| model | stress | batch | batches | measured median ms | measured mean ms | predicted mean ms"
        " | predicted / measured median - 1 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    steady = b[~b.switch & ~b.first_of_run]
    grouped = steady.groupby(["model", "stress", "batch"]).ms.agg(["size", "median", "mean"]).reset_index()
    for row in grouped.itertuples():
        level = f"level={row.stress:g}"
        pred = (predicted or {}).get(level, {}).get(str(row.model), {}).get(str(row.batch))
        if pred is None:
            continue
        p = pred["mean_ms"]
        lines.append(
            f"| {row.model} | {row.stress:g} | {row.batch} | {row.size} | {row.median:.2f} | {row.mean:.2f} | "
            f"{p:.2f} | {p / row.median - 1:+.0%} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predict", type=Path, help="plan YAML: write predicted_exec_ms.json first")
    parser.add_argument("--dir", type=Path, default=HERE, help="run folder to read and write (default: this one)")
    args = parser.parse_args()
    if args.predict is not None:
        predict(args.predict)
    predicted = json.loads(PREDICTED.read_text()) if PREDICTED.exists() else None
    # A run committed with its requests compressed (xz -9e) is read as is: pandas decompresses by suffix.
    csv = args.dir / "bench" / "requests.csv"
    if not csv.exists():
        csv = csv.with_name("requests.csv.xz")
    text = report(batches(csv), predicted, str(csv.relative_to(args.dir)))
    (args.dir / "batch_times.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
