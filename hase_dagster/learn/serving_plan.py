"""The serving planner: for each model a batch size, a max queue delay and whether its SLO holds at its
arrival rate under the load, found by searching configurations with the simulator
(:mod:`hase_dagster.learn.serving_sim`) driven by Hase's predictions; and the matching Triton
``config.pbtxt`` per model.

The search is coordinate descent: start every model at batch 1 with no delay, then for each model in
priority order try each (batch size, delay) candidate with the others fixed and keep the best, twice
over. Every candidate is simulated on the same random stream (common random numbers), so candidates
differ by their configuration, not by luck. A configuration scores first by the priority-weighted
number of SLOs met, then by goodput (share of each model's rate served in its SLO, to 1%), then by the
margin (each model's SLO-percentile latency over its SLO, lower is better).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from hase_dagster.core.errors import HaseError
from hase_dagster.core.serving_spec import BatchingConfig, PlanSpec, ServedModel
from hase_dagster.learn.serving_sim import (
    IDLE_LOAD,
    EmpiricalServiceTime,
    ExecTime,
    ModelOutcome,
    ServiceTime,
    SimModel,
    simulate,
)

# At most this many simulated requests per candidate (all models together) and for the final figures.
SEARCH_REQUESTS = 4000
FINAL_REQUESTS = 40000


def interpolate_batches(points: dict[int, tuple[float, float]], batch: int) -> tuple[float, float]:
    """(mean, p90) at ``batch`` from times predicted at some batch sizes: linear between the two
    nearest, proportional to the batch beyond the largest, the smallest's below it."""
    if batch in points:
        return points[batch]
    sizes = sorted(points)
    if batch < sizes[0]:
        return points[sizes[0]]
    if batch > sizes[-1]:
        mean, p90 = points[sizes[-1]]
        factor = batch / sizes[-1]
        return mean * factor, p90 * factor
    upper = next(s for s in sizes if s > batch)
    lower = max(s for s in sizes if s < batch)
    w = (batch - lower) / (upper - lower)
    (m0, p0), (m1, p1) = points[lower], points[upper]
    return m0 + w * (m1 - m0), p0 + w * (p1 - p0)


@dataclass
class TableExecTime:
    """Execution times from a table ``{load: {model: {batch: (mean, p90)}}}``, interpolated in batch.

    A load not in the table uses the idle one (``level=0.0``)."""

    table: dict[str, dict[str, dict[int, tuple[float, float]]]]

    def __call__(self, model: str, batch: int, load: str) -> tuple[float, float]:
        by_model = self.table.get(load) or self.table.get(IDLE_LOAD)
        if not by_model or model not in by_model:
            raise HaseError(f"no execution time for {model} under {load}")
        return interpolate_batches(by_model[model], batch)


