"""A discrete-event simulation (SimPy) of several models served on one device.

What it models, in the order a request meets it:

- **Arrivals:** a Poisson process per model (or given arrival times), for ``duration_s`` seconds.
- **Dynamic batcher per model:** a FIFO queue; a batch is ready when ``max_batch`` requests wait or
  the oldest has waited ``max_queue_delay_ms`` (at once when the delay is 0).
- **Priority between models:** one device runs one batch at a time; when it is free it takes the
  ready batch of the highest-priority model (1 is highest), the oldest head request among equals.
- **Execution and the co-tenant's time slices:** a batch's time comes from an ``ExecTime`` source
  (Hase's predictions) at idle and under the load. The co-tenant is busy the first ``share`` of every
  period (the stressor's duty cycle); a run that starts in the busy part waits out its burst, and
  waits another after every slice of its own work there (:func:`cotenant_run_ms`, the schedule
  :mod:`hase_dagster.learn.timeslice` measured on the H100). The rest of the predicted slowdown
  stretches the work. So a run's mean stays the prediction under load, and latency is bimodal, as
  measured under time slicing.

Requests not finished ``drain_s`` after the last arrival count as missed (infinite latency). Times
inside the simulation are milliseconds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from hase_dagster.core.errors import HaseError
from hase_dagster.core.serving_spec import BatchingConfig, next_deadline, pick_ready
from hase_dagster.learn.timeslice import cotenant_run_ms

# exec_time(model name, batch size, load spec) -> (mean ms, p90 ms) of one batch's execution.
ExecTime = Callable[[str, int, str], tuple[float, float]]
IDLE_LOAD = "level=0.0"
# (ln 10 - 1): a shifted exponential's p90 lies this many scales above its mean.
_EXP_P90_OVER_MEAN = math.log(10.0) - 1.0


@dataclass(frozen=True)
class SimModel:
    """One model as the simulator sees it."""

    name: str
    rate_per_s: float
    slo_ms: float
    percentile: int = 99


@dataclass(frozen=True)
class ServiceTime:
    """Samples a batch's execution time under ``load`` (see the module docstring).

    ``share`` is the co-tenant's share of each ``period_ms``; ``burst_ms`` and ``slice_ms`` its burst
    and the slice a run keeps (:func:`cotenant_run_ms`).
    """

    exec_time: ExecTime
    load: str = IDLE_LOAD
    share: float = 0.0
    burst_ms: float = 0.95
    slice_ms: float = 1.75
    period_ms: float = 20.0
    _cache: dict[tuple[str, int], tuple[float, float, float, float]] = field(default_factory=dict, compare=False)

    def _mean_wait(self, work_ms: float) -> float:
        """The mean wait of a run of ``work_ms`` started at a uniformly random phase."""
        if self.share <= 0:
            return 0.0
        starts = np.linspace(0.0, self.period_ms, 64, endpoint=False)
        return float(np.mean([self.run_ms(work_ms, t) for t in starts])) - work_ms

    def run_ms(self, work_ms: float, start_ms: float) -> float:
        """The wall time of ``work_ms`` of work started at ``start_ms`` (ms of the simulation)."""
        return cotenant_run_ms(work_ms, start_ms, self.share, self.burst_ms, self.slice_ms, self.period_ms)

    def parameters(self, model: str, batch: int) -> tuple[float, float, float, float]:
        """(shift, exponential scale, stretch, mean wait) of ``model`` at ``batch``: a run does
        ``stretch * (shift + Exp(scale))`` of work, then waits for the co-tenant as it falls."""
        key = (model, batch)
        if key not in self._cache:
            idle_mean, idle_p90 = self.exec_time(model, batch, IDLE_LOAD)
            loaded_mean, _ = self.exec_time(model, batch, self.load) if self.load != IDLE_LOAD else (idle_mean, 0)
            if not (idle_mean > 0 and math.isfinite(idle_mean) and math.isfinite(loaded_mean)):
                raise HaseError(f"no usable execution time for {model} at batch {batch}: {idle_mean} ms")
            scale = min(max(idle_p90 - idle_mean, 0.0) / _EXP_P90_OVER_MEAN, idle_mean)
            # The predicted slowdown under load, less what the co-tenant's bursts explain, stretches the
            # work itself (e.g. memory bandwidth shared with the co-tenant).
            wait = self._mean_wait(idle_mean)
            stretch = max(1.0, (loaded_mean - wait) / idle_mean)
            self._cache[key] = (idle_mean - scale, scale, stretch, self._mean_wait(stretch * idle_mean))
        return self._cache[key]

    def mean_ms(self, model: str, batch: int) -> float:
        """A run's mean time under the load."""
        shift, scale, stretch, wait = self.parameters(model, batch)
        return stretch * (shift + scale) + wait

    def sample(self, model: str, batch: int, rng: np.random.Generator, now_ms: float = 0.0) -> float:
        """One run's time (ms) when it starts at ``now_ms``."""
        shift, scale, stretch, _ = self.parameters(model, batch)
        work = stretch * (shift + (rng.exponential(scale) if scale > 0 else 0.0))
        return self.run_ms(work, now_ms)


