"""GPU set E idle on two H100 machines: the same 72 files timed idle on one machine (``machine1/``, whose
lease went cold after that level) and again on a second (``timings/``, with the loaded levels). Prints how
far one machine's timing is from the other's, as if it were a prediction, against the h100 bundle's blind
predictions (``predictions_b*.json``) scored against each machine and against their geometric mean.

    .venv/bin/python results/cpu-general/setE_machines.py > results/cpu-general/gpu-setE/machines.md
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent / "gpu-setE"


def _idle(path: Path) -> pd.Series:
    rows = pd.DataFrame(json.loads(path.read_text()))
    return rows[rows.status == "ok"].set_index("model")["mean_ms"]


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
    first, second = _idle(HERE / "machine1" / "level-0.00.json"), _idle(HERE / "timings" / "level-0.00.json")
    frame = pd.DataFrame({"first": first, "second": second}).dropna()
    frame["batch"] = frame.index.str.extract(r"_b(\d+)\.onnx$", expand=False).astype(int).values
    predicted = {
        p["model"]: p["predicted_ms"]
        for b in (1, 4, 16, 64)
        for p in json.loads((HERE / f"predictions_b{b}.json").read_text())["predictions"]
        if p["load_source"].startswith("idle")
    }
    frame["predicted"] = frame.index.map(predicted)
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
