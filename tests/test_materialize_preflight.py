"""`hase materialize` refuses in seconds, with one line and exit 2, what would fail minutes into a run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
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


def test_reference_tables_that_are_not_there_are_named(tmp_path: Path) -> None:
    config = yaml.safe_load(yaml.safe_dump(TEST_PROFILE))
    config["profiles"]["tiny"]["reference_tables"] = "no/such/tables"
    line = _one_error_line(_materialize(tmp_path, config=config))
    assert f"reference tables {tmp_path / 'no' / 'such' / 'tables'} lack kernel_benchmarks.parquet" in line
    assert not (tmp_path / "data" / "models").exists()


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
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
        [stopped_run] = instance.get_runs(filters=dg.RunsFilter(job_name="benchmark_job"))
        assert stopped_run.status == dg.DagsterRunStatus.CANCELED  # not a failure of its own


# -- a read-only warehouse and a full disk (issue 13, item 5) -------------------------------------------

ROOT = os.geteuid() == 0


@contextlib.contextmanager
def _mounted(*mount_args: str, target: Path) -> Iterator[Path]:
    """``mount ARGS target`` (root only), unmounted on exit."""
    subprocess.run(["mount", *mount_args, str(target)], check=True, capture_output=True, timeout=30)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True, capture_output=True, timeout=30)


def test_a_read_only_warehouse_is_named_before_any_run(tmp_path: Path) -> None:
    """Root ignores permission bits, so as root the database file is bind-mounted read-only (a real
    read-only filesystem); otherwise it is chmod 444."""
    import duckdb

    database = tmp_path / "data" / "hase.duckdb"
    database.parent.mkdir()
    duckdb.connect(str(database)).close()
    if ROOT:
        with _mounted("--bind", str(database), target=database):
            subprocess.run(["mount", "-o", "remount,bind,ro", str(database)], check=True, timeout=30)
            result = _materialize(tmp_path, "--stage", "analysis", config=TEST_PROFILE)
    else:
        database.chmod(0o444)
        result = _materialize(tmp_path, "--stage", "analysis", config=TEST_PROFILE)
    line = _one_error_line(result)
    assert str(database) in line and "cannot be opened for writing" in line
    assert "Read-only file system" in line or "Permission denied" in line
    assert "partition" not in result.stdout  # no run started


@pytest.mark.skipif(not ROOT, reason="a full disk is simulated with a small tmpfs, which needs root to mount")
def test_a_full_disk_is_named_before_any_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with _mounted("-t", "tmpfs", "-o", "size=4m", "tmpfs", target=data):
        with (data / "filler").open("wb") as filler:  # fill it: ENOSPC ends the loop
            with contextlib.suppress(OSError):
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
        line = _one_error_line(_materialize(tmp_path, config=TEST_PROFILE))
    assert f"the disk holding the data directory {data} is full" in line


@pytest.mark.skipif(not ROOT, reason="a full disk is simulated with a small tmpfs, which needs root to mount")
def test_a_disk_that_fills_during_a_run_is_named_in_one_line(tmp_path: Path) -> None:
    """70 MiB pass the preflight; exporting and optimizing resnet18 fills them (ONNX Runtime then says
    "Protobuf serialization failed"): one error line names the full disk, no stack trace on the console."""
    data = tmp_path / "data"
    data.mkdir()
    with _mounted("-t", "tmpfs", "-o", "size=70m", "tmpfs", target=data):
        result = _materialize(tmp_path, "--stage", "analysis", "--batch-size", "1", config=TEST_PROFILE)
    line = _one_error_line(result)
    assert f"the disk holding {data} is full" in line and "analysis 1" in line
    assert "Stack Trace" not in result.stderr and len(result.stderr.splitlines()) < 20