@dataclass(frozen=True)
class EmpiricalServiceTime:
    """Batch times drawn from measured ones (``samples[model][batch]``, ms), for checking the queueing
    model alone against a measured run. A batch size never seen takes the nearest seen one's times,
    scaled by the ratio of the batch sizes above the largest seen."""

    samples: dict[str, dict[int, list[float]]]

    def sample(self, model: str, batch: int, rng: np.random.Generator, now_ms: float = 0.0) -> float:
        """One run's time (ms); measured times already hold the co-tenant's waits (``now_ms`` unused)."""
        by_batch = self.samples.get(model)
        if not by_batch:
            raise HaseError(f"no measured batch times for {model}")
        nearest = batch if batch in by_batch else min(by_batch, key=lambda b: (abs(b - batch), b))
        times = by_batch[nearest]
        scale = batch / nearest if batch > max(by_batch) else 1.0
        return scale * times[int(rng.integers(len(times)))]


@dataclass
class ModelOutcome:
    """What one model's requests saw."""

    name: str
    slo_ms: float
    percentile: int
    latencies_ms: np.ndarray  # one per request, in arrival order; inf when never served
    batch_sizes: list[int]
    busy_ms: float
    duration_s: float

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    def quantile_ms(self, q: float) -> float:
        """The ``q`` quantile (0-100) of latency; inf when more than ``100 - q`` % were never served."""
        if not len(self.latencies_ms):
            return math.nan
        return float(np.percentile(self.latencies_ms, q, method="higher"))

    @property
    def attainment(self) -> float:
        """The share of requests served within the SLO."""
        return float(np.mean(self.latencies_ms <= self.slo_ms)) if self.requests else math.nan

    @property
    def slo_met(self) -> bool:
        """Whether the SLO percentile of latency is within the SLO."""
        return self.requests > 0 and self.attainment >= self.percentile / 100.0

    @property
    def goodput_per_s(self) -> float:
        """Requests served within the SLO per second of arrivals."""
        return float(np.sum(self.latencies_ms <= self.slo_ms)) / self.duration_s

    @property
    def mean_batch(self) -> float:
        return float(np.mean(self.batch_sizes)) if self.batch_sizes else math.nan

    def summary(self) -> dict[str, float | int | bool | str]:
        """Plain numbers for a report (ms, shares in [0, 1], requests per second)."""
        return {
            "model": self.name,
            "requests": self.requests,
            "p50_ms": self.quantile_ms(50),
            "p90_ms": self.quantile_ms(90),
            "p99_ms": self.quantile_ms(99),
            "attainment": self.attainment,
            "slo_met": self.slo_met,
            "goodput_per_s": self.goodput_per_s,
            "mean_batch": self.mean_batch,
            "utilization": self.busy_ms / (self.duration_s * 1000.0),
        }


