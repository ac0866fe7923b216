"""Whole-model timings outside the warehouse as composition points (learn.model_timings): reading
time_files.py's level files with statically detected kernels, their errors, and a predictor trained
on the committed CPU tables with them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hase_dagster.analysis.fusion_rules import FusionRules
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.model_timings import parse_timing_set, read_timing_set, read_timing_sets
from tests.conftest import conv_network

ROOT = Path(__file__).resolve().parents[1]
CPU_RULES = ROOT / "results" / "static-detection" / "cpu-ort1.31.1.fusion_rules.json"
CPU_TABLES = ROOT / "results" / "cpu" / "tables"


def _row(model: str, batch: int, level: float, mean_ms: float, status: str = "ok") -> dict:
    return {"model": model, "batch_size": batch, "stress_level": level, "status": status, "mean_ms": mean_ms,
            "p90_ms": mean_ms * 1.1}  # fmt: skip


@pytest.fixture()
def timing_set(tmp_path: Path) -> tuple[Path, Path]:
    files, timings = tmp_path / "files", tmp_path / "timings"
    files.mkdir()
    timings.mkdir()
    conv_network(files / "chk_a_b4.onnx", 4, 32, 28)
    conv_network(files / "other_b2.onnx", 2, 16, 14)
    for level in (0.0, 1.0):
        rows = [_row("chk_a_b4.onnx", 4, level, 1.0 + level), _row("other_b2.onnx", 2, level, 0.5)]
        rows.append(_row("chk_broken_b4.onnx", 4, level, 0.0, status="error"))  # failed timings are skipped
        (timings / f"level-{level:.2f}.json").write_text(json.dumps(rows))
    return timings, files


def test_a_timing_set_reads_ok_rows_with_their_detected_kernels(timing_set: tuple[Path, Path]) -> None:
    timings, files = timing_set
    rules = FusionRules.load(CPU_RULES)
    every = read_timing_set(timings, files, rules)
    assert sorted((t.path.name, t.stress_level) for t in every) == [
        ("chk_a_b4.onnx", 0.0), ("chk_a_b4.onnx", 1.0), ("other_b2.onnx", 0.0), ("other_b2.onnx", 1.0)
    ]  # fmt: skip
    chk = read_timing_set(timings, files, rules, match="^chk_")
    assert [(t.stress_level, t.mean_ms) for t in chk] == [(0.0, 1.0), (1.0, 2.0)]
    assert chk[0].kernels is chk[1].kernels  # detected once per file
    convs = [k for k in chk[0].kernels if k.op_type in ("Conv", "FusedConv")]
    assert len(convs) == 3 and all(k.inputs[0].shape[0] == 4 for k in convs)


def test_timing_sets_refuse_what_they_cannot_use(timing_set: tuple[Path, Path], tmp_path: Path) -> None:
    timings, files = timing_set
    rules = FusionRules.load(CPU_RULES)
    with pytest.raises(HaseError, match="TIMINGS_DIR:FILES_DIR"):
        parse_timing_set("only-one-folder")
    with pytest.raises(HaseError, match="fusion rules"):
        read_timing_sets([f"{timings}:{files}"], None)
    with pytest.raises(HaseError, match="no level"):
        read_timing_set(tmp_path, files, rules)
    (files / "other_b2.onnx").unlink()
    with pytest.raises(HaseError, match="other_b2.onnx is timed .* but not in"):
        read_timing_set(timings, files, rules)
    (timings / "level-0.00.json").write_text('[{"model": "chk_a_b4.onnx", "status": "ok"}]')
    with pytest.raises(HaseError, match="not a timings file"):
        read_timing_set(timings, files, rules, match="^chk_")


def test_the_composition_fits_the_timed_models_beside_the_tables(timing_set: tuple[Path, Path], tmp_path: Path) -> None:
    from hase_dagster.learn.reports import import_tables
    from hase_dagster.learn.training import train_predictor

    timings, files = timing_set
    timed = read_timing_set(timings, files, FusionRules.load(CPU_RULES))
    store = import_tables(CPU_TABLES, tmp_path / "tables.duckdb")
    plain = train_predictor(store, "cpu", kind="xgboost")
    widened = train_predictor(store, "cpu", kind="xgboost", timed_models=timed)
    assert widened.composition.fitted_on == plain.composition.fitted_on + len(timed)
    assert widened.composition.mean_coefficients != plain.composition.mean_coefficients


def test_the_cli_names_a_timing_set_without_rules(timing_set: tuple[Path, Path], tmp_path: Path) -> None:
    timings, files = timing_set
    done = subprocess.run(
        [sys.executable, "-m", "hase_dagster.orchestration.cli", "evaluate-tables", str(CPU_TABLES), "--ep", "cpu",
         "--out", str(tmp_path / "out"), "--timings", f"{timings}:{files}"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("hase: error:") and "fusion rules" in done.stderr
    assert not (tmp_path / "out").exists()
