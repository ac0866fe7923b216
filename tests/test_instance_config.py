"""The instance settings and the code location's name, as `make dev` (`dg dev`), `dagster dev -w
workspace.yaml` and `hase materialize` see them."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from hase_dagster.orchestration.materialize import CODE_LOCATION, project_instance

REPO = Path(__file__).resolve().parents[1]


def test_no_instance_file_in_the_repository_root_for_dagster_dev_to_warn_about() -> None:
    """`dagster dev` and `dg dev` warn that a dagster.yaml in the current folder is not used when
    DAGSTER_HOME is elsewhere, which it always is here (.dagster_home): the settings live under
    another name and are copied into DAGSTER_HOME."""
    assert not (REPO / "dagster.yaml").exists() and not (REPO / "dagster.yml").exists()
    settings = yaml.safe_load((REPO / "dagster-instance.yaml").read_text())
    assert settings["concurrency"]["pools"]["default_limit"] == 1


def test_hase_materialize_creates_the_instance_with_the_repository_settings(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    instance = project_instance()
    assert (
        yaml.safe_load((tmp_path / "home" / "dagster.yaml").read_text())["concurrency"]["pools"]["default_limit"] == 1
    )
    assert instance.get_settings("concurrency")["pools"]["default_limit"] == 1


def test_every_launcher_names_the_code_location_alike() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["dg"]["project"]["code_location_name"] == CODE_LOCATION
    [entry] = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    assert entry["python_module"]["location_name"] == CODE_LOCATION
