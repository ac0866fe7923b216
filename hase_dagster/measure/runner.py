"""Time one ONNX model (a kernel or a whole model) in ORT: warm-up, a timed loop, honest statistics.

On CUDA every input and output is bound on the device (IO binding), so no host<->device copy is
timed. Two clocks: ``host`` times each run as the caller sees it (launch, run, sync: what a user
measures for a whole model); ``device`` (CUDA only) times the GPU work of each run alone (see
:mod:`hase_dagster.measure.device_clock`), for kernels whose standalone launch overhead a model run does not
pay per kernel. The loop stops early once the mean is known to ``target_rel_ci`` (95% confidence half-width
over mean), and never before ``min_loops`` runs or ``min_seconds`` of timed work. Before the warm-up and just after
the timed loop it reads the host core's speed (a fixed pure-Python loop on the timing thread) into
``Timing.host_loop_ms``.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnxruntime as ort

from hase_dagster.analysis.kernel_models import load_inputs
from hase_dagster.core.config import OrtOptions, TimingOptions
from hase_dagster.core.errors import ModelLoadError
from hase_dagster.core.ort_runtime import EpName, OptimizationLevel, make_session, random_inputs
from hase_dagster.measure.host_speed import host_loop_reading

# Host loop readings taken before the warm-up and just after the timed loop, never between samples, so they cannot
# disturb what is timed (read between samples, 5% of the window, an A/B on the 2-core VM
# could not tell their effect from the VM's noise: results/cpu/README.md, 2026-11-29).
HOST_LOOP_READINGS = 3

Clock = Literal["host", "device"]


@dataclass(frozen=True)
class Timing:
    """Latency statistics of one model in ms, the timed window, and how it ran."""

    mean_ms: float
    median_ms: float
    p90_ms: float
    std_ms: float
    min_ms: float
    n: int
    start_ns: int
    end_ns: int
    ep: str
    warmup: int
    intra_op_num_threads: int
    cudnn_conv_algo_search: str | None
    rel_ci: float
    clock: str = "host"  # "device" when every sample is covered GPU time, "device+host" when some were not
    # The mean host loop reading before the warm-up and just after the timed window
    # (hase_dagster.measure.host_speed): how fast the timing thread's core ran around the samples. None in timings
    # made before it was read.
    host_loop_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples_ms: list[float]) -> dict[str, float]:
    """Mean, median, p90, std, min of latency samples, and the 95% CI half-width over the mean."""
    values = np.asarray(samples_ms, dtype=np.float64)
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    half_width = 1.96 * std / math.sqrt(len(values)) if len(values) > 1 else math.inf
    return {
        "mean_ms": mean,
        "median_ms": float(np.median(values)),
        "p90_ms": float(np.percentile(values, 90)),
        "std_ms": std,
        "min_ms": float(values.min()),
        "rel_ci": half_width / mean if mean > 0 else math.inf,
    }


class ModelRunner:
    """A loaded model ready to time repeatedly (the session is built once)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        ep: EpName,
        options: OrtOptions | None = None,
        level: OptimizationLevel = "disable",
        feeds: dict[str, np.ndarray] | None = None,
        clock: Clock = "host",
        exact: bool = False,
        profile_prefix: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.ep = ep
        self.options = options or OrtOptions()
        self.clock = clock
        self._device_clock = None
        if clock == "device":
            if ep != "cuda":
                raise ValueError(f"the device clock times CUDA runs; {path} runs on {ep}: use clock 'host'")
            from hase_dagster.measure.device_clock import DeviceClock

            self._device_clock = DeviceClock()
        stream = self._device_clock.stream_handle if self._device_clock else None
        # exact: full fp32 products (no TF32 on the CUDA EP), for timings whose values are compared.
        # profile_prefix: ORT's profiler on for the session (``self.session.end_profiling()`` writes its trace).
        self.session = make_session(
            self.path, ep, self.options, level=level, profile_prefix=profile_prefix, compute_stream=stream, exact=exact
        )
        feeds = feeds if feeds is not None else load_inputs(self.path)
        self.feeds = feeds if feeds is not None else random_inputs(self.session)
        # The run closures hold the session and feeds, never self: a runner in a reference cycle
        # would keep its session (GPU arena, stream, threads) alive after ``del`` until a full
        # garbage collection, and every session timed after it would share the host with it.
        self._run = self._bind_on_device() if ep == "cuda" else self._run_on_host()

    def _run_on_host(self):  # -> Callable[[], None]
        session, feeds = self.session, self.feeds

        def run() -> None:
            session.run(None, feeds)

        return run

    def _bind_on_device(self):  # -> Callable[[], None]
        session = self.session
        binding = session.io_binding()
        for name, value in self.feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
        for output in self.session.get_outputs():
            binding.bind_output(output.name, "cuda", 0)

        # run_with_iobinding synchronizes the CUDA stream before it returns, except under the
        # device clock, whose end event waits for the GPU instead.
        run_options = ort.RunOptions()
        if self.clock == "device":
            run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")

        def run() -> None:
            session.run_with_iobinding(binding, run_options)

        return run

    def run(self) -> None:
        """One untimed run, as :meth:`sample` runs it (IO binding on the CUDA EP)."""
        self._run()

    def sample(self) -> float:
        """One run timed on this runner's clock, in ms."""
        return self._device_sample() if self._device_clock else self._host_sample()

    def _host_sample(self) -> float:
        t0 = time.perf_counter_ns()
        self._run()
        return (time.perf_counter_ns() - t0) / 1e6

    def _device_sample(self) -> float:
        assert self._device_clock is not None
        return self._device_clock.time(self._run)

    def time(self, config: TimingOptions = TimingOptions()) -> Timing:
        """Warm up, then time single runs until the mean is precise enough or the cap is hit."""
        if config.clock != self.clock:
            raise ValueError(f"this runner was built for the {self.clock} clock, the config asks for {config.clock}")
        try:
            before = host_loop_reading(seconds=0.0, at_least=HOST_LOOP_READINGS)  # no sample follows it straight
            warmed = 0
            warm_until = time.perf_counter() + config.warmup_seconds
            while warmed < config.warmup or time.perf_counter() < warm_until:
                self.sample()
                warmed += 1
            samples: list[float] = []
            start_ns = time.time_ns()
            loop_start = time.perf_counter()
            while len(samples) < config.max_loops:
                samples.append(self.sample())
                # The loop's budget is wall time, whichever clock the samples read.
                timed = time.perf_counter() - loop_start
                if len(samples) >= config.min_loops and timed >= config.min_seconds:
                    if timed >= config.max_seconds or summarize(samples)["rel_ci"] <= config.target_rel_ci:
                        break
            end_ns = time.time_ns()
            after = host_loop_reading(seconds=0.0, at_least=HOST_LOOP_READINGS)
        except Exception as exc:
            raise ModelLoadError(f"{self.path.name} failed while running on {self.ep}: {exc}") from exc
        stats = summarize(samples)
        return Timing(
            **stats,
            n=len(samples),
            start_ns=start_ns,
            end_ns=end_ns,
            ep=self.session.get_providers()[0].removesuffix("ExecutionProvider").lower(),
            warmup=warmed,
            intra_op_num_threads=self.options.intra_op_num_threads,
            cudnn_conv_algo_search=self.options.cudnn_conv_algo_search if self.ep == "cuda" else None,
            clock=self._clock_label(),
            host_loop_ms=(before + after) / 2,
        )

    def _clock_label(self) -> str:
        if self._device_clock is None:
            return "host"
        return "device+host" if self._device_clock.uncovered else "device"


def time_model(
    path: str | os.PathLike[str],
    ep: EpName,
    config: TimingOptions = TimingOptions(),
    options: OrtOptions | None = None,
    level: OptimizationLevel = "disable",
) -> Timing:
    """Load ``path`` and time it (see :class:`ModelRunner`)."""
    return ModelRunner(path, ep, options, level=level, clock=config.clock).time(config)
