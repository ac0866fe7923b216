"""The error contract: bad input or a fault gives one line ``hase: error: <what is wrong>`` on stderr and
exit status 2, never a traceback and never a silent wrong number. Each case here was found by a user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import onnx
import pandas as pd
import pytest
from onnx import helper

from hase_dagster.core.errors import HaseError
from hase_dagster.orchestration.cli import build_parser, main
from tests.test_stressor import _gone, _group_gone
from warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-node ONNX model (Relu), enough for every command that only checks its arguments."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path_factory.mktemp("kernel") / "K.onnx"
    onnx.save(model, str(path))
    return path


def _hase(
    tmp_path: Path, *args: str, data_dir: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, on a data directory of its own (empty unless given)."""
    env = {
        **os.environ,
        "HASE_DATA_DIR": str(data_dir if data_dir is not None else tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
    }
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", *args]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    """Exit status 2, no traceback, and stderr is exactly one line, ``hase: error: ...``."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hase: error:"), lines[0]
    return lines[0]


# 1. run-kernel: --warmup and --loops are checked by the parser, not by a pydantic traceback.


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [("--warmup", "-5", "non-negative integer, got -5"), ("--loops", "0", "positive integer, got 0")],
)
def test_run_kernel_refuses_negative_warmup_and_zero_loops(
    kernel: Path, tmp_path: Path, option: str, value: str, named: str
) -> None:
    line = _one_error_line(_hase(tmp_path, "run-kernel", "--model", str(kernel), option, value))
    assert option in line and named in line
    assert "ValidationError" not in line


# 2. run-kernel --clock device needs the CUDA EP.


def test_run_kernel_device_clock_needs_the_cuda_ep(kernel: Path, tmp_path: Path) -> None:
    line = _one_error_line(_hase(tmp_path, "run-kernel", "--model", str(kernel), "--clock", "device"))
    assert "--clock device" in line and "CUDA EP" in line and "--ep cpu" in line


def test_run_kernel_device_clock_on_a_machine_without_cuda(kernel: Path, tmp_path: Path) -> None:
    from hase_dagster.core.ort_runtime import cuda_is_usable

    if cuda_is_usable():
        pytest.skip("this machine has a usable GPU")
    args = ("run-kernel", "--model", str(kernel), "--clock", "device", "--ep", "cuda")
    line = _one_error_line(_hase(tmp_path, *args))
    assert "--clock device needs the CUDA EP" in line and "does not run on this machine" in line


# 3. stress: a bad duration or intensity is refused before a stressor starts.


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--intensity", "0.5", "--duration", "-5"], "--duration: must be a positive number of seconds, got -5"),
        (["--intensity", "0.5", "--duration", "0"], "--duration: must be a positive number of seconds, got 0"),
        (["--intensity", "0.5", "--duration", "inf"], "--duration: must be a finite number"),
        (["--intensity", "1.5", "--duration", "1"], "--intensity: must be in [0, 1], got 1.5"),
        (["--intensity", "nan", "--duration", "1"], "--intensity: must be a finite number"),
    ],
)
def test_stress_refuses_bad_duration_and_intensity_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    started = time.monotonic()
    result = _hase(tmp_path, "stress", *args)
    assert time.monotonic() - started < 30
    assert named in _one_error_line(result)
    assert "stressing" not in result.stdout
    # In process: the parser refuses it, so no Stressor is ever made.
    import hase_dagster.measure.stressor as stressor_module

    def no_stressor(*_: object, **__: object) -> None:
        raise AssertionError("a Stressor was made for a refused command")

    monkeypatch.setattr(stressor_module, "Stressor", no_stressor)
    with pytest.raises(SystemExit) as exit_info:
        main(["stress", *args])
    assert exit_info.value.code == 2


# 4. stress --device cuda without a GPU: one line, not the child's traceback.


def test_stress_on_cuda_without_a_gpu_is_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    line = _one_error_line(_hase(tmp_path, "stress", "--device", "cuda", "--intensity", "0.5", "--duration", "1"))
    assert "CUDA is not available here" in line
    assert "File " not in line and "raise " not in line


def test_gpu_stressor_failure_is_reported_in_one_line() -> None:
    from hase_dagster.measure.stressor import Stressor

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(HaseError) as error:
        Stressor("cuda", 0.5).start()
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith("stressor on cuda did not start: CUDA is not available here")


