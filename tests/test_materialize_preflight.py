"""`hase materialize` refuses in seconds, with one line and exit 2, what would fail minutes into a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import TEST_PROFILE

REPO = Path(__file__).resolve().parents[1]


def _materialize(tmp_path: Path, *args: str, config: dict | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HASE_DATA_DIR": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path / "dagster")}
    if config is not None:
        path = tmp_path / "hase.yaml"
        path.write_text(yaml.safe_dump(config))
        env["HASE_CONFIG"] = str(path)
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "materialize", *args]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("hase: error:")]
    assert len(lines) == 1
    return lines[0]


def test_a_cuda_profile_without_cuda_is_refused_before_any_run(tmp_path: Path) -> None:
    line = _one_error_line(_materialize(tmp_path, "--profile", "gpu"))
    assert "CUDA" in line and "does not run on this machine" in line
    assert not (tmp_path / "data" / "models").exists()


def test_an_unknown_torchvision_model_is_named(tmp_path: Path) -> None:
    config = yaml.safe_load(yaml.safe_dump(TEST_PROFILE))
    config["profiles"]["tiny"]["models"].append({"name": "resnet_that_does_not_exist"})
    assert "resnet_that_does_not_exist" in _one_error_line(_materialize(tmp_path, config=config))


def test_a_stress_level_that_is_no_partition_is_named(tmp_path: Path) -> None:
    line = _one_error_line(_materialize(tmp_path, "--stress-level", "0.33", config=TEST_PROFILE))
    assert "0.33" in line and "not partitions" in line


def test_a_data_directory_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data directory should be")
    line = _one_error_line(_materialize(tmp_path, config=TEST_PROFILE))
    assert "cannot be written" in line


def test_sigterm_stops_the_whole_command(tmp_path: Path) -> None:
    """One SIGTERM ends `hase materialize`: the run in progress stops and no later partition starts."""
    import selectors
    import signal
    import time

    config = tmp_path / "hase.yaml"
    config.write_text(yaml.safe_dump(TEST_PROFILE))
    env = {
        **os.environ,
        "HASE_CONFIG": str(config),
        "HASE_DATA_DIR": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
    }
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "materialize"]
    process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + 120
    seen = ""
    while "benchmark_job" not in seen and time.monotonic() < deadline and process.poll() is None:
        if selector.select(timeout=1):
            seen += process.stderr.readline()
    assert "benchmark_job" in seen, "the benchmark stage never started"
    process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    out, err = process.communicate(timeout=60)
    assert time.monotonic() - stopped < 30
    assert process.returncode == 2 and "interrupted" in err and "Traceback" not in err.split("hase: error:")[-1]
    assert "learning" not in out and "partition 2" not in out
