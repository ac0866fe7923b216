"""GPU set E idle on two H100 machines: the same 72 files timed idle on one machine (``machine1/``, whose
lease went cold after that level) and again on a second (``timings/``, with the loaded levels). Prints how
far one machine's timing is from the other's, as if it were a prediction, against the h100 bundle's blind
predictions (``predictions_b*.json``) scored against each machine and against their geometric mean.

    .venv/bin/python results/cpu-general/setE_machines.py > results/cpu-general/gpu-setE/machines.md
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from score_gpu import measured, predicted

HERE = Path(__file__).resolve().parent / "gpu-setE"


def _idle(folder: Path) -> pd.Series:
    """The idle mean latency per file of a gpu_run.sh folder (its ``timings/``)."""
    rows = measured([folder])
    return rows[rows.stress_level == 0.0].set_index("model")["mean_ms"]


def _score(predicted: pd.Series, measured: pd.Series, batch: pd.Series) -> dict[str, object]:
    error = (predicted / measured - 1).abs() * 100
    by_batch = error.groupby(batch).mean().round(1)
    within = (error <= 10).groupby(batch).mean().mul(100).round()
    return {
        "MAPE %": round(error.mean(), 1),
        "within +-10 %": round((error <= 10).mean() * 100),
        "MAPE by batch 1 / 4 / 16 / 64": " / ".join(str(v) for v in by_batch),
        "within +-10 % by batch": " / ".join(str(int(v)) for v in within),
    }


def main() -> None:
    frame = pd.DataFrame({"first": _idle(HERE / "machine1"), "second": _idle(HERE)}).dropna()
    frame["batch"] = frame.index.str.extract(r"_b(\d+)\.onnx$", expand=False).astype(int).values
    idle = predicted(HERE).query("stress_level == 0.0").set_index("model")["predicted_ms"]
    frame["predicted"] = frame.index.map(idle)
    both = (frame["first"] * frame["second"]) ** 0.5
    rows = {
        "first machine's timing, against the second's": _score(frame["first"], frame["second"], frame["batch"]),
        "the bundle (blind), against the first machine": _score(frame["predicted"], frame["first"], frame["batch"]),
        "the bundle (blind), against the second machine": _score(frame["predicted"], frame["second"], frame["batch"]),
        "the bundle (blind), against their geometric mean": _score(frame["predicted"], both, frame["batch"]),
    }
    print(f"Set E idle, {len(frame)} files on two H100 machines\n")
    print(pd.DataFrame(rows).T.to_markdown())


if __name__ == "__main__":
    main()
