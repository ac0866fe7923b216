"""Timing in a child process (``run_benchmarks(isolated=True)``): a target that kills the process
costs its own row, the others are timed, in order, with their load windows."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from typing import Any

import onnx
import pytest

from hase_dagster.core.config import TelemetryOptions, TimingOptions
from hase_dagster.measure.benchmark import BenchmarkTarget, run_benchmarks
from hase_dagster.measure.runner import ModelRunner, Timing
from hase_dagster.measure.telemetry import HOST_FIELDS, TelemetrySampler, metric_source
from tests.conftest import conv_network

TIMING = TimingOptions(warmup=1, min_loops=3, max_loops=3, min_seconds=0, max_seconds=1)
TELEMETRY = TelemetryOptions(fields=list(HOST_FIELDS), background_window_s=0.05)


def small_network(path: Path) -> Path:
    """A three-convolution network ORT 1.31 loads (``conv_network`` saves the onnx package's IR)."""
    model = onnx.load(str(conv_network(path, 1, 8, 16)))
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def aborting_runner(path: Path, *args: Any, **kwargs: Any) -> ModelRunner:
    """ModelRunner, except that a file named ``abort*`` kills the process as ORT's CUDA EP does on a
    CUDA error it cannot throw past (SIGABRT)."""
    if path.name.startswith("abort"):
        os.abort()
    return ModelRunner(path, *args, **kwargs)


def test_a_target_that_kills_the_timing_process_costs_only_its_own_row(tmp_path: Path) -> None:
    good = [small_network(tmp_path / f"net{i}.onnx") for i in range(3)]
    poison = small_network(tmp_path / "abort.onnx")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not onnx")
    files = [good[0], poison, good[1], broken, good[2]]
    targets = [BenchmarkTarget(p, {"variant_id": p.stem}) for p in files]
    progress: list[int] = []
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        rows = run_benchmarks(
            targets, "cpu", sampler, TIMING, TELEMETRY, level="all", isolated=True, runner_factory=aborting_runner,
            progress=lambda done, total, _: progress.append(done),
        )  # fmt: skip
    assert [r["variant_id"] for r in rows] == [p.stem for p in files]
    assert [r["status"] for r in rows] == ["ok", "error", "ok", "error", "ok"]
    assert f"exit code {-signal.SIGABRT}" in rows[1]["error"] and "abort.onnx" in rows[1]["error"]
    assert rows[3]["error"].startswith("broken.onnx:")  # an exception is an error row, no restart
    for row in (rows[0], rows[2], rows[4]):
        assert row["mean_ms"] > 0 and row["n"] == 3 and row["end_ns"] > row["start_ns"]
        assert "win_HOST_CPU_UTIL" in row and "bg_HOST_CPU_UTIL" in row
    assert progress == [1, 2, 3, 4, 5]


def test_isolated_timing_cannot_measure_this_processs_memory(tmp_path: Path) -> None:
    target = BenchmarkTarget(small_network(tmp_path / "n.onnx"), {})
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        with pytest.raises(ValueError, match="cannot be isolated"):
            run_benchmarks([target], "cpu", sampler, TIMING, TELEMETRY, isolated=True, measure_memory=True)


class DeviceClockStandIn:
    """A runner on a stand-in "device" clock (the CPU's, labelled device), which aborts the process for a file
    named ``rnn*`` as ORT's CUDA LSTM and GRU do under the real one; on the host clock it is ModelRunner."""

    def __init__(self, path: Path, *args: Any, clock: str = "host", **kwargs: Any) -> None:
        if clock == "device" and path.name.startswith("rnn"):
            os.abort()
        self.clock = clock
        self._runner = ModelRunner(path, *args, clock="host", **kwargs)

    def time(self, config: TimingOptions) -> Timing:
        timing = self._runner.time(config.model_copy(update={"clock": "host"}))
        return dataclasses.replace(timing, clock=self.clock)


def on_the_stand_in_device_clock(files: list[Path]) -> list[dict[str, Any]]:
    """``files`` timed in a child on :class:`DeviceClockStandIn`'s device clock."""
    targets = [BenchmarkTarget(p, {"variant_id": p.stem}) for p in files]
    on_device = TIMING.model_copy(update={"clock": "device"})
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        return run_benchmarks(
            targets, "cpu", sampler, on_device, TELEMETRY, level="all", isolated=True,
            runner_factory=DeviceClockStandIn,
        )  # fmt: skip


def test_a_file_that_kills_the_device_clock_is_timed_on_the_host_clock(tmp_path: Path) -> None:
    rows = on_the_stand_in_device_clock([small_network(tmp_path / name) for name in ("net0.onnx", "rnn.onnx")])
    assert [r["status"] for r in rows] == ["ok"] * 2
    assert [r["clock"] for r in rows] == ["device", "host"]
    assert all(r["mean_ms"] > 0 and r["n"] == 3 for r in rows)


def test_after_one_death_files_of_the_same_operators_go_to_the_host_clock_at_once(tmp_path: Path) -> None:
    # rnn.onnx kills the device clock; net.onnx has the same operators, so it is not tried there again,
    # other.onnx (one more operator, a Sigmoid) is
    rnn, same = small_network(tmp_path / "rnn.onnx"), small_network(tmp_path / "net.onnx")
    other = onnx.load(str(small_network(tmp_path / "other.onnx")))
    sigmoid = onnx.helper.make_node("Sigmoid", [other.graph.output[0].name], ["sigmoid_out"])
    other.graph.node.append(sigmoid)
    other.graph.output[0].name = "sigmoid_out"
    onnx.save(other, str(tmp_path / "other.onnx"))
    rows = on_the_stand_in_device_clock([rnn, same, tmp_path / "other.onnx"])
    assert [r["clock"] for r in rows] == ["host", "host", "device"]


def split_network(path: Path, sizes: list[int]) -> Path:
    """One Split of a [1, sum(sizes), 4] input into ``sizes`` along axis 1, the way a kernel file holds it."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    total = sum(sizes)
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, n, 4]) for i, n in enumerate(sizes)]
    graph = helper.make_graph(
        [helper.make_node("Split", ["x", "split"], [o.name for o in outputs], axis=1)],
        "split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, total, 4])],
        outputs,
        [numpy_helper.from_array(np.array(sizes, dtype=np.int64), "split")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_one_uneven_split_that_kills_the_device_clock_leaves_even_splits_on_it(tmp_path: Path) -> None:
    # ORT's CUDA Split stages uneven sizes in pinned host buffers, which kill the device clock, and even ones
    # not: after rnn_uneven.onnx dies, another uneven Split goes to the host clock at once, even ones stay
    files = [
        split_network(tmp_path / "rnn_uneven.onnx", [2, 4]),
        split_network(tmp_path / "even3.onnx", [2, 2, 2]),
        split_network(tmp_path / "uneven.onnx", [1, 5]),
        split_network(tmp_path / "even2.onnx", [3, 3]),
    ]
    rows = on_the_stand_in_device_clock(files)
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert [r["clock"] for r in rows] == ["host", "device", "host", "device"]


def test_on_the_host_clock_a_file_that_kills_the_process_is_not_timed_again(tmp_path: Path) -> None:
    target = BenchmarkTarget(small_network(tmp_path / "rnn.onnx"), {})
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        [row] = run_benchmarks(
            [target], "cpu", sampler, TIMING, TELEMETRY, isolated=True, runner_factory=aborting_everywhere
        )
    assert row["status"] == "error" and row["error"].endswith("the rest went on")
    assert "host clock" not in row["error"]


def aborting_everywhere(path: Path, *args: Any, **kwargs: Any) -> ModelRunner:
    """A runner that kills the process on any clock."""
    os.abort()


def test_a_file_that_kills_both_clocks_is_an_error_row_that_says_so(tmp_path: Path) -> None:
    target = BenchmarkTarget(small_network(tmp_path / "rnn.onnx"), {})
    on_device = TIMING.model_copy(update={"clock": "device"})
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        [row] = run_benchmarks(
            [target], "cpu", sampler, on_device, TELEMETRY, isolated=True, runner_factory=aborting_everywhere
        )
    assert row["status"] == "error"
    assert f"exit code {-signal.SIGABRT}), and on the host clock: rnn.onnx: the timing process died" in row["error"]
