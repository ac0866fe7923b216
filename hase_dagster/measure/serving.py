"""A small multi-model executor to validate the serving planner against: not an inference server.

Several ONNX models in one process, each an ORT session (inputs and outputs bound on the device with
IO binding on CUDA, a plain ``run`` on the CPU EP), one FIFO queue per model, a dynamic batcher and
priorities between models (:func:`hase_dagster.core.serving_spec.pick_ready`, the rule the simulator
uses), and a seeded, bounded Poisson request generator in its own thread. One device thread runs one
batch at a time. Requests carry no payload: a batch of ``b`` runs the model on ``b`` preloaded
inputs, so what is measured is queueing plus execution, as the planner predicts it.

Per-request latency, queue lengths and batch sizes go to Prometheus metrics (:class:`ServingMetrics`)
when a registry is given, next to Hase's predictions (``hase_predicted_latency_ms{model,batch}``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hase_dagster.core.config import OrtOptions
from hase_dagster.core.dtypes import element_type
from hase_dagster.core.errors import HaseError
from hase_dagster.core.ort_runtime import EpName, make_session
from hase_dagster.core.serving_spec import BatchingConfig, ServingRuntime, next_deadline, pick_ready

LATENCY_BUCKETS_MS = (0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000, 5000)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Metric names the executor publishes (the Grafana dashboard's queries use them; a test checks both).
METRIC_NAMES = (
    "hase_serving_request_latency_ms",
    "hase_serving_requests_total",
    "hase_serving_requests_within_slo_total",
    "hase_serving_queue_length",
    "hase_serving_batch_size",
    "hase_serving_slo_ms",
    "hase_predicted_latency_ms",
    "hase_predicted_e2e_latency_ms",
)


class ServedSession:
    """One model's ORT session(s), with inputs for every batch size prepared once (on the device with IO
    binding on CUDA).

    With ``runtime.sessions == "shared"`` one session runs every batch size. With ``"per-batch"`` every
    batch size gets its own session, made on first use (``warm_up`` makes them before timing): on the
    CUDA EP a session whose input shape never changes never rebuilds its cuDNN convolution plans,
    which a shared session does at every change of batch size (see
    :class:`hase_dagster.core.serving_spec.ServingRuntime`).
    """

    def __init__(
        self, name: str, path: Path, ep: EpName, threads: int = 1, runtime: ServingRuntime | None = None
    ) -> None:
        self.name = name
        self.ep = ep
        self.path = path
        # Sessions not given: the EP's default (per-batch on CUDA, shared on the CPU EP).
        self.runtime = (runtime or ServingRuntime()).for_device(ep)
        self.options = OrtOptions(
            intra_op_num_threads=threads, cudnn_conv_algo_search=self.runtime.cudnn_conv_algo_search
        )
        # The shared session; with per-batch sessions also the one that checks the inputs' shapes.
        self.session = make_session(path, ep, self.options)
        self._sessions: dict[int, ort.InferenceSession] = {}
        self._runs: dict[int, Callable[[], None]] = {}

    def session_for(self, batch: int) -> ort.InferenceSession:
        """The session that runs batches of ``batch`` (made on first use with per-batch sessions)."""
        if self.runtime.sessions == "shared":
            return self.session
        if batch not in self._sessions:
            # The first batch size takes the session made above (it has run nothing yet).
            fresh = not self._sessions
            self._sessions[batch] = self.session if fresh else make_session(self.path, self.ep, self.options)
        return self._sessions[batch]

    @property
    def session_count(self) -> int:
        """How many ORT sessions this model holds now."""
        return 1 if self.runtime.sessions == "shared" else max(1, len(self._sessions))

    def _feeds(self, batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        feeds = {}
        for arg in self.session.get_inputs():
            shape = [batch if i == 0 else d for i, d in enumerate(arg.shape)]
            if not all(isinstance(d, int) and d > 0 for d in shape[1:]) or isinstance(arg.shape[0], int):
                raise HaseError(
                    f"{self.name}: input {arg.name} has shape {arg.shape}; serving needs a symbolic batch "
                    "dimension and fixed other dimensions"
                )
            known = element_type(arg.type)
            if known is None:
                raise HaseError(f"{self.name}: input {arg.name} has unsupported type {arg.type}")
            dtype = known.numpy
            if np.issubdtype(dtype, np.floating):
                feeds[arg.name] = rng.uniform(-1, 1, size=shape).astype(dtype)
            else:
                feeds[arg.name] = np.zeros(shape, dtype=dtype)
        return feeds

    def runner(self, batch: int) -> Callable[[], None]:
        """A function that runs one batch of ``batch`` (prepared on first use)."""
        if batch not in self._runs:
            feeds = self._feeds(batch)
            session = self.session_for(batch)
            if self.ep == "cuda":
                binding = session.io_binding()
                for name, value in feeds.items():
                    binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
                for output in session.get_outputs():
                    binding.bind_output(output.name, "cuda", 0)

                def run_bound() -> None:
                    session.run_with_iobinding(binding)  # synchronizes the stream before it returns

                self._runs[batch] = run_bound
            else:

                def run_host() -> None:
                    session.run(None, feeds)

                self._runs[batch] = run_host
        return self._runs[batch]

    def warm_up(self, batches: list[int], runs: int = 3) -> None:
        """Run each batch size a few times (allocations, cuDNN algorithm choice) before timing."""
        for batch in batches:
            run = self.runner(batch)
            for _ in range(runs):
                run()


@dataclass
class ServingMetrics:
    """The executor's Prometheus metrics in one registry (labels: ``model``; ``batch``/``quantile``)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.latency = Histogram(
            "hase_serving_request_latency_ms",
            "End-to-end latency of served requests (queueing + execution), ms",
            ["model"],
            buckets=LATENCY_BUCKETS_MS,
            registry=r,
        )
        self.requests = Counter("hase_serving_requests", "Requests answered", ["model"], registry=r)
        self.within_slo = Counter(
            "hase_serving_requests_within_slo", "Requests answered within the model's SLO", ["model"], registry=r
        )
        self.queue = Gauge("hase_serving_queue_length", "Requests waiting in the model's queue", ["model"], registry=r)
        self.batch = Histogram(
            "hase_serving_batch_size", "Batch sizes run", ["model"], buckets=BATCH_BUCKETS, registry=r
        )
        self.slo = Gauge("hase_serving_slo_ms", "The model's latency SLO, ms", ["model"], registry=r)
        self.predicted = Gauge(
            "hase_predicted_latency_ms",
            "Hase's predicted execution time of one batch under the current load, ms",
            ["model", "batch"],
            registry=r,
        )
        self.predicted_e2e = Gauge(
            "hase_predicted_e2e_latency_ms",
            "The planner's simulated end-to-end latency quantile, ms",
            ["model", "quantile"],
            registry=r,
        )


