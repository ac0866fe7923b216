"""`hase materialize` frees what a crashed run left behind in a persistent Dagster instance."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from hase_dagster.orchestration.materialize import reclaim_crashed_runs

SCRIPT = """
import time, dagster as dg
from hase_dagster.orchestration.materialize import run_job

@dg.asset(pool="hase_accelerator")
def slow() -> None:
    print("started", flush=True)
    time.sleep(60)

job = dg.Definitions(assets=[slow], jobs=[dg.define_asset_job("slow_job", selection=[slow])]).resolve_job_def(
    "slow_job"
)
run_job(job, None, dg.DagsterInstance.get(), {}, "test")
"""


def test_a_killed_run_is_failed_and_its_pool_slot_freed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n    granularity: op\n")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    child = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"
    child.send_signal(signal.SIGKILL)
    child.wait()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        stuck = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        assert len(stuck) == 1
        assert instance.event_log_storage.get_concurrency_info("hase_accelerator").active_slot_count == 1
        assert reclaim_crashed_runs(instance) == [stuck[0].run_id]
        assert instance.get_run_by_id(stuck[0].run_id).status == dg.DagsterRunStatus.FAILURE
        deadline = time.monotonic() + 5
        while instance.event_log_storage.get_concurrency_info("hase_accelerator").active_slot_count:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert reclaim_crashed_runs(instance) == []