# 5. predict --load level=X: in [0, 1] and finite, checked before anything is read.


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("level=1.5", "level 1.5 is out of range [0, 1]"),
        ("level=-0.1", "level -0.1 is out of range [0, 1]"),
        ("level=nan", "level must be a finite number in [0, 1]"),
        ("level=inf", "level must be a finite number in [0, 1]"),
        ("idle,level=-inf", "level must be a finite number in [0, 1]"),
        ("level=high", "level must be a number in [0, 1]"),
    ],
)
def test_predict_refuses_a_load_level_outside_the_unit_interval(
    kernel: Path, tmp_path: Path, spec: str, named: str
) -> None:
    line = _one_error_line(_hase(tmp_path, "predict", str(kernel), "--batch-size", "1", "--load", spec))
    assert named in line and "never benchmarked" not in line


def test_resolve_load_refuses_a_bad_level_before_reading_the_warehouse() -> None:
    from hase_dagster.learn.predict_file import parse_load_spec, resolve_load

    for spec in ("level=1.5", "level=nan", "level=inf"):
        with pytest.raises(HaseError, match=r"\[0, 1\]"):
            resolve_load(spec, None, "cpu", [], "http://127.0.0.1:1")  # type: ignore[arg-type]
    assert parse_load_spec("level=0.5") == ("level", 0.5)
    assert parse_load_spec("level=1") == ("level", 1.0)
    assert parse_load_spec("idle") == ("idle", None)


# 6. predict --top: a negative number is refused; 0 lists no kernel.


def test_predict_refuses_a_negative_top(kernel: Path, tmp_path: Path) -> None:
    line = _one_error_line(_hase(tmp_path, "predict", str(kernel), "--batch-size", "1", "--top", "-3"))
    assert "--top" in line and "non-negative integer, got -3" in line
    args = build_parser().parse_args(["predict", str(kernel), "--batch-size", "1", "--top", "0"])
    assert args.top == 0


# 7. report on a data directory without a warehouse creates nothing there.


def test_report_without_a_warehouse_creates_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    line = _one_error_line(_hase(tmp_path, "report", data_dir=empty))
    assert f"no warehouse at {empty / 'hase.duckdb'}" in line
    assert list(empty.iterdir()) == []
    missing = tmp_path / "missing"
    line = _one_error_line(_hase(tmp_path, "report", data_dir=missing))
    assert "no warehouse at" in line and not missing.exists()


# 8. evaluate: a model that cannot be loaded is an error case; the others go on.


def test_evaluate_records_a_model_it_cannot_load_and_goes_on(
    kernel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hase_dagster.core.config import load_config
    from hase_dagster.learn import predict_file
    from hase_dagster.learn.predict_file import evaluate_files, prepare_files

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "a_notes.onnx").write_text("this is not a model")
    shutil.copy(kernel, folder / "b_kernel.onnx")
    paths = sorted(folder.glob("*.onnx"))
    work = tmp_path / "work"
    work.mkdir()

    prepared, errors = prepare_files(paths, "cpu", work)
    assert [p.path.name for p in prepared] == ["b_kernel.onnx"] and prepared[0].kernels
    assert len(errors) == 1 and errors[0]["model"] == "a_notes.onnx"
    assert "not a valid ONNX file" in errors[0]["error"]

    # The whole evaluation counts it as a failed case (no stress level: nothing measured, no predictor needed).
    monkeypatch.setattr(predict_file.Predictor, "load", staticmethod(lambda folder: object()))
    report = evaluate_files(paths, load_config().profiles["cpu"], [], tmp_path / "data")
    assert report["cases"] == errors
    assert report["summary"] == {"cases": 0, "failed": 1}


def test_evaluate_prints_a_model_it_could_not_load(
    kernel: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hase_dagster.learn import predict_file

    report = {
        "ep": "cpu",
        "cases": [{"model": "notes.onnx", "error": "notes.onnx is not a valid ONNX file"}],
        "summary": {"cases": 0, "failed": 1},
    }
    monkeypatch.setattr(predict_file, "evaluate_files", lambda *args: report)
    assert main(["evaluate", str(kernel)]) == 0
    out = capsys.readouterr().out
    assert "notes.onnx" in out and "ERROR notes.onnx is not a valid ONNX file" in out and "1 case(s) failed" in out


# 9. warehouse: a failed write raises its own cause, not the ROLLBACK's, and keeps the previous rows.


def _edges(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant_id": ["m_b1"] * n,
            "ep": ["cpu"] * n,
            "batch_size": [1] * n,
            "src_kernel": [f"k{i}" for i in range(n)],
            "dst_kernel": [f"k{i + 1}" for i in range(n)],
            "tensor": [f"t{i}" for i in range(n)],
            "bytes": [4] * n,
            "run_id": ["r"] * n,
        }
    )