@dataclass(frozen=True)
class RequestRecord:
    """One request: when it arrived, when its batch started and ended (ms from the run's start;
    ``done_ms`` inf when it was never served), and the size of its batch."""

    model: str
    arrival_ms: float
    start_ms: float
    done_ms: float
    batch: int

    @property
    def latency_ms(self) -> float:
        return self.done_ms - self.arrival_ms


def poisson_schedule(rates_per_s: dict[str, float], duration_s: float, seed: int) -> list[tuple[float, str]]:
    """Arrival times (ms) of independent Poisson streams, merged in time order."""
    rng = np.random.default_rng(seed)
    events: list[tuple[float, str]] = []
    for name in sorted(rates_per_s):
        rate = rates_per_s[name]
        if rate <= 0:
            continue
        expected = rate * duration_s
        gaps = rng.exponential(1000.0 / rate, size=int(expected + 6 * math.sqrt(expected) + 10))
        times = np.cumsum(gaps)
        events += [(float(t), name) for t in times[times < duration_s * 1000.0]]
    return sorted(events)


def serve(
    sessions: dict[str, ServedSession],
    configs: dict[str, BatchingConfig],
    schedule: list[tuple[float, str]],
    duration_s: float,
    drain_s: float = 2.0,
    slo_ms: dict[str, float] | None = None,
    metrics: ServingMetrics | None = None,
) -> list[RequestRecord]:
    """Serve the requests of ``schedule`` (arrival ms, model) with ``configs`` and return one record per
    request, in arrival order per model.

    The generator thread enqueues each request at its time; this thread runs batches. Requests still
    queued ``drain_s`` after the last arrival are recorded unserved (``done_ms`` inf).
    """
    missing = sorted({m for _, m in schedule} - set(sessions) | set(sessions) - set(configs))
    if missing:
        raise HaseError(f"no session or configuration for {', '.join(missing)}")
    queues: dict[str, deque[float]] = {name: deque() for name in sessions}
    condition = threading.Condition()
    generating = threading.Event()
    generating.set()
    stop = threading.Event()
    t0 = time.perf_counter()

    def now_ms() -> float:
        return (time.perf_counter() - t0) * 1000.0

    def generate() -> None:
        try:
            for arrival, name in schedule:
                wait = (arrival - now_ms()) / 1000.0
                if wait > 0 and stop.wait(wait):
                    return
                with condition:
                    queues[name].append(arrival)
                    if metrics:
                        metrics.queue.labels(model=name).set(len(queues[name]))
                    condition.notify()
        finally:
            with condition:
                generating.clear()
                condition.notify()

    records: list[RequestRecord] = []
    generator = threading.Thread(target=generate, name="hase-serving-requests", daemon=True)
    generator.start()
    end_ms = (duration_s + drain_s) * 1000.0
    try:
        while True:
            with condition:
                while True:
                    now = now_ms()
                    heads = {n: (len(q), q[0]) for n, q in queues.items() if q}
                    chosen = pick_ready(heads, configs, now) if now < end_ms else None
                    if chosen is not None or now >= end_ms or (not generating.is_set() and not heads):
                        break
                    deadline = next_deadline(heads, configs)
                    timeout = 50.0 if deadline is None else min(50.0, max(deadline - now, 0.0))
                    condition.wait(timeout / 1000.0)
                if chosen is None:
                    break
                queue = queues[chosen]
                taken = [queue.popleft() for _ in range(min(configs[chosen].max_batch, len(queue)))]
                if metrics:
                    metrics.queue.labels(model=chosen).set(len(queue))
            start = now_ms()
            sessions[chosen].runner(len(taken))()
            done = now_ms()
            records += [RequestRecord(chosen, t, start, done, len(taken)) for t in taken]
            if metrics:
                metrics.batch.labels(model=chosen).observe(len(taken))
                for t in taken:
                    metrics.latency.labels(model=chosen).observe(done - t)
                    metrics.requests.labels(model=chosen).inc()
                    if slo_ms and done - t <= slo_ms.get(chosen, math.inf):
                        metrics.within_slo.labels(model=chosen).inc()
    finally:
        stop.set()
        generator.join(timeout=5)
    with condition:
        for name, queue in queues.items():
            records += [RequestRecord(name, t, math.inf, math.inf, 0) for t in queue]
            queue.clear()
    # Requests the generator never enqueued (the run ended early) are unserved as well.
    served = len(records)
    if served < len(schedule):
        seen: dict[str, int] = {}
        for record in records:
            seen[record.model] = seen.get(record.model, 0) + 1
        counts: dict[str, int] = {}
        for arrival, name in schedule:
            counts[name] = counts.get(name, 0) + 1
            if counts[name] > seen.get(name, 0):
                records.append(RequestRecord(name, arrival, math.inf, math.inf, 0))
    return sorted(records, key=lambda r: (r.model, r.arrival_ms))
