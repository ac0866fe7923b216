"""GPU device time of one ORT run, by CUDA events on a stream that ORT shares with torch.

A kernel timed alone by the host clock also pays its launch, ORT's per-run work and the stream
sync (57-93 us on the H100, next to CUPTI), which a whole-model run pays once, not per kernel. The device clock
removes them:

- ORT runs on a stream we own (the CUDA EP's ``user_compute_stream``), so events recorded on that
  stream bracket exactly ORT's kernels;
- a sleep kernel is queued first, so the GPU is busy while the host enqueues the run; the start
  event then fires right before ORT's first kernel, not when the host began;
- the run does not synchronize (``disable_synchronize_execution_providers``); the end event does.

A sample counts only if the start event was still pending when the run had been enqueued (the
sleep covered the host's work); otherwise the sleep is doubled and the sample taken again. After a
covered sample the sleep follows the host's enqueue time (twice it, plus a margin), so a clock
that once covered a slow first run (cuDNN's algorithm search) does not keep sleeping that long. A run
whose host work outlasts the longest sleep (an op that synchronizes mid-run) keeps its uncovered
sample, which then includes that host time, and the clock reports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

INITIAL_SLEEP_US = 100.0
MIN_SLEEP_US = 30.0
MAX_SLEEP_US = 20_000.0


class DeviceClock:
    """Times ``enqueue`` (a callable that enqueues one ORT run on :attr:`stream_handle`) in ms of
    device time."""

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("the device clock needs a CUDA GPU that torch can see")
        self._torch = torch
        self._stream = torch.cuda.Stream()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._cycles_per_us = self._calibrate()
        self.sleep_us = INITIAL_SLEEP_US
        self.uncovered = 0  # samples whose host work the longest sleep did not cover

    @property
    def stream_handle(self) -> int:
        """The ``cudaStream_t`` (as an int) to give ORT as its ``user_compute_stream``."""
        return int(self._stream.cuda_stream)

    def _calibrate(self) -> float:
        cycles = 1_000_000
        with self._torch.cuda.stream(self._stream):
            self._torch.cuda._sleep(cycles)  # warm the kernel up
            self._start.record(self._stream)
            self._torch.cuda._sleep(cycles)
            self._end.record(self._stream)
        self._end.synchronize()
        return cycles / (self._start.elapsed_time(self._end) * 1e3)

    def time(self, enqueue: Callable[[], Any]) -> float:
        """Device ms from the first to the last GPU work ``enqueue`` puts on the stream."""
        while True:
            with self._torch.cuda.stream(self._stream):
                self._torch.cuda._sleep(int(self.sleep_us * self._cycles_per_us))
            self._start.record(self._stream)
            t0 = time.perf_counter()
            enqueue()
            enqueue_us = (time.perf_counter() - t0) * 1e6
            self._end.record(self._stream)
            covered = not self._start.query()
            self._end.synchronize()
            if covered:
                self.sleep_us = min(max(2 * enqueue_us + 20.0, MIN_SLEEP_US), MAX_SLEEP_US)
                return float(self._start.elapsed_time(self._end))
            if self.sleep_us >= MAX_SLEEP_US:
                self.uncovered += 1
                return float(self._start.elapsed_time(self._end))
            self.sleep_us = min(2 * max(self.sleep_us, enqueue_us), MAX_SLEEP_US)
