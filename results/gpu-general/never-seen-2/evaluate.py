"""The second never-seen set against a predictor bundle: every model, batch size and stress level timed
on the H100 machines (``remeasure`` folders), predicted device-free by the bundle from ONNX files
(``hase predict --predictor``, kernels by static detection). Labels: the first machine's timing alone
(the set's one full grid), and the mean over every machine that timed the case (batch 1 and 4: three
machines idle, two at stress 1.0). Prints markdown: MAPE, share within +-10% / +-15%, p90 MAPE, by
batch size, stress level and model, and the cases under 2 ms.

    .venv/bin/python results/gpu-general/never-seen-2/evaluate.py --bundle results/bundles/h100 \
        --files FOLDER_OF_ONNX [--predictions-from-host]
``--predictions-from-host`` scores the predictions the GPU host made (``predictions_b*.json``) instead.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
MACHINES = {"M1": HERE, "M2": HERE / "control", "M3": HERE / "m3"}
BATCHES = (1, 4, 16, 64, 128)
LOADS = "idle,level=0.5,level=1.0"


def timings() -> pd.DataFrame:
    """Each machine's mean latency per (variant, batch size, stress level) of the set, one column each,
    with M1's p90 and model name; the set is M1's models (the others timed training models too)."""
    keys = ["variant_id", "batch_size", "stress_level"]
    columns = []
    for machine, folder in MACHINES.items():
        rows = pd.concat([pd.read_parquet(p) for p in (folder / "remeasure").glob("*.parquet")])
        if machine == "M1":
            names = set(rows.variant_id)
        rows = rows[(rows.status == "ok") & rows.variant_id.isin(names)].set_index(keys)
        columns.append(rows[["mean_ms"]].rename(columns={"mean_ms": machine}))
        if machine == "M1":
            columns.append(rows[["p90_ms", "model_name"]])
    return pd.concat(columns, axis=1).reset_index()


def _rows(answer: dict) -> list[dict]:
    out = []
    for row in answer.get("predictions", [answer]):
        source = row["load_source"]
        level = 0.0 if source.startswith("idle") else float(re.search(r"level=([\d.]+)", source).group(1))
        out.append(
            {
                "variant_id": Path(row["model"]).stem,
                "batch_size": row["batch_size"],
                "stress_level": level,
                "predicted_ms": row["predicted_ms"],
                "predicted_p90_ms": row["p90_ms"],
            }
        )
    return out


def predictions(bundle: Path, files: Path | None) -> pd.DataFrame:
    """The bundle's predictions for every file of the set (or, without ``files``, the host's)."""
    rows: list[dict] = []
    for batch in BATCHES:
        if files is None:
            path = HERE / f"predictions_b{batch}.json"
            if path.exists():
                rows += _rows(json.loads(path.read_text()))
            continue
        paths = sorted(files.glob(f"*_b{batch}.onnx"))
        if not paths:
            continue
        command = [
            sys.executable,
            "-m",
            "hase_dagster.orchestration.cli",
            "predict",
            "--predictor",
            str(bundle),
            "--batch-size",
            str(batch),
            "--load",
            LOADS,
            "--top",
            "0",
            "--json",
            *map(str, paths),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"hase: error: predict failed: {done.stderr.strip()}")
        rows += _rows(json.loads(done.stdout))
    return pd.DataFrame(rows)


def _score(cases: pd.DataFrame, label: str) -> str:
    error = (cases.predicted_ms / cases[label] - 1).abs() * 100
    return f"{error.mean():.1f}% / {(error <= 10).mean() * 100:.0f}% / {(error <= 15).mean() * 100:.0f}% ({len(cases)})"


def report(cases: pd.DataFrame) -> str:
    lines = ["| cases | label | MAPE / within +-10% / within +-15% (cases) |", "| --- | --- | --- |"]
    groups = [("all", cases), ("under 2 ms (M1)", cases[cases.M1 < 2.0])]
    groups += [(f"batch {b}", g) for b, g in cases.groupby("batch_size")]
    groups += [(f"stress {s}", g) for s, g in cases.groupby("stress_level")]
    for name, group in groups:
        for label in ("M1", "pooled"):
            lines.append(f"| {name} | {label} | {_score(group, label)} |")
    p90 = (cases.predicted_p90_ms / cases.p90_ms - 1).abs() * 100
    lines.append(f"\np90 MAPE against M1's p90: {p90.mean():.1f}%\n")
    by_model = cases.assign(error=(cases.predicted_ms / cases.pooled - 1) * 100).pivot_table(
        index="model_name", columns=["batch_size", "stress_level"], values="error"
    )
    return "\n".join(lines) + "\nSigned error against the pooled label, %:\n\n" + by_model.round(0).to_markdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=Path("results/bundles/h100"))
    parser.add_argument("--files", type=Path)
    parser.add_argument("--predictions-from-host", action="store_true")
    args = parser.parse_args()
    if not args.predictions_from_host and args.files is None:
        parser.error("give --files (the set's ONNX files) or --predictions-from-host")
    measured = timings()
    measured["pooled"] = measured[list(MACHINES)].mean(axis=1)
    cases = measured.merge(
        predictions(args.bundle, None if args.predictions_from_host else args.files),
        on=["variant_id", "batch_size", "stress_level"],
    )
    print(report(cases))


if __name__ == "__main__":
    main()
