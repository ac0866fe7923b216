"""Whole-model timings of networks outside the warehouse, as composition training points.

The composition (``learn.predict.Composition``) turns kernel sums into a model's latency, and its host
terms (per-run and per-kernel dispatch costs) are fitted on measured whole models. The warehouse holds
the zoo's few architectures, timed on one or two machines; a network a user brings has other kernels
per millisecond and runs on another machine. Timings of networks from an independent generator, each
timed on its own GPU host (``results/cpu-general/time_files.py`` writes them, one ``level-X.json`` per
stress level), widen what the composition is fitted on: their kernels come from static detection (the
device-free path ``hase predict --predictor`` takes), so the fit sees the kernel lists a prediction
will see.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.fusion_rules import FusionRules
from hase_dagster.core.errors import HaseError


@dataclass(frozen=True)
class TimedModel:
    """One ONNX file's whole-model timing at one stress level, with its statically detected kernels."""

    path: Path
    batch_size: int
    stress_level: float
    mean_ms: float
    p90_ms: float
    kernels: tuple[Kernel, ...]


def parse_timing_set(spec: str) -> tuple[Path, Path]:
    """``TIMINGS_DIR:FILES_DIR`` (the ``level-*.json`` folder and the folder of the timed ONNX files)."""
    timings, sep, files = spec.partition(":")
    if not sep or not timings or not files:
        raise HaseError(f"a timing set is TIMINGS_DIR:FILES_DIR, got {spec!r}")
    return Path(timings), Path(files)


def read_timing_set(
    timings_dir: Path, files_dir: Path, rules: FusionRules, match: str | None = None
) -> list[TimedModel]:
    """Every ``ok`` row of ``timings_dir/level-*.json`` whose file name matches ``match`` (a regular
    expression; all when None), with the file's kernels detected statically with ``rules``.

    Args:
        timings_dir: ``time_files.py``'s output folder (rows: model, batch_size, status, mean_ms,
            p90_ms, stress_level).
        files_dir: the folder of the timed ONNX files (each at a fixed batch size).
        rules: the EP's fusion rules.
        match: which file names to keep.

    Returns:
        The timed models, in file and level order.

    Raises:
        HaseError: no level file, a malformed row, or a timed file missing from ``files_dir``.
    """
    from hase_dagster.analysis.pattern_graph import GraphStructure
    from hase_dagster.learn.predict_file import BatchedModel

    levels = sorted(timings_dir.glob("level-*.json"))
    if not levels:
        raise HaseError(f"{timings_dir} holds no level-*.json timings (time_files.py writes them)")
    pattern = re.compile(match) if match else None
    rows = []
    for level_file in levels:
        try:
            data = json.loads(level_file.read_text())
            rows += [
                (
                    str(r["model"]),
                    int(r["batch_size"]),
                    float(r["stress_level"]),
                    float(r["mean_ms"]),
                    float(r["p90_ms"]),
                )
                for r in data
                if r.get("status") == "ok" and (pattern is None or pattern.search(str(r["model"])))
            ]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HaseError(f"{level_file} is not a timings file of time_files.py: {exc}") from exc
    kernels: dict[str, tuple[Kernel, ...]] = {}
    out = []
    for name, batch, level, mean_ms, p90_ms in sorted(rows):
        path = files_dir / name
        if name not in kernels:
            if not path.is_file():
                raise HaseError(f"{name} is timed in {timings_dir} but not in {files_dir}: export the set first")
            model = BatchedModel.load(path)
            detection = model.detect(GraphStructure.of(model.model), batch, rules)
            kernels[name] = tuple(detection.kernels)
        out.append(TimedModel(path, batch, level, mean_ms, p90_ms, kernels[name]))
    return out


def read_timing_sets(specs: Sequence[str], rules: FusionRules | None, match: str | None = None) -> list[TimedModel]:
    """:func:`read_timing_set` for each ``TIMINGS_DIR:FILES_DIR`` of ``specs``; they need ``rules``."""
    if not specs:
        return []
    if rules is None:
        raise HaseError("timing sets need the EP's fusion rules (--rules) to detect their kernels")
    out: list[TimedModel] = []
    for spec in specs:
        timings, files = parse_timing_set(spec)
        out += read_timing_set(timings, files, rules, match)
    return out
