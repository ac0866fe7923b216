"""One Ctrl-C (SIGINT) or SIGTERM stops any `hase` command with one error line and exit 2: no
KeyboardInterrupt traceback (`hase run-kernel` printed one), and the command's cleanups run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import helper

REPO = Path(__file__).resolve().parents[1]


def _relu(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def _timing_started(pid: int) -> bool:
    """ONNX Runtime's library is mapped: the command is inside its handler, timing the model."""
    try:
        return "onnxruntime_pybind11_state" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_stops_run_kernel_with_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    model = _relu(tmp_path / "relu.onnx")
    command = [sys.executable, "-m", "hase_dagster.orchestration.cli", "run-kernel", "--model", str(model)]
    process = subprocess.Popen(
        [*command, "--loops", "100000000"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a child of a background job would start with SIGINT ignored, as a shell's `cmd &` does
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not _timing_started(process.pid) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(2)  # into the timing loop
    assert process.poll() is None, process.communicate()
    process.send_signal(sig)
    sent = time.monotonic()
    out, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert process.returncode == 2, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines() == [
        "hase: error: interrupted: stopped before the command finished"
    ]
