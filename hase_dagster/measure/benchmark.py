"""The collector: time a list of models (kernels or whole models) under the current load, with the
accelerator metrics over each timed window and the background load measured without our work.

The background is sampled in an idle window (nothing of ours running) at the start and again every
``background_refresh_s``; it is what Prometheus will show at prediction time.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hase_dagster.core.config import OrtOptions, TelemetryOptions, TimingOptions
from hase_dagster.core.ort_runtime import EpName, OptimizationLevel
from hase_dagster.measure.model_memory import MemoryMeter
from hase_dagster.measure.runner import ModelRunner
from hase_dagster.measure.telemetry import ALL_FIELDS, TelemetrySampler

Progress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class BenchmarkTarget:
    """One model file to time, with the columns that identify it in the result rows."""

    path: Path
    labels: dict[str, Any] = field(default_factory=dict)


def metric_columns(prefix: str, values: dict[str, float]) -> dict[str, float | None]:
    """One column per known field (``win_``/``bg_`` prefix); None where the machine has no such metric."""
    return {f"{prefix}{name}": values.get(name) for name in ALL_FIELDS}


def run_benchmarks(
    targets: Iterable[BenchmarkTarget],
    ep: EpName,
    sampler: TelemetrySampler,
    timing: TimingOptions,
    telemetry: TelemetryOptions,
    options: OrtOptions | None = None,
    level: OptimizationLevel = "disable",
    progress: Progress | None = None,
    measure_memory: bool = False,
    isolated: bool = False,
    runner_factory: Callable[..., Any] = ModelRunner,
) -> list[dict[str, Any]]:
    """Time every target; a target that fails gets a row with its error and no latency.

    Args:
        targets: the ONNX files and their labels.
        ep: the execution provider they run on.
        sampler: the telemetry of the partition's load (background and each target's window).
        timing: how long and on which clock each target is timed.
        telemetry: how the background is sampled.
        options: ORT session options.
        level: ORT's graph optimisation level.
        progress: called after each target with (done, total, seconds).
        measure_memory: each row also gets the memory the target's session held
            (:mod:`hase_dagster.measure.model_memory`); not with ``isolated``.
        isolated: time the targets in a child process, started again after the one that kills it: a
            native abort (ORT's CUDA EP terminates the process on some CUDA errors) then costs that
            target's row, not the partition's.
        runner_factory: builds the runner of one target (``ModelRunner``'s signature); a test's stand-in.

    Returns:
        One row per target, in order: its labels, ``status`` and ``error``, and its timing and load
        windows when it ran.
    """
    targets = list(targets)
    how = _HowToTime(ep, options, level, timing, runner_factory)
    if isolated:
        if measure_memory:
            raise ValueError("measure_memory reads this process's memory: it cannot be isolated")
        with _ChildTimer(how) as in_child:
            return _run_all(targets, sampler, telemetry, progress, in_child)
    meter = MemoryMeter(ep) if measure_memory else None
    with _pinned_to_one_core(ep == "cpu"):
        return _run_all(targets, sampler, telemetry, progress, how.timer(meter))


@contextmanager
def _pinned_to_one_core(enabled: bool) -> Iterator[None]:
    """On the CPU EP, run the measured work on one core, which the stressor also loads; the
    scheduler would otherwise move it to whichever core is free and hide the contention."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# Times one ONNX file: its Timing as a dict (with memory columns where measured) or an error.
TimeOne = Callable[[Path], tuple[dict[str, Any] | None, str | None]]


def _run_all(
    targets: list[BenchmarkTarget],
    sampler: TelemetrySampler,
    telemetry: TelemetryOptions,
    progress: Progress | None,
    time_one: TimeOne,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    background = sampler.measure_idle_window(telemetry.background_window_s)
    background_at = time.monotonic()
    for done, target in enumerate(targets, start=1):
        if time.monotonic() - background_at > telemetry.background_refresh_s:
            background = sampler.measure_idle_window(telemetry.background_window_s)
            background_at = time.monotonic()
        timing, error = time_one(target.path)
        rows.append(_result_row(target, sampler, background, timing, error))
        if progress is not None:
            progress(done, len(targets), time.monotonic() - started)
    return rows


def _result_row(
    target: BenchmarkTarget,
    sampler: TelemetrySampler,
    background: dict[str, float],
    timing: dict[str, Any] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """One target's row: its labels and path, its timing and the load in its window (``timing``, a
    :class:`Timing` as a dict) or its ``error``, and the background."""
    row: dict[str, Any] = {**target.labels, "path": str(target.path)}
    if timing is None:
        result, window = {"status": "error", "error": error}, {}
    else:
        result = timing | {"status": "ok", "error": None}
        window = sampler.window_mean(timing["start_ns"], timing["end_ns"])
    return row | result | metric_columns("win_", window) | metric_columns("bg_", background)


@dataclass(frozen=True)
class _HowToTime:
    """What timing one file needs, in this process or sent to a child (picklable)."""

    ep: EpName
    options: OrtOptions | None
    level: OptimizationLevel
    config: TimingOptions
    runner_factory: Callable[..., Any]

    def timer(self, meter: MemoryMeter | None = None) -> TimeOne:
        """Times each file in this process, with the memory its session held when ``meter`` is given."""

        def time_one(path: Path) -> tuple[dict[str, Any] | None, str | None]:
            try:
                before = meter.read() if meter is not None else None
                runner = self.runner_factory(path, self.ep, self.options, level=self.level, clock=self.config.clock)
                timing = runner.time(self.config).to_dict()
                if meter is not None and before is not None:
                    timing |= meter.columns(before, meter.read(), runner.session)
                del runner  # its session's memory goes before the next target's baseline
            except Exception as exc:  # one broken file must not lose the partition's other rows
                return None, f"{path.name}: {exc}"
            return timing, None

        return time_one

    def on_host_clock(self) -> _HowToTime:
        """The same timing on the host clock."""
        return replace(self, config=self.config.model_copy(update={"clock": "host"}))


def _time_in_child(connection: Any, how: _HowToTime) -> None:
    """The child of :class:`_ChildTimer`: times each path the parent sends as :meth:`_HowToTime.timer` does and
    answers (timing, error) until it sends None; between files it waits, so the parent can read an idle
    background."""
    time_one = how.timer()
    with _pinned_to_one_core(how.ep == "cpu"):
        while (path := connection.recv()) is not None:
            connection.send(time_one(Path(path)))
    connection.close()


ClockKey = tuple[frozenset[str], int, bool]


def _clock_key(path: Path) -> ClockKey:
    """What decides whether an ONNX file's run survives the device clock: its graph's operator types, its number
    of outputs and whether they all share one shape (empty, 0, True when it does not load).

    The outputs are in the key because ORT's CUDA Split stages uneven split sizes in pinned host buffers (the
    ones a run that does not synchronize frees in a stream callback, where CUDA refuses it) and even ones not:
    one Split of 4 and 60 rows must not send the even three-way splits of attention heads to the host clock.
    """
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # a broken file is the child's to report
        return frozenset(), 0, True
    shapes = {
        tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in output.type.tensor_type.shape.dim)
        for output in graph.output
    }
    return frozenset(f"{node.domain}.{node.op_type}" for node in graph.node), len(graph.output), len(shapes) <= 1


class _ChildTimer:
    """Times one file at a time in a child process (spawned: CUDA does not survive a fork); a child that
    dies costs the file it was on, and the next file starts a new one.

    On the device clock, a file whose child dies is timed again on the host clock, in a child of its own:
    ORT's CUDA LSTM and GRU abort a run that does not synchronize (their pinned host buffers are freed in a
    stream callback, where CUDA refuses cudaFreeHost: error 800), which the device clock needs and a user's
    run does not. Such a row's ``clock`` says ``host``: it includes the launch and sync (57-93 us on the H100).
    Later files of the same operators and output layout (:func:`_clock_key`) go to the host clock at once (each
    death costs two process starts).
    """

    def __init__(self, how: _HowToTime) -> None:
        self._how = how
        self._child: Any = None
        self._connection: Any = None
        self._on_host: _ChildTimer | None = None
        self._host_clock_keys: set[ClockKey] = set()  # the files' kinds that killed the device clock

    def __call__(self, path: Path) -> tuple[dict[str, Any] | None, str | None]:
        if self._on_host is not None and _clock_key(path) in self._host_clock_keys:
            return self._on_host(path)
        if self._child is None:
            context = multiprocessing.get_context("spawn")
            self._connection, there = context.Pipe()
            self._child = context.Process(target=_time_in_child, args=(there, self._how), daemon=True)
            self._child.start()
            there.close()  # the child holds the only other end: its death ends recv() with EOFError
        try:
            self._connection.send(str(path))
            answer: tuple[dict[str, Any] | None, str | None] = self._connection.recv()
        except (EOFError, BrokenPipeError):
            died = f"{path.name}: the timing process died (exit code {self._stop()})"
            if self._how.config.clock != "device":
                return None, f"{died}; the rest went on"
            if self._on_host is None:
                self._on_host = _ChildTimer(self._how.on_host_clock())
            timing, error = self._on_host(path)
            if timing is None:
                return None, f"{died}, and on the host clock: {error}"
            self._host_clock_keys.add(_clock_key(path))
            return timing, None
        return answer

    def _stop(self) -> int | None:
        """Ends the child (asked first, killed after 30 s) and returns its exit code."""
        try:
            self._connection.send(None)
        except (BrokenPipeError, OSError):
            pass  # it is gone already
        self._connection.close()
        self._child.join(timeout=30)
        if self._child.is_alive():
            self._child.kill()
            self._child.join()
        code = self._child.exitcode
        self._child = self._connection = None
        return code

    def __enter__(self) -> _ChildTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._child is not None:
            self._stop()
        if self._on_host is not None:
            self._on_host.__exit__()


def default_progress(log: Callable[[str], None], every: int = 25) -> Progress:
    """Log done/total, elapsed and an estimate of the time left every ``every`` targets."""

    def report(done: int, total: int, elapsed: float) -> None:
        if done % every and done != total:
            return
        remaining = elapsed / done * (total - done)
        log(f"{done}/{total} done, {elapsed:.0f} s elapsed, about {remaining:.0f} s left")

    return report
