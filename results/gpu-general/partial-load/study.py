"""Composition variants for host-bound runs under partial load, refitted on the training points captured from an h100
export and scored on sets S-Y's H100 timings (S/T/U are in the fit, V-Y held out). Batch 1 at stress 0.5 reads a
median -12..-15% on every set with the shipped composition (measured loaded/idle 1.23, predicted 1.13). Prints markdown.

    .venv/bin/python results/gpu-general/partial-load/capture.py fit /tmp/comp/points.pkl predictor export h100 \\
        --tables results/gpu-general/tables --kind xgboost_recurrent_base --ep cuda \\
        --provenance results/bundles/provenance/h100.json $(cat results/gpu-general/h100-export-args.txt) \\
        --out /tmp/comp/b
    for s in S T U V W X Y; do for b in 1 4 16 64; do ls /tmp/set$s/files/*_b$b.onnx > /dev/null 2>&1 || continue
      .venv/bin/python results/gpu-general/partial-load/capture.py predict /tmp/comp/cases-$s-$b.pkl predict \\
        --predictor /tmp/comp/b --batch-size $b --load idle,level=0.5,level=1.0 --top 0 --json --kernels static \\
        /tmp/set$s/files/*_b$b.onnx > /dev/null; done; done
    .venv/bin/python results/gpu-general/partial-load/study.py > results/gpu-general/partial-load/study.md
"""

from __future__ import annotations

import pickle
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

import hase_dagster.learn.predict as composition
from hase_dagster.learn.predict import Sums, Term, pipelined_end_ms

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "cpu-general"))
import score_gpu  # noqa: E402 (the sets' scorer, beside them)

WORK = Path("/tmp/comp")
INCLUDED = ("GRU", "LSTM", "Slice_Slice_Slice")
Extra = Callable[[Sums, float, float, dict[str, float]], dict[str, float]]


def cases() -> pd.DataFrame:
    """Every captured set case's sums, with its H100 timing."""
    rows = []
    for path in sorted(WORK.glob("cases-*.pkl")):
        name = path.stem.split("-")[1]
        for model, source, batch, sums in pickle.loads(path.read_bytes()):
            level = 0.0 if source.startswith("idle") else float(re.search(r"level=([\d.]+)", source).group(1))
            rows.append(
                {"set": name, "model": Path(model).name, "stress_level": level, "batch_size": batch, "sums": sums}
            )
    timed = []
    for name in "STUVWXY":
        frame = score_gpu.timed([HERE.parents[1] / f"cpu-general/gpu-set{name}/timings-h100/timings"])
        timed.append(frame.assign(set=name))
    return pd.DataFrame(rows).merge(pd.concat(timed), on=["set", "model", "stress_level", "batch_size"])


def run(
    name: str, frame: pd.DataFrame, points: list, extra: Extra | None = None, terms: tuple[Term, ...] = ()
) -> dict[str, object]:
    """The composition refitted with ``extra`` term values and ``terms``, scored on ``frame``."""
    original, mean_terms, p90_terms = Sums.values, composition.MEAN_TERMS, composition.P90_TERMS

    def values(self: Sums, dispatch: float, share: float = 1.0) -> dict[str, float]:
        v = original(self, dispatch, share)
        return {**v, **extra(self, dispatch, share, v)} if extra else v

    Sums.values = values  # type: ignore[method-assign]
    composition.MEAN_TERMS, composition.P90_TERMS = mean_terms + terms, p90_terms + terms
    try:
        fitted = composition.Composition.fit(points, 0.0, INCLUDED)
        predicted = np.array([fitted.apply(s)[0] for s in frame.sums])
    finally:
        Sums.values = original  # type: ignore[method-assign]
        composition.MEAN_TERMS, composition.P90_TERMS = mean_terms, p90_terms
    error = (predicted / frame.mean_ms.to_numpy() - 1) * 100
    scored = frame.assign(error=error)
    row: dict[str, object] = {"variant": name}
    for label, group in (("all", scored), ("V-Y", scored[scored.set.isin(list("VWXY"))])):
        row[f"{label} MAPE"] = round(group.error.abs().mean(), 2)
        row[f"{label} within 10"] = round((group.error.abs() <= 10).mean() * 100, 1)
    for batch in (1, 4, 16, 64):
        row[f"b{batch}"] = round(scored[scored.batch_size == batch].error.abs().mean(), 2)
    for level in (0.0, 0.5, 1.0):
        small = scored[(scored.batch_size <= 4) & (scored.stress_level == level)]
        row[f"b1-4 @{level} MAPE / median"] = f"{small.error.abs().mean():.1f} / {small.error.median():+.1f}"
    return row


def busy_power(power: int) -> Extra:
    """load_share_x_shortfall with the co-tenant's busy share to ``power`` (1 is the shipped term)."""

    def extra(self: Sums, dispatch: float, share: float, v: dict[str, float]) -> dict[str, float]:
        if self.time_slicing is None:
            return {}
        return {"load_share_x_shortfall": self.time_slicing.busy_share(self.load_util) ** power * v["launch_shortfall"]}

    return extra


def wall_wait(self: Sums, dispatch: float, share: float, v: dict[str, float]) -> dict[str, float]:
    """The time-slicing wait of the run's pipelined wall time beyond that of its GPU time."""
    if self.time_slicing is None:
        return {"wall_wait_extra": 0.0}
    gpu = self._wait_gpu_ms(share)
    wall = max(pipelined_end_ms(self.idle_kernel_ms, dispatch) * share, gpu)
    extra = (
        self.time_slicing.expected_wait(wall, self.load_util)[0]
        - self.time_slicing.expected_wait(gpu, self.load_util)[0]
    )
    return {"wall_wait_extra": max(0.0, extra)}


def partial_shortfall(self: Sums, dispatch: float, share: float, v: dict[str, float]) -> dict[str, float]:
    """busy x (1 - busy) x the launch shortfall: a term that peaks at half load."""
    if self.time_slicing is None:
        return {"partial_shortfall": 0.0}
    busy = self.time_slicing.busy_share(self.load_util)
    return {"partial_shortfall": busy * (1 - busy) * v["launch_shortfall"]}


def main() -> int:
    points = pickle.loads((WORK / "points.pkl").read_bytes())
    frame = cases()
    inf = float("inf")
    rows = [
        run("shipped terms", frame, points),
        run("shortfall x busy^2", frame, points, busy_power(2)),
        run("shortfall x busy^3", frame, points, busy_power(3)),
        run("+ wall-time wait", frame, points, wall_wait, (Term("wall_wait_extra", 0.0, inf, 0.0, "study"),)),
        run(
            "+ busy(1-busy) x shortfall",
            frame,
            points,
            partial_shortfall,
            (Term("partial_shortfall", -inf, inf, 0.0, "study"),),
        ),  # fmt: skip
    ]
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
