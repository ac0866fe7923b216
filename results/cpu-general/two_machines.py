"""One checker set timed on two H100 machines: at each stress level both timed, how far one machine's timing
is from the other's, as if it were a prediction, against the bundle's predictions (``predictions_b*.json``
of ``--predictions``) scored against each machine and against their geometric mean. Prints markdown.

    # set E: idle on a first machine (machine1/, its lease went cold after that level), everything on a second
    cd results/cpu-general && ../../.venv/bin/python two_machines.py --first gpu-setE/machine1 --second gpu-setE \
        --predictions gpu-setE > gpu-setE/machines.md
    # set F: every level on two machines
    cd results/cpu-general && ../../.venv/bin/python two_machines.py --first gpu-setF --second gpu-setF/machine2 \
        --predictions gpu-setF > gpu-setF/machines.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from score_gpu import measured, predicted


def _level(rows: pd.DataFrame, level: float) -> pd.Series:
    """The mean latency per file of one machine's timings (:func:`score_gpu.measured`) at one stress level."""
    return rows[rows.stress_level == level].set_index("model")["mean_ms"]


def _score(predicted: pd.Series, measured: pd.Series, batch: pd.Series) -> dict[str, object]:
    error = (predicted / measured - 1).abs() * 100
    by_batch = error.groupby(batch).mean().round(1)
    within = (error <= 10).groupby(batch).mean().mul(100).round()
    return {
        "MAPE %": round(error.mean(), 1),
        "within +-10 %": round((error <= 10).mean() * 100),
        "MAPE by batch " + " / ".join(str(b) for b in by_batch.index): " / ".join(str(v) for v in by_batch),
        "within +-10 % by batch": " / ".join(str(int(v)) for v in within),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=Path, required=True, help="a gpu_run.sh folder (timings/)")
    parser.add_argument("--second", type=Path, required=True, help="another machine's gpu_run.sh folder")
    parser.add_argument("--predictions", type=Path, required=True, help="the folder of predictions_b*.json")
    args = parser.parse_args()
    first, second, predictions = measured([args.first]), measured([args.second]), predicted(args.predictions)
    for level in sorted(set(first.stress_level) & set(second.stress_level)):
        frame = pd.DataFrame({"first": _level(first, level), "second": _level(second, level)}).dropna()
        frame["batch"] = frame.index.str.extract(r"_b(\d+)\.onnx$", expand=False).astype(int).values
        by_model = predictions.query("stress_level == @level").set_index("model")["predicted_ms"]
        frame["predicted"] = frame.index.map(by_model)
        both = (frame["first"] * frame["second"]) ** 0.5
        rows = {
            "first machine's timing, against the second's": _score(frame["first"], frame["second"], frame["batch"]),
            "the bundle, against the first machine": _score(frame["predicted"], frame["first"], frame["batch"]),
            "the bundle, against the second machine": _score(frame["predicted"], frame["second"], frame["batch"]),
            "the bundle, against their geometric mean": _score(frame["predicted"], both, frame["batch"]),
        }
        print(f"Stress {level:g}: {len(frame)} files on two H100 machines\n")
        print(pd.DataFrame(rows).T.to_markdown() + "\n")


if __name__ == "__main__":
    main()
