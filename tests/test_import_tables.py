"""`hase import-tables`: a data directory filled from another run's exported tables answers `hase predict`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hase_dagster.orchestration.cli import main

CPU_TABLES = Path(__file__).resolve().parents[1] / "results" / "cpu" / "tables"


def test_imported_tables_train_a_predictor_that_predicts(
    tmp_path: Path, resnet18_onnx: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    assert main(["import-tables", str(CPU_TABLES), "--kind", "xgboost"]) == 0
    assert (tmp_path / "data" / "regressors" / "cpu" / "predictor" / "predictor.json").exists()
    capsys.readouterr()
    assert (
        main(["predict", str(resnet18_onnx), "--ep", "cpu", "--batch-size", "1", "--load", "level=0.5", "--json"]) == 0
    )
    prediction = json.loads(capsys.readouterr().out)
    assert prediction["predicted_ms"] > 0 and prediction["load_source"].startswith("level=0.50")
    # A second import would replace the warehouse's tables: refused unless asked for.
    assert main(["import-tables", str(CPU_TABLES), "--kind", "xgboost"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_folder_without_tables_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "empty").mkdir()
    assert main(["import-tables", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith("hase: error:")