class _DiskFull:
    """A connection whose ``statement`` fails as on a full disk. A failing COMMIT ends the transaction
    first, as DuckDB's does, so a ROLLBACK after it finds none."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, statement: str) -> None:
        self._connection = connection
        self._statement = statement

    def execute(self, sql: str, *args: object) -> object:
        if sql.startswith(self._statement):
            if self._statement == "COMMIT":
                self._connection.execute("ROLLBACK")
            raise duckdb.IOException('Could not write file "hase.duckdb.wal": No space left on device')
        return self._connection.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._connection, name)


@pytest.mark.parametrize("statement", ["INSERT", "COMMIT"])
def test_failed_write_raises_its_cause_and_keeps_previous_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, statement: str
) -> None:
    from contextlib import contextmanager

    store = Warehouse(tmp_path / "w.duckdb")
    store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(3))
    real_connect = Warehouse.connect

    @contextmanager
    def failing_connect(self: Warehouse, read_only: bool = False):  # type: ignore[no-untyped-def]
        with real_connect(self, read_only) as connection:
            yield _DiskFull(connection, statement)

    monkeypatch.setattr(Warehouse, "connect", failing_connect)
    with pytest.raises(duckdb.Error, match="No space left on device") as error:
        store.replace_partition("dag_edges", {"batch_size": 1, "ep": "cpu"}, _edges(2))
    assert "cannot rollback" not in str(error.value)
    monkeypatch.setattr(Warehouse, "connect", real_connect)
    assert store.count("dag_edges", batch_size=1) == 3


# 10. the CPU stressor ends at once on SIGTERM, not after the 5 s SIGKILL fallback.


def test_cpu_stressor_stops_promptly_on_sigterm() -> None:
    from hase_dagster.measure.stressor import Stressor

    # A SIGTERM right after "ready" once met workers still starting and was lost: stop at once, several times.
    for _ in range(5):
        stressor = Stressor("cpu", 0.5)
        stressor.start()
        pid = stressor.pid
        assert pid is not None
        started = time.monotonic()
        stressor.stop()
        elapsed = time.monotonic() - started
        assert elapsed < 2.5, f"stop took {elapsed:.1f} s"
        # The workers got the same SIGTERM; they may take a few ms more than the leader stop() waits for.
        assert _gone(pid, timeout_s=2.0) and _group_gone_within(pid, 2.0)


def _group_gone_within(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _group_gone(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# 11. install-prometheus.sh: where it cannot install, a loud warning and exit 0 (make test goes on).


def _install_script(tmp_path: Path, uid: int, sudo_ok: bool, apt_ok: bool) -> subprocess.CompletedProcess:
    """Run a copy of the script that looks for a binary that is missing, with id, sudo and apt-get faked."""
    script = (REPO / "hase_dagster" / "prometheus" / "install-prometheus.sh").read_text()
    missing = tmp_path / "no" / "prometheus"
    copy = tmp_path / "install-prometheus.sh"
    copy.write_text(script.replace("PROMETHEUS_BIN=/usr/bin/prometheus", f"PROMETHEUS_BIN={missing}", 1))
    copy.chmod(0o755)
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    for name, body in {
        "id": f"echo {uid}",
        "sudo": f'echo "sudo $*" >> {calls}; exit {0 if sudo_ok else 1}',
        "apt-get": f'echo "apt-get $*" >> {calls}; exit {0 if apt_ok else 100}',
    }.items():
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(copy)], env=env, capture_output=True, text=True, timeout=60)


def test_install_prometheus_without_root_warns_and_exits_0(tmp_path: Path) -> None:
    result = _install_script(tmp_path, uid=1000, sudo_ok=False, apt_ok=True)
    assert result.returncode == 0, result.stderr
    assert "WARNING: Prometheus is NOT installed" in result.stderr and "passwordless sudo" in result.stderr
    assert "apt-get" not in (tmp_path / "calls").read_text()  # only `sudo -n true` was tried


def test_install_prometheus_when_apt_fails_warns_and_exits_0(tmp_path: Path) -> None:
    result = _install_script(tmp_path, uid=0, sudo_ok=False, apt_ok=False)
    assert result.returncode == 0, result.stderr
    assert "WARNING: Prometheus is NOT installed" in result.stderr and "apt-get" in result.stderr
    assert "apt-get" in (tmp_path / "calls").read_text()
