"""Runs started by `hase materialize` carry their job's code-location origin, so the UI lists them
under their job (its runs page filters on the repository tag) and on the timeline (grouped by origin)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import yaml

from hase_dagster.orchestration.materialize import CODE_LOCATION
from tests.conftest import TEST_PROFILE

REPO = Path(__file__).resolve().parents[1]


def test_materialize_runs_are_attributed_to_their_job_and_code_location(tmp_path: Path) -> None:
    config = yaml.safe_load(yaml.safe_dump(TEST_PROFILE))
    profile = config["profiles"]["tiny"]
    profile["models"] = [m for m in profile["models"] if m["name"] == "transformer_encoder"]
    (tmp_path / "hase.yaml").write_text(yaml.safe_dump(config))
    home = tmp_path / "dagster"
    env = {
        **os.environ,
        "HASE_CONFIG": str(tmp_path / "hase.yaml"),
        "HASE_DATA_DIR": str(tmp_path / "data"),
        "DAGSTER_HOME": str(home),
    }
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "materialize", "--batch-size", "1"]
    command += ["--stage", "analysis", "--stage", "benchmark", "--stress-level", "0.0"]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    with dg.DagsterInstance.from_config(str(home)) as instance:
        for job_name in ("analysis_job", "benchmark_job"):
            [run] = instance.get_runs(filters=dg.RunsFilter(job_name=job_name))
            origin = run.remote_job_origin
            assert origin is not None, f"{job_name}: the run has no code-location origin"
            assert origin.job_name == job_name
            assert origin.repository_origin.code_location_origin.location_name == CODE_LOCATION
            label = f"{origin.repository_origin.repository_name}@{CODE_LOCATION}"
            # The filter the UI's job page uses: the job name and the repository label tag.
            ui_filter = dg.RunsFilter(job_name=job_name, tags={".dagster/repository": label})
            assert [r.run_id for r in instance.get_runs(filters=ui_filter)] == [run.run_id]