@dataclass
class _DeviceState:
    wake: simpy.Event  # triggered by an arrival, so the idle device looks again
    arriving: int  # arrival processes not yet done


def poisson_arrivals(rate_per_s: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (ms) of a Poisson process of ``rate_per_s`` over ``duration_s`` seconds."""
    expected = rate_per_s * duration_s
    gaps = rng.exponential(1000.0 / rate_per_s, size=int(expected + 6 * math.sqrt(expected) + 10))
    times = np.cumsum(gaps)
    return times[times < duration_s * 1000.0]


def simulate(
    models: Sequence[SimModel],
    configs: dict[str, BatchingConfig],
    service: ServiceTime | EmpiricalServiceTime,
    duration_s: float,
    seed: int = 0,
    drain_s: float = 2.0,
    arrivals_ms: dict[str, np.ndarray] | None = None,
) -> dict[str, ModelOutcome]:
    """Serve ``models`` with ``configs`` on one simulated device.

    Args:
        models: the models, their rates and SLOs.
        configs: each model's batching configuration and priority.
        service: execution times under the load, with the co-tenant's slices.
        duration_s: seconds of arrivals.
        seed: the random stream (arrivals and execution times).
        drain_s: seconds after the last arrival to finish what is queued.
        arrivals_ms: arrival times per model instead of Poisson ones (e.g. a deterministic pattern).

    Returns:
        Each model's outcome, by name.
    """
    rng = np.random.default_rng(seed)
    # Where in the co-tenant's duty cycle the simulation starts.
    phase = float(rng.uniform(0.0, getattr(service, "period_ms", 20.0)))
    env = simpy.Environment()
    queues: dict[str, deque[float]] = {m.name: deque() for m in models}
    latencies: dict[str, list[float]] = {m.name: [] for m in models}
    batches: dict[str, list[int]] = {m.name: [] for m in models}
    busy = {m.name: 0.0 for m in models}
    schedule = {
        m.name: (arrivals_ms[m.name] if arrivals_ms is not None else poisson_arrivals(m.rate_per_s, duration_s, rng))
        for m in models
    }
    state = _DeviceState(env.event(), len(models))

    def wake() -> None:
        if not state.wake.triggered:
            state.wake.succeed()

    def arrive(name: str, times: np.ndarray):
        for t in times:
            if t > env.now:
                yield env.timeout(t - env.now)
            queues[name].append(env.now)
            wake()
        state.arriving -= 1
        wake()

    def heads() -> dict[str, tuple[int, float]]:
        return {name: (len(queue), queue[0]) for name, queue in queues.items() if queue}

    def device():
        while True:
            waiting = heads()
            name = pick_ready(waiting, configs, env.now)
            if name is not None:
                queue = queues[name]
                taken = [queue.popleft() for _ in range(min(configs[name].max_batch, len(queue)))]
                run_ms = service.sample(name, len(taken), rng, env.now + phase)
                yield env.timeout(run_ms)
                latencies[name].extend(env.now - t for t in taken)
                batches[name].append(len(taken))
                busy[name] += run_ms
                continue
            if state.arriving == 0 and not any(queues.values()):
                return
            state.wake = env.event()
            deadline = next_deadline(waiting, configs)
            events: list[simpy.Event] = [state.wake]
            if deadline is not None:
                events.append(env.timeout(max(0.0, deadline - env.now)))
            yield env.any_of(events)

    for model in models:
        env.process(arrive(model.name, schedule[model.name]))
    env.process(device())
    env.run(until=(duration_s + drain_s) * 1000.0)
    outcomes = {}
    for model in models:
        served = latencies[model.name]
        missed = len(schedule[model.name]) - len(served)
        # Served requests come back batch by batch in FIFO order, so they are the earliest arrivals.
        values = np.array(served + [math.inf] * missed, dtype=float)
        outcomes[model.name] = ModelOutcome(
            model.name, model.slo_ms, model.percentile, values, batches[model.name], busy[model.name], duration_s
        )
    return outcomes
