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
from dataclasses import dataclass, field
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
    if isolated:
        if measure_memory:
            raise ValueError("measure_memory reads this process's memory: it cannot be isolated")
        return _run_isolated(targets, ep, sampler, timing, telemetry, options, level, progress, runner_factory)
    meter = MemoryMeter(ep) if measure_memory else None
    with _pinned_to_one_core(ep == "cpu"):
        return _run_all(targets, ep, sampler, timing, telemetry, options, level, progress, meter)


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


def _run_all(
    targets: list[BenchmarkTarget],
    ep: EpName,
    sampler: TelemetrySampler,
    config: TimingOptions,
    telemetry: TelemetryOptions,
    options: OrtOptions | None,
    level: OptimizationLevel,
    progress: Progress | None,
    meter: MemoryMeter | None = None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    background = sampler.measure_idle_window(telemetry.background_window_s)
    background_at = time.monotonic()
    for done, target in enumerate(targets, start=1):
        if time.monotonic() - background_at > telemetry.background_refresh_s:
            background = sampler.measure_idle_window(telemetry.background_window_s)
            background_at = time.monotonic()
        memory: dict[str, Any] = {}
        try:
            before = meter.read() if meter is not None else None
            runner = ModelRunner(target.path, ep, options, level=level, clock=config.clock)
            timing_result = runner.time(config)
            if meter is not None and before is not None:
                memory = meter.columns(before, meter.read(), runner.session)
            del runner  # its session's memory goes before the next target's baseline
        except Exception as exc:  # one broken file must not lose the partition's other rows
            row = _result_row(target, sampler, background, error=f"{target.path.name}: {exc}")
        else:
            row = _result_row(target, sampler, background, timing=timing_result.to_dict()) | memory
        rows.append(row)
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
        return (
            row | {"status": "error", "error": error} | metric_columns("win_", {}) | metric_columns("bg_", background)
        )
    window = sampler.window_mean(timing["start_ns"], timing["end_ns"])
    return (
        row
        | timing
        | {"status": "ok", "error": None}
        | metric_columns("win_", window)
        | metric_columns("bg_", background)
    )


def _time_in_child(
    connection: Any,
    paths: list[str],
    ep: EpName,
    options: OrtOptions | None,
    level: OptimizationLevel,
    config: TimingOptions,
    runner_factory: Callable[..., Any],
) -> None:
    """The child of :func:`_run_isolated`: on each go from the parent, times the next of ``paths`` and
    sends (True, timing dict) or (False, error); between targets it waits, so the parent can read an
    idle background."""
    with _pinned_to_one_core(ep == "cpu"):
        for path in paths:
            if not connection.recv():
                break
            try:
                runner = runner_factory(Path(path), ep, options, level=level, clock=config.clock)
                result = runner.time(config).to_dict()
                del runner
            except Exception as exc:
                connection.send((False, f"{Path(path).name}: {exc}"))
            else:
                connection.send((True, result))
    connection.close()


def _run_isolated(
    targets: list[BenchmarkTarget],
    ep: EpName,
    sampler: TelemetrySampler,
    config: TimingOptions,
    telemetry: TelemetryOptions,
    options: OrtOptions | None,
    level: OptimizationLevel,
    progress: Progress | None,
    runner_factory: Callable[..., Any],
) -> list[dict[str, Any]]:
    """:func:`_run_all` with the timing in a child process (spawned: CUDA does not survive a fork) and
    the load windows read here; a child that dies costs the target it was on, and a new one goes on
    from the next."""
    context = multiprocessing.get_context("spawn")
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    background = sampler.measure_idle_window(telemetry.background_window_s)
    background_at = time.monotonic()

    def add(row: dict[str, Any]) -> None:
        rows.append(row)
        if progress is not None:
            progress(len(rows), len(targets), time.monotonic() - started)

    while len(rows) < len(targets):
        here, there = context.Pipe()
        paths = [str(t.path) for t in targets[len(rows) :]]
        child = context.Process(
            target=_time_in_child, args=(there, paths, ep, options, level, config, runner_factory), daemon=True
        )
        child.start()
        there.close()  # the child holds the only other end: its death ends recv() with EOFError
        died = False
        try:
            while len(rows) < len(targets):
                if time.monotonic() - background_at > telemetry.background_refresh_s:
                    background = sampler.measure_idle_window(telemetry.background_window_s)
                    background_at = time.monotonic()
                try:
                    here.send(True)
                    ok, payload = here.recv()
                except (EOFError, BrokenPipeError):
                    died = True
                    break
                target = targets[len(rows)]
                add(
                    _result_row(
                        target, sampler, background, timing=payload if ok else None, error=None if ok else payload
                    )
                )
        finally:
            if not died:
                try:
                    here.send(False)  # done: the child returns
                except (BrokenPipeError, OSError):
                    pass
            here.close()
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join()
        if died:
            target = targets[len(rows)]
            error = f"{target.path.name}: the timing process died (exit code {child.exitcode}); the rest went on"
            add(_result_row(target, sampler, background, error=error))
    return rows


def default_progress(log: Callable[[str], None], every: int = 25) -> Progress:
    """Log done/total, elapsed and an estimate of the time left every ``every`` targets."""

    def report(done: int, total: int, elapsed: float) -> None:
        if done % every and done != total:
            return
        remaining = elapsed / done * (total - done)
        log(f"{done}/{total} done, {elapsed:.0f} s elapsed, about {remaining:.0f} s left")

    return report
