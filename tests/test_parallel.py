"""Analysis workers never outlive the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import os, sys, time
from functools import partial
from hase_dagster.analysis.parallel import map_variants

def record_and_sleep(folder, index):
    open(os.path.join(folder, f"{os.getpid()}.pid"), "w").close()
    time.sleep(120)

if __name__ == "__main__":
    map_variants(partial(record_and_sleep, sys.argv[1]), [0, 1], workers=2)
"""


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


# A parent started with SIGTERM ignored passes that on to its workers through fork and exec; they must
# still die with it (the full suite once left such workers behind).
@pytest.mark.parametrize("sigterm_ignored", [False, True])
def test_workers_die_when_their_parent_is_killed(tmp_path: Path, sigterm_ignored: bool) -> None:
    script = tmp_path / "parent.py"
    script.write_text(SCRIPT)
    folder = tmp_path / "pids"
    folder.mkdir()
    parent = subprocess.Popen(
        [sys.executable, str(script), str(folder)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=_ignore_sigterm if sigterm_ignored else None,
    )
    deadline = time.monotonic() + 60
    while len(list(folder.glob("*.pid"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = [int(p.stem) for p in folder.glob("*.pid")]
    assert len(workers) == 2 and all(psutil.pid_exists(pid) for pid in workers)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
