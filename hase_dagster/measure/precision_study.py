"""What FP16 and INT8 buy: each precision variant of a model timed on the EP, its top-1 agreement
with fp32 on random inputs, and which of its kernels really run in INT8 (``hase precision``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from hase_dagster.analysis.graph import optimize_and_profile
from hase_dagster.analysis.precision import (
    PRECISIONS,
    RandomCalibration,
    fp16_variant,
    int8_variant,
    kernel_precisions,
    top1_agreement,
)
from hase_dagster.core.config import TimingOptions
from hase_dagster.core.ort_runtime import EpName
from hase_dagster.measure.runner import ModelRunner


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400]


def compare_precisions(
    source: str | os.PathLike[str], ep: EpName, out_dir: str | os.PathLike[str], draws: int = 8, seconds: float = 0.5
) -> list[dict[str, Any]]:
    """fp32, fp16 and int8 of ``source`` on ``ep``: latency, speed-up over fp32, top-1 agreement with
    fp32 (argmax of the first output over its last axis, over ``draws`` random input batches; rows whose
    scores tie for the top are left out and counted, ``analysis.precision.top1_agreement``) and the
    kernels' precisions. A variant that cannot be made or run gets a row with its ``error``.

    Returns:
        One row per precision, fp32 first.
    """
    import onnx

    source = Path(source)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    makers = {
        "fp32": lambda: source,
        "fp16": lambda: fp16_variant(source, out / f"{source.stem}.fp16.onnx"),
        "int8": lambda: int8_variant(source, out / f"{source.stem}.int8.onnx"),
    }
    feeds = list(RandomCalibration(onnx.load(str(source)), batches=draws, seed=1)._feeds)
    timing = TimingOptions(warmup=3, min_loops=5, max_loops=1000, min_seconds=seconds, max_seconds=seconds * 4)
    rows: list[dict[str, Any]] = []
    reference: np.ndarray | None = None
    for precision in PRECISIONS:
        row: dict[str, Any] = {"model": source.name, "precision": precision, "ep": ep}
        try:
            path = makers[precision]()
            row["path"], row["size_mb"] = str(path), path.stat().st_size / 1e6
            runner = ModelRunner(path, ep, level="all", feeds=feeds[0])
            result = runner.time(timing)
            row.update(mean_ms=result.mean_ms, median_ms=result.median_ms, p90_ms=result.p90_ms, n=result.n)
            scores = np.concatenate(
                [
                    np.asarray(runner.session.run(None, f)[0], dtype=np.float32).reshape(-1, _classes(runner))
                    for f in feeds
                ]
            )
            del runner
            if precision == "fp32":
                reference = scores
            if reference is not None:
                row.update(top1_agreement(reference, scores))
            graph = optimize_and_profile(path, out / f"{source.stem}.{precision}.{ep}.optimized.onnx", ep)
            row["kernels"] = kernel_precisions(graph.nodes)
        except Exception as exc:  # a variant ORT cannot build or run on this EP is a finding, not a crash
            row["error"] = f"{type(exc).__name__}: {_one_line(exc)}"
        rows.append(row)
    base = rows[0].get("median_ms")
    for row in rows:
        if base and row.get("median_ms"):
            row["speedup"] = base / row["median_ms"]
    return rows


def _classes(runner: ModelRunner) -> int:
    shape = runner.session.get_outputs()[0].shape
    last = shape[-1] if shape else 1
    return last if isinstance(last, int) and last > 0 else 1
