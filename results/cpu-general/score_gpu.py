"""The independent generator's networks on the H100 (timed by gpu_run.sh) against the h100 bundle's
device-free predictions (``hase predict --predictor h100``, kernels by static detection). Prints markdown:
MAPE, share within +-10% / +-15%, p90's MAPE, by batch size and stress level, under 2 ms, and per model.

    .venv/bin/python results/cpu-general/score_gpu.py results/cpu-general/gpu results/cpu-general/gpu-small

With ``--host-reference MS`` each prediction is first taken to the host loop reading its timing recorded
(``host_loop_ms``, time_files.py), as ``hase predict --host-reading`` does for a bundle whose reference is MS.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd

from hase_dagster.learn.host_speed import host_speed_factor


def timed(timings_dirs: list[Path]) -> pd.DataFrame:
    """The files timed ok in time_files.py's ``level-*.json`` of each folder."""
    rows = [
        r for folder in timings_dirs for p in sorted(folder.glob("level-*.json")) for r in json.loads(p.read_text())
    ]
    frame = pd.DataFrame(rows)
    if "host_loop_ms" not in frame:
        frame["host_loop_ms"] = float("nan")  # timed before time_files.py kept the reading
    return frame[frame.status == "ok"][["model", "batch_size", "stress_level", "mean_ms", "p90_ms", "host_loop_ms"]]


def measured(folders: list[Path]) -> pd.DataFrame:
    """:func:`timed` of the ``timings/`` of each gpu_run.sh work folder."""
    return timed([folder / "timings" for folder in folders])


def predicted(folder: Path) -> pd.DataFrame:
    rows = []
    for path in sorted(folder.glob("predictions_b*.json")):
        for row in json.loads(path.read_text())["predictions"]:
            source = row["load_source"]
            level = 0.0 if source.startswith("idle") else float(re.search(r"level=([\d.]+)", source).group(1))
            model = Path(row["model"]).name
            rows.append(
                {
                    "model": model,
                    "stress_level": level,
                    "predicted_ms": row["predicted_ms"],
                    "predicted_p90_ms": row["p90_ms"],
                    "gpu_busy_share": row.get("gpu_busy_share"),
                    "idle_predicted_ms": row.get("idle_predicted_ms"),
                }
            )
    return pd.DataFrame(rows)


def idle_predicted(frame: pd.DataFrame) -> pd.Series:
    """Each case's idle prediction (``idle_predicted_ms``); for predictions made before ModelPrediction had it, the
    idle twin's ``predicted_ms``."""
    idle = frame.merge(
        frame[frame.stress_level == 0][["model", "predicted_ms"]].rename(columns={"predicted_ms": "idle_ms"}),
        on="model",
        how="left",
    ).idle_ms.to_numpy()
    return pd.to_numeric(frame.idle_predicted_ms).fillna(pd.Series(idle, index=frame.index))


def summary(frame: pd.DataFrame) -> dict[str, float]:
    error = frame["error_pct"].abs()
    return {
        "cases": len(frame),
        "MAPE %": round(error.mean(), 1),
        "within 10 %": round((error <= 10).mean() * 100),
        "within 15 %": round((error <= 15).mean() * 100),
        "median signed %": round(frame["error_pct"].median(), 1),
        "p90 MAPE %": round((frame.predicted_p90_ms / frame.p90_ms - 1).abs().mean() * 100, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "folders", type=Path, nargs="+", help="gpu_run.sh work folders; the first holds the predictions"
    )
    parser.add_argument("--host-reference", type=float, default=None, help="ms: score at each timing's host reading")
    args = parser.parse_args()
    frame = measured(args.folders).merge(predicted(args.folders[0]), on=["model", "stress_level"])
    if args.host_reference is not None:
        if frame.host_loop_ms.isna().any():
            parser.error("--host-reference needs timings that recorded host_loop_ms")
        idle_ms = idle_predicted(frame)
        factor = [
            host_speed_factor(share, reading, args.host_reference, min(1.0, idle_pred / pred))
            for share, reading, idle_pred, pred in zip(
                frame.gpu_busy_share, frame.host_loop_ms, idle_ms, frame.predicted_ms, strict=True
            )
        ]
        frame["predicted_ms"] *= factor
        frame["predicted_p90_ms"] *= factor
    frame["error_pct"] = (frame.predicted_ms / frame.mean_ms - 1) * 100
    frame["network"] = frame.model.str.replace(r"_[is]\d+_b\d+\.onnx$", "", regex=True)
    print(pd.DataFrame([{"set": "all", **summary(frame)}]).to_markdown(index=False))
    for key in ("batch_size", "stress_level"):
        table = [{key: value, **summary(group)} for value, group in frame.groupby(key)]
        print("\n" + pd.DataFrame(table).to_markdown(index=False))
    big = frame[frame.batch_size >= 16]
    print("\nBatch 16 and 64 (the sizes of the first independent check), and runs under 2 ms:\n")
    subsets = {"batch 16/64": big, "under 2 ms": frame[frame.mean_ms < 2]}
    # a set timed at batch 1/4 only (set L) has no batch 16/64 row: left out, not summarised as NaN
    print(pd.DataFrame([{"set": k, **summary(v)} for k, v in subsets.items() if len(v)]).to_markdown(index=False))
    signed = frame.pivot_table(index="network", columns=["batch_size", "stress_level"], values="error_pct").round(0)
    print("\nSigned error, %:\n\n" + signed.to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