def hase_exec_time(
    spec: PlanSpec, data_root: Path, prometheus_url: str, extra_loads: Sequence[str] = ()
) -> TableExecTime:
    """Hase's predictions (:func:`hase_dagster.learn.sweep.predict_sweep`, or the plan's predictor
    bundle's) for every model at every candidate batch size, at idle and under the plan's load and
    ``extra_loads``, as a table.

    Raises:
        HaseError: no trained predictor for the plan's device, a model that cannot be analysed, or a
            load that cannot be read.
    """
    from hase_dagster.learn.sweep import predict_sweep

    batches = sorted({b for m in spec.models for b in spec.candidate_batches(m)})
    loads = list(dict.fromkeys([IDLE_LOAD, spec.load, *extra_loads]))
    table: dict[str, dict[str, dict[int, tuple[float, float]]]] = {load: {} for load in loads}
    bundle = None
    if spec.predictor is not None:
        from hase_dagster.learn.bundles import load_bundle

        bundle = load_bundle(spec.predictor, data_root)
        if bundle.ep != spec.device:
            raise HaseError(
                f"predictor bundle {bundle.name} predicts for {bundle.ep}, but the plan's device is {spec.device}"
            )
    for model in spec.models:
        if bundle is not None:
            predictions = bundle.predict([model.path], batches, loads, prometheus_url)
        else:
            predictions = predict_sweep([model.path], batches, loads, spec.device, data_root, prometheus_url)
        for index, prediction in enumerate(predictions):
            batch, load = batches[index // len(loads)], loads[index % len(loads)]
            table[load].setdefault(model.name, {})[batch] = (prediction.predicted_ms, prediction.p90_ms)
    return TableExecTime(table)


def cotenant_share(spec: PlanSpec, prometheus_url: str) -> float:
    """The co-tenant's share of device time under the plan's load: the stress level's (``level=X``) or
    the device's utilisation read from Prometheus now (``prometheus``)."""
    from hase_dagster.learn.predict_file import parse_load_spec

    kind, level = parse_load_spec(spec.load)
    if kind == "idle":
        return 0.0
    if kind == "level":
        assert level is not None
        return spec.cotenant.share_at(level)
    from hase_dagster.core.metrics import LOAD_FIELD
    from hase_dagster.measure.prometheus import PrometheusClient

    field_name = LOAD_FIELD[spec.device]
    return min(1.0, PrometheusClient(url=prometheus_url).current_load([field_name])[field_name] / 100.0)


@dataclass
class ModelPlan:
    """The plan for one model, with what the simulator predicts for it."""

    name: str
    max_batch: int
    max_queue_delay_ms: float
    priority: int
    slo_ms: float
    percentile: int
    rate_per_s: float
    attainable: bool
    p50_ms: float
    p90_ms: float
    p99_ms: float
    attainment: float
    goodput_per_s: float
    utilization: float
    mean_batch: float
    exec_mean_ms: float  # one full batch under the load

    @property
    def config(self) -> BatchingConfig:
        return BatchingConfig(self.max_batch, self.max_queue_delay_ms, self.priority)


@dataclass
class Plan:
    """A whole plan: per model, and how it was found."""

    load: str
    device: str
    cotenant_share: float
    slice_ms: float
    burst_ms: float
    models: list[ModelPlan]
    candidates_simulated: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    # The executor's ORT sessions the plan is for (core.serving_spec.ServingRuntime).
    runtime: dict[str, str] = field(default_factory=dict)

    @property
    def configs(self) -> dict[str, BatchingConfig]:
        return {m.name: m.config for m in self.models}

    def to_dict(self) -> dict:
        return asdict(self)


def service_time(spec: PlanSpec, exec_time: ExecTime, share: float) -> ServiceTime:
    """Batch times under the plan's load, with its co-tenant's bursts and slices."""
    co = spec.cotenant
    return ServiceTime(exec_time, spec.load, share, co.burst_ms, co.slice_ms, co.period_ms)


def _sim_models(spec: PlanSpec) -> list[SimModel]:
    return [SimModel(m.name, m.rate_per_s, m.slo_ms, m.percentile) for m in spec.models]


def _score(spec: PlanSpec, outcomes: dict) -> tuple[float, float, float]:
    levels = max(m.priority for m in spec.models)
    met = goodput = margin = 0.0
    for model in spec.models:
        outcome = outcomes[model.name]
        weight = 2.0 ** (levels - model.priority)
        met += weight * outcome.slo_met
        goodput += outcome.goodput_per_s / model.rate_per_s
        margin -= min(outcome.quantile_ms(model.percentile) / model.slo_ms, 10.0)
    return met, round(goodput / len(spec.models), 2), margin


def candidates(spec: PlanSpec, model: ServedModel, service: ServiceTime) -> list[BatchingConfig]:
    """The (batch, delay) configurations tried for ``model``: each candidate batch size whose run
    fits in the SLO (batch 1 always), each with the plan's delay fractions of the slack left."""
    out = []
    for batch in spec.candidate_batches(model):
        run_ms = service.mean_ms(model.name, batch)
        slack = model.slo_ms - run_ms
        if slack <= 0 and batch > 1:
            continue
        delays = sorted({round(max(slack, 0.0) * f, 3) for f in spec.delay_fractions} | {0.0})
        out += [BatchingConfig(batch, delay, model.priority) for delay in (delays if batch > 1 else [0.0])]
    return out


def evaluate(
    spec: PlanSpec, configs: dict[str, BatchingConfig], service: ServiceTime, seconds: float, seed: int
) -> dict:
    """The simulated outcomes of ``configs`` (by model name)."""
    return simulate(_sim_models(spec), configs, service, seconds, seed=seed, drain_s=max(2.0, seconds / 10))


def _seconds_for(spec: PlanSpec, requests: int, cap_s: float) -> float:
    total_rate = sum(m.rate_per_s for m in spec.models)
    return max(1.0, min(cap_s, requests / total_rate))


def plan(spec: PlanSpec, exec_time: ExecTime, share: float = 0.0, passes: int = 2) -> Plan:
    """Search batch sizes and queue delays for every model with the simulator.

    Args:
        spec: the models, their SLOs, priorities and rates, the load and the search settings.
        exec_time: ``exec_time(model, batch, load) -> (mean_ms, p90_ms)`` (Hase's predictions or a table).
        share: the co-tenant's share of device time under ``spec.load``.
        passes: rounds of coordinate descent over the models.

    Returns:
        The plan, with the simulated p50/p90/p99, attainment and utilisation of each model.
    """
    started = time.perf_counter()
    service = service_time(spec, exec_time, share)
    search_s = _seconds_for(spec, SEARCH_REQUESTS, spec.search_seconds)
    configs = {m.name: BatchingConfig(1, 0.0, m.priority) for m in spec.models}
    best_score = _score(spec, evaluate(spec, configs, service, search_s, spec.seed))
    simulated = 1
    for _ in range(passes):
        changed = False
        for model in sorted(spec.models, key=lambda m: m.priority):
            for candidate in candidates(spec, model, service):
                if candidate == configs[model.name]:
                    continue
                trial = {**configs, model.name: candidate}
                score = _score(spec, evaluate(spec, trial, service, search_s, spec.seed))
                simulated += 1
                if score > best_score:
                    best_score, configs, changed = score, trial, True
        if not changed:
            break
    final_s = _seconds_for(spec, FINAL_REQUESTS, spec.final_seconds)
    outcomes = evaluate(spec, configs, service, final_s, spec.seed + 1)
    models = []
    for model in spec.models:
        config, summary = configs[model.name], outcomes[model.name].summary()
        models.append(
            ModelPlan(
                name=model.name,
                max_batch=config.max_batch,
                max_queue_delay_ms=config.max_queue_delay_ms,
                priority=config.priority,
                slo_ms=model.slo_ms,
                percentile=model.percentile,
                rate_per_s=model.rate_per_s,
                attainable=bool(summary["slo_met"]),
                p50_ms=float(summary["p50_ms"]),
                p90_ms=float(summary["p90_ms"]),
                p99_ms=float(summary["p99_ms"]),
                attainment=float(summary["attainment"]),
                goodput_per_s=float(summary["goodput_per_s"]),
                utilization=float(summary["utilization"]),
                mean_batch=float(summary["mean_batch"]),
                exec_mean_ms=service.mean_ms(model.name, config.max_batch),
            )
        )
    seconds = time.perf_counter() - started
    return Plan(
        spec.load,
        spec.device,
        share,
        spec.cotenant.slice_ms,
        spec.cotenant.burst_ms,
        models,
        simulated,
        seconds,
        runtime=spec.served_runtime().model_dump(),
    )


def simulate_configs(
    spec: PlanSpec,
    configs: dict[str, BatchingConfig],
    exec_time: ExecTime,
    share: float,
    seconds: float,
    seed: int,
    drain_s: float | None = None,
    repeats: int = 1,
) -> dict[str, dict]:
    """The simulator's figures (:meth:`ModelOutcome.summary`) for given configurations: what a measured
    run of ``seconds`` of arrivals, with ``drain_s`` to finish (default: the planner's), should see
    (a short overloaded run's tail depends on its length). Shares, goodput and utilization are pooled
    over ``repeats`` independent runs; latency quantiles are the median of the runs' own."""
    service = service_time(spec, exec_time, share)
    return simulate_service(spec, configs, service, seconds, seed, drain_s, repeats)


def simulate_service(
    spec: PlanSpec,
    configs: dict[str, BatchingConfig],
    service: ServiceTime | EmpiricalServiceTime,
    seconds: float,
    seed: int,
    drain_s: float | None = None,
    repeats: int = 1,
) -> dict[str, dict]:
    """:func:`simulate_configs` with the batch times' source given (e.g. measured ones)."""
    drain = max(2.0, seconds / 10) if drain_s is None else drain_s
    runs = [
        simulate(_sim_models(spec), configs, service, seconds, seed=seed + 7919 * i, drain_s=drain)
        for i in range(max(1, repeats))
    ]
    pooled = {}
    for name in runs[0]:
        parts = [run[name] for run in runs]
        pooled[name] = ModelOutcome(
            name,
            parts[0].slo_ms,
            parts[0].percentile,
            np.concatenate([p.latencies_ms for p in parts]),
            [b for p in parts for b in p.batch_sizes],
            sum(p.busy_ms for p in parts),
            seconds * len(parts),
        ).summary()
        # A run's latency quantiles as one run of this length reports them: the median over the
        # simulated runs (a p99 of a few dozen requests is nearly their maximum, below the pooled p99).
        for q in (50, 90, 99):
            pooled[name][f"p{q}_ms"] = float(np.median([p.quantile_ms(q) for p in parts]))
    return pooled


# Triton's onnxruntime backend reads cudnn_conv_algo_search as ORT's integer enum.
CUDNN_ALGO_SEARCH_ENUM = {"EXHAUSTIVE": 0, "HEURISTIC": 1, "DEFAULT": 2}


def triton_config(
    model: ModelPlan,
    priority_levels: int,
    device: str = "cuda",
    platform: str = "onnxruntime_onnx",
    runtime: dict[str, str] | None = None,
) -> str:
    """The Triton ``config.pbtxt`` (protobuf text format) serving ``model`` as planned.

    Triton orders requests by priority inside one model's queue (``priority_levels``,
    ``default_priority_level``: 1 is highest); across models on one GPU the closest knob is the CUDA
    stream priority of the model's instances (``optimization.priority``), set to PRIORITY_MAX for the
    plan's top priority when there are several levels on a GPU (``device`` ``cuda``).

    On ``cuda`` the plan's ``cudnn_conv_algo_search`` (``runtime``) goes into the backend's
    ``parameters``. Triton's backend holds one session per instance, so ``per-batch`` sessions have no
    Triton equivalent: the file says so in a comment (pad batches to one size there instead).
    """
    delay_us = int(round(model.max_queue_delay_ms * 1000))
    lines = [
        f'name: "{model.name}"',
        f'platform: "{platform}"',
        f"max_batch_size: {model.max_batch}",
        "dynamic_batching {",
        f"  preferred_batch_size: [ {model.max_batch} ]",
        f"  max_queue_delay_microseconds: {delay_us}",
        f"  priority_levels: {priority_levels}",
        f"  default_priority_level: {model.priority}",
        "}",
        f"instance_group [ {{ count: 1, kind: {'KIND_GPU' if device == 'cuda' else 'KIND_CPU'} }} ]",
    ]
    if device == "cuda" and priority_levels > 1 and model.priority == 1:
        lines.append("optimization { priority: PRIORITY_MAX }")
    if device == "cuda" and runtime:
        search = runtime.get("cudnn_conv_algo_search", "EXHAUSTIVE")
        enum = CUDNN_ALGO_SEARCH_ENUM[search]
        lines.append(f'parameters {{ key: "cudnn_conv_algo_search" value: {{ string_value: "{enum}" }} }}  # {search}')
        if runtime.get("sessions") == "per-batch":
            lines.append(
                "# planned with one ORT session per batch size (Hase's default on the CUDA EP: no cuDNN re-plan"
                " on a change of batch size); Triton runs one session per instance"
            )
    return "\n".join(lines) + "\n"


def _fmt(value: float, digits: int = 1) -> str:
    return "never" if math.isinf(value) else f"{value:.{digits}f}"


def _runtime_line(result: Plan) -> str:
    if not result.runtime:
        return ""
    return (
        f" ORT sessions: {result.runtime.get('sessions', 'shared')}, "
        f"cudnn_conv_algo_search {result.runtime.get('cudnn_conv_algo_search', 'EXHAUSTIVE')}."
    )


def plan_markdown(result: Plan) -> str:
    """The plan as a markdown table."""
    head = (
        f"Serving plan under `{result.load}` on {result.device} (co-tenant share {result.cotenant_share:.2f}, "
        f"burst {result.burst_ms:g} ms, slice {result.slice_ms:g} ms); {result.candidates_simulated} "
        "configurations simulated in "
        f"{result.seconds:.1f} s.{_runtime_line(result)}\n\n"
        "| model | priority | SLO | rate/s | batch | delay ms | attainable | p50 ms | p90 ms | p99 ms "
        "| in SLO | device util | mean batch |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    rows = [
        f"| {m.name} | {m.priority} | p{m.percentile} <= {m.slo_ms:g} ms | {m.rate_per_s:g} | {m.max_batch} "
        f"| {m.max_queue_delay_ms:g} | {'yes' if m.attainable else 'NO'} | {_fmt(m.p50_ms)} | {_fmt(m.p90_ms)} "
        f"| {_fmt(m.p99_ms)} | {m.attainment:.2%} | {m.utilization:.0%} | {m.mean_batch:.2f} |"
        for m in result.models
    ]
    return head + "\n".join(rows) + "\n"


def write_plan(result: Plan, out_dir: Path) -> list[Path]:
    """``plan.json``, ``plan.md`` and ``<model>/config.pbtxt`` (a Triton model repository's layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = max(m.priority for m in result.models)
    written = [out_dir / "plan.json", out_dir / "plan.md"]
    written[0].write_text(json.dumps(result.to_dict(), indent=2, default=_json_number) + "\n")
    written[1].write_text(plan_markdown(result))
    for model in result.models:
        path = out_dir / model.name / "config.pbtxt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(triton_config(model, levels, result.device, runtime=result.runtime))
        written.append(path)
    return written


def _json_number(value: object) -> object:
    return str(value)


def configs_from_plan_json(path: Path) -> dict[str, BatchingConfig]:
    """The batching configurations of a ``plan.json`` written by :func:`write_plan`."""
    try:
        data = json.loads(path.read_text())
        return {
            m["name"]: BatchingConfig(int(m["max_batch"]), float(m["max_queue_delay_ms"]), int(m["priority"]))
            for m in data["models"]
        }
    except FileNotFoundError:
        raise HaseError(f"no such plan file: {path}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise HaseError(f"{path} is not a plan written by hase plan: {exc}") from None


def fixed_configs(spec: PlanSpec, kind: str, models: Sequence[ServedModel] | None = None) -> dict[str, BatchingConfig]:
    """The baselines: ``batch1`` (no batching) and ``triton-default`` (the largest batch, no delay)."""
    chosen = models or spec.models
    if kind == "batch1":
        return {m.name: BatchingConfig(1, 0.0, m.priority) for m in chosen}
    if kind == "triton-default":
        return {m.name: BatchingConfig(max(spec.candidate_batches(m)), 0.0, m.priority) for m in chosen}
    raise HaseError(f"unknown baseline {kind!r}: expected batch1 or triton-default")


def exec_time_for(
    spec: PlanSpec, data_root: Path, prometheus_url: str, extra_loads: Sequence[str] = ()
) -> TableExecTime:
    """The plan's ``exec_ms`` table when it has one (the same times at every load, the co-tenant's
    slices added by the simulator), else Hase's predictions (:func:`hase_exec_time`) under the plan's
    load and ``extra_loads``."""
    if spec.exec_ms is None:
        return hase_exec_time(spec, data_root, prometheus_url, extra_loads)
    table = {name: {b: (float(v[0]), float(v[1])) for b, v in times.items()} for name, times in spec.exec_ms.items()}
    return TableExecTime({IDLE_LOAD: table})
