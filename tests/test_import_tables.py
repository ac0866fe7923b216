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


def test_a_sweep_answers_every_question_and_analyses_each_model_once(
    tmp_path: Path,
    resnet18_onnx: Path,
    squeezenet_onnx: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hase_dagster.learn.sweep import AnalysisCache

    data = tmp_path / "data"
    monkeypatch.setenv("HASE_DATA_DIR", str(data))
    assert main(["import-tables", str(CPU_TABLES), "--kind", "xgboost"]) == 0
    folder = tmp_path / "models"
    folder.mkdir()
    for model in (resnet18_onnx, squeezenet_onnx):
        (folder / model.name).write_bytes(model.read_bytes())
    capsys.readouterr()
    args = ["predict", str(folder), "--ep", "cpu", "--batch-size", "1", "--load", "idle,level=0.5,level=1.0", "--json"]
    assert main(args) == 0
    predictions = json.loads(capsys.readouterr().out)["predictions"]
    assert [(p["model"], p["load_source"][:10]) for p in predictions] == [
        (name, load)
        for name in sorted(m.name for m in (resnet18_onnx, squeezenet_onnx))
        for load in ("idle (back", "level=0.50", "level=1.00")
    ]
    # The same model under more load is predicted slower on the CPU.
    assert predictions[0]["predicted_ms"] < predictions[2]["predicted_ms"]
    # Each model was analysed once and stored: asking again hits the cache.
    cache = AnalysisCache(data / "analysis_cache" / "cpu")
    assert len(list(cache.folder.glob("*.json"))) == 2
    _, cached = cache.kernels(folder / resnet18_onnx.name, 1, "cpu")
    assert cached
    assert main(["predict", str(folder / "missing.onnx"), "--batch-size", "1", "--load", "idle"]) == 2
