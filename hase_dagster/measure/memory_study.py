"""How much memory a model holds under ORT, predicted from its kernels and measured around a real
session, for any ONNX files (``hase memory``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hase_dagster.analysis.analyze import analyze_model
from hase_dagster.analysis.peak_memory import predict_peak_memory
from hase_dagster.core.config import TimingOptions
from hase_dagster.core.ort_runtime import EpName
from hase_dagster.measure.model_memory import MemoryMeter
from hase_dagster.measure.runner import ModelRunner


def model_memory(paths: list[str | os.PathLike[str]], ep: EpName, runs: int = 5, measure: bool = True) -> list[dict]:
    """Predicted (and, with ``measure``, measured) peak memory of each model on ``ep``.

    Every model is analysed first (ORT's optimized graph and kernels), then each is measured in
    turn around its own session (built with ORT_ENABLE_ALL, warmed up, run ``runs`` times), so one
    model's memory is gone before the next one's baseline.

    Returns:
        One dict per model: ``model``, ``predicted_mb`` and the prediction's parts, and with
        ``measure`` the benchmark's memory columns (``peak_memory_mb``, ``memory_source``, ...) and
        ``error_pct``.
    """
    predictions: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            analysis = analyze_model(path, ep, Path(tmp) / f"{Path(path).stem}.optimized.onnx")
            peak = predict_peak_memory(analysis.kernels, ep)
            predictions.append({"model": str(path), "predicted_mb": peak.total_mb, **peak.to_dict()})
    if not measure:
        return predictions
    meter = MemoryMeter(ep)
    timing = TimingOptions(warmup=2, min_loops=runs, max_loops=runs, min_seconds=0, max_seconds=60)
    for row in predictions:
        before = meter.read()
        runner = ModelRunner(row["model"], ep, level="all")
        runner.time(timing)
        row.update(meter.columns(before, meter.read(), runner.session))
        del runner  # its memory goes before the next model's baseline
        measured = row["peak_memory_mb"]
        row["error_pct"] = (row["predicted_mb"] / measured - 1) * 100 if measured else None
    return predictions
