"""GPU device time of ORT's CUDA kernels through CUPTI (``torch.profiler``), next to the runner's
host-clock (wall) and device-clock (CUDA events) times, to know the runner's overhead per kernel
size and to check the device clock against CUPTI.

``torch.profiler`` sees every CUDA kernel of the process, ORT's included, because both use the
CUDA runtime's primary context.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hase_dagster.core.config import TimingOptions
from hase_dagster.measure.runner import ModelRunner

DEVICE_EVENT_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def profiled_events(
    call: Callable[[], Any], calls: int, host: bool = False, before: Callable[[], Any] | None = None
) -> list[dict[str, Any]]:
    """The Chrome-trace events ``torch.profiler`` records over ``calls`` calls of ``call`` (the device
    synchronized before and after): CUPTI's device events (``cat`` kernel, gpu_memcpy, gpu_memset, with
    ``dur`` in us), and the host's too with ``host``. Once a profiler has run in a process, CUPTI's
    callbacks slow every later kernel launch of that process (``results/gpu-general/gpu-time``): time
    host-bound wall clocks before it.

    Args:
        call: one run (a session run, a kernel launch); its results are not kept.
        calls: how many runs to record.
        host: record the CPU activity as well.
        before: called once inside the recording before the calls (a sleep kernel, so that the calls are
            all queued before the device runs them).

    Returns:
        The trace's events.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if host else [ProfilerActivity.CUDA]
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        if before is not None:
            before()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        return json.loads(trace.read_text()).get("traceEvents", [])


def device_time(path: str | os.PathLike[str], runs: int = 20, level: str = "disable") -> dict[str, Any]:
    """Runner wall time, device-clock time and CUPTI device time (ms per run) of one model on the
    CUDA EP."""
    loop = dict(warmup=10, min_loops=runs, max_loops=runs, max_seconds=30)
    device_clock = ModelRunner(path, "cuda", level=level, clock="device")  # type: ignore[arg-type]
    clocked = device_clock.time(TimingOptions(**loop, clock="device"))
    del device_clock
    runner = ModelRunner(path, "cuda", level=level)  # type: ignore[arg-type]
    wall = runner.time(TimingOptions(**loop))  # type: ignore[arg-type]
    events = profiled_events(runner._run, runs, host=True)
    device = [e for e in events if e.get("cat") in DEVICE_EVENT_CATEGORIES and "dur" in e]
    kernels = [e for e in device if e["cat"] == "kernel"]
    device_ms = sum(e["dur"] for e in device) / 1e3 / runs
    names: dict[str, int] = {}
    for event in kernels:
        names[event["name"][:60]] = names.get(event["name"][:60], 0) + 1
    return {
        "path": str(path),
        "runner_mean_ms": wall.mean_ms,
        "runner_median_ms": wall.median_ms,
        "device_clock_median_ms": clocked.median_ms,
        "device_clock": clocked.clock,
        "device_ms": device_ms,
        "overhead_ms": wall.median_ms - device_ms,
        "gpu_kernels_per_run": len(kernels) / runs,
        "top_gpu_kernels": dict(sorted(names.items(), key=lambda kv: -kv[1])[:5]),
    }


def clock_disagreements(rows: list[dict[str, Any]], max_error: float) -> list[str]:
    """One line per :func:`device_time` row whose device clock and CUPTI time differ by more than
    ``max_error`` (a fraction) and 20 us. The clock spans the gaps between a node's kernels (cuDNN's
    layout conversions) and CUPTI sums the kernels alone, so small kernels may be that far apart."""
    return [
        f"{Path(r['path']).name}: device clock {r['device_clock_median_ms']:.4f} ms, CUPTI {r['device_ms']:.4f} ms"
        for r in rows
        if abs(r["device_clock_median_ms"] - r["device_ms"]) > max(max_error * r["device_ms"], 0.020)
    ]
