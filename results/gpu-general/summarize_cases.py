"""The README's figures from an evaluation report's "Every case" table, for one precision or all:
per setting MAPE of the mean, share within +-10%, p90 MAPE; never seen under 2 ms; by batch size; leave
one family out by family.

    .venv/bin/python results/gpu-general/summarize_cases.py \
        results/gpu-general/evaluation-design-space-xgboost/evaluation.md [--precision fp32]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pandas as pd

NUMERIC = ("batch_size", "stress_level", "measured_mean_ms", "predicted_mean_ms", "measured_p90_ms", "predicted_p90_ms")
SETTINGS = ("never_seen", "held_out_architecture", "held_out_family", "trained_on_all")


def every_case(report: Path) -> pd.DataFrame:
    """The report's "Every case" table as a frame (numbers parsed)."""
    text = report.read_text()
    start = text.index("## Every case")
    end = text.find("\n## ", start + 1)
    lines = [line for line in text[start : end if end > 0 else None].splitlines() if line.startswith("|")]
    frame = pd.read_csv(io.StringIO("\n".join(lines)), sep="|", skipinitialspace=True).iloc[1:, 1:-1]
    frame.columns = [c.strip() for c in frame.columns]
    frame = frame.apply(lambda column: column.astype(str).str.strip())
    for column in NUMERIC:
        frame[column] = pd.to_numeric(frame[column])
    frame["precision"] = frame["variant_id"].str.extract(r"_(fp16|int8)$")[0].fillna("fp32")
    return frame


def scores(cases: pd.DataFrame) -> str:
    error = (cases.predicted_mean_ms / cases.measured_mean_ms - 1).abs() * 100
    p90 = (cases.predicted_p90_ms / cases.measured_p90_ms - 1).abs() * 100
    return f"{error.mean():.1f}% / {(error <= 10).mean() * 100:.0f}% / {p90.mean():.1f}% ({len(cases)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--precision", choices=("fp32", "fp16", "int8"), help="default: every precision")
    args = parser.parse_args()
    cases = every_case(args.report)
    if args.precision:
        cases = cases[cases.precision == args.precision]
    print("setting: MAPE / within +-10% / p90 MAPE (cases)")
    for setting in SETTINGS:
        of = cases[cases.setting == setting]
        batches = sorted(of.groupby("batch_size"))
        errors = [(g.predicted_mean_ms / g.measured_mean_ms - 1).abs().mean() * 100 for _, g in batches]
        by_batch = " / ".join(f"{e:.1f}" for e in errors)
        print(f"{setting}: {scores(of)}; by batch {'/'.join(str(int(b)) for b, _ in batches)}: {by_batch}")
    small = cases[(cases.setting == "never_seen") & (cases.measured_mean_ms < 2.0)]
    print(f"never_seen under 2 ms: {scores(small)}")
    family_out = cases[cases.setting == "held_out_family"]
    print("held_out_family by family: " + "; ".join(f"{f} {scores(g)}" for f, g in family_out.groupby("family")))


if __name__ == "__main__":
    main()
