"""Issue 13's remaining operations cases: the nightly schedule's default, Dagster warnings when the code
location loads, CUDA options on a machine without CUDA, and a real full disk under a warehouse write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from hase_dagster.core.ort_runtime import cuda_is_usable
from warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[1]
ROOT = os.geteuid() == 0


def test_the_nightly_schedule_is_off_by_default_and_the_readme_says_how_to_start_it() -> None:
    from hase_dagster.definitions import defs

    schedule = defs.resolve_schedule_def("nightly_benchmarks")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    readme = (REPO / "README.md").read_text()
    assert "**off by default**" in readme and "dagster schedule start nightly_benchmarks" in readme


def test_loading_the_code_location_prints_no_beta_warning() -> None:
    """`make dev` printed `BetaWarning: MultiToSingleDimensionPartitionMapping` 39 times."""
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import hase_dagster.definitions"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "BetaWarning" not in done.stderr


def _hase(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HASE_DATA_DIR": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path / "dagster")}
    env.pop("HASE_CONFIG", None)  # the repository's hase.yaml, which has the gpu profile
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", *args]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(cuda_is_usable(), reason="CUDA runs here: the case is a machine without it")
@pytest.mark.parametrize(
    "args", [("predict", "{model}", "--batch-size", "1", "--ep", "cuda"), ("evaluate", "{model}", "--profile", "gpu")]
)
def test_cuda_options_without_cuda_say_so_not_no_predictor(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Both said "no trained predictor" on a machine without a GPU."""
    from tests.test_interrupts import _relu

    model = _relu(tmp_path / "relu.onnx")
    result = _hase(tmp_path, *(a.format(model=model) for a in args))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("hase: error:"), result.stderr
    assert "CUDA" in lines[0] and "does not run" in lines[0] and "no trained predictor" not in lines[0]


def _edges(n: int) -> pd.DataFrame:
    index = np.arange(n).astype(str)
    return pd.DataFrame(
        {
            "variant_id": "m_b1",
            "ep": "cpu",
            "batch_size": 1,
            "src_kernel": "k" + index,
            "dst_kernel": "j" + index,
            "tensor": "t" + index,
            "bytes": 4,
            "run_id": "r",
        }
    )


@pytest.mark.skipif(not ROOT, reason="a full disk is a small tmpfs, which needs root to mount")
def test_a_write_on_a_really_full_disk_names_the_disk_and_keeps_the_rows(tmp_path: Path) -> None:
    """DuckDB on a full tmpfs: the error says "No space left on device", not the ROLLBACK's
    "cannot rollback - no transaction is active", and the partition keeps its previous rows."""
    data = tmp_path / "full"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(data)], check=True, timeout=30)
    try:
        store = Warehouse(data / "hase.duckdb")
        store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(3))
        with (data / "filler").open("wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
        with pytest.raises(Exception, match="No space left on device") as error:
            store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(400_000))
        assert "rollback" not in str(error.value).lower()
        (data / "filler").unlink()
        assert store.count("dag_edges", batch_size=1) == 3
    finally:
        subprocess.run(["umount", str(data)], check=True, timeout=30)
