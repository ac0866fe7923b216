"""``hase serve-bench``: the planner's configuration against baselines, measured on the real executor.

For each stress level (the project's stressor as the co-tenant, through ``under_load``), each
arrival-rate scale and each compared configuration (``planner``; ``batch1``: no batching;
``triton-default``: the largest batch, no delay; ``grid``: every combination of a small grid, the
brute-force search), the same seeded Poisson schedule is served and every request recorded; the
simulator's figures for the same configuration and rates are stored beside the measured ones.

Results (appended, so an interrupted bench resumes where it stopped; a run already in ``runs.jsonl``
is skipped): ``runs.jsonl`` (one line per run: configuration, measured and simulated figures per
model, planning and wall time) and ``requests.csv`` (one row per request).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hase_dagster.core.errors import HaseError
from hase_dagster.core.serving_spec import BatchingConfig, PlanSpec
from hase_dagster.learn.serving_plan import (
    TableExecTime,
    exec_time_for,
    fixed_configs,
    plan,
    simulate_configs,
    simulate_service,
)
from hase_dagster.learn.serving_sim import EmpiricalServiceTime, ModelOutcome

CONFIG_KINDS = ("planner", "batch1", "triton-default", "grid")


@dataclass(frozen=True)
class BenchSettings:
    """What ``hase serve-bench`` runs."""

    kinds: list[str]
    stress_levels: list[float]
    rate_scales: list[float]
    duration_s: float
    drain_s: float
    threads: int
    grid_batches: list[int]
    grid_delays_ms: list[float]
    grid_scales: list[float] | None  # rate scales the grid runs at (all when None)
    grid_levels: list[float] | None  # stress levels the grid runs at (all when None)
    seed: int = 0
    metrics_port: int | None = None


def scaled(spec: PlanSpec, level: float, scale: float) -> PlanSpec:
    """``spec`` under stress ``level`` with every arrival rate times ``scale``."""
    models = [m.model_copy(update={"rate_per_s": m.rate_per_s * scale}) for m in spec.models]
    return spec.model_copy(update={"models": models, "load": f"level={level:g}"})


def grid_configs(spec: PlanSpec, batches: list[int], delays_ms: list[float]) -> list[dict[str, BatchingConfig]]:
    """Every combination over models of (batch, delay); a delay only with batches above 1."""
    per_model = []
    for model in spec.models:
        options = [BatchingConfig(b, d, model.priority) for b in batches for d in delays_ms if b > 1 or d == 0]
        per_model.append(options)
    return [dict(zip([m.name for m in spec.models], combo, strict=True)) for combo in itertools.product(*per_model)]


def measured_summary(spec: PlanSpec, records: list, duration_s: float) -> dict[str, dict[str, Any]]:
    """The measured figures per model, computed as the simulator computes its own."""
    out = {}
    for model in spec.models:
        mine = [r for r in records if r.model == model.name]
        outcome = ModelOutcome(
            model.name,
            model.slo_ms,
            model.percentile,
            np.array([r.latency_ms for r in mine], dtype=float),
            _batch_sizes(mine),
            0.0,
            duration_s,
        )
        summary = outcome.summary()
        busy_ms = sum(_unique_batches(mine).values())
        summary["utilization"] = busy_ms / (duration_s * 1000.0)
        out[model.name] = summary
    return out


def measured_batch_times(records: list) -> dict[str, dict[int, list[float]]]:
    """The run time (ms) of every batch a run served, per model and batch size."""
    runs: dict[str, dict[int, list[float]]] = {}
    seen: set[tuple[str, float]] = set()
    for r in records:
        if math.isfinite(r.done_ms) and (r.model, r.start_ms) not in seen:
            seen.add((r.model, r.start_ms))
            runs.setdefault(r.model, {}).setdefault(r.batch, []).append(r.done_ms - r.start_ms)
    return runs


def measured_exec_table(records: list) -> dict[str, dict[int, tuple[float, float]]]:
    """(mean, p90) run time per model and batch size of the batches a run served."""
    return {
        model: {b: (float(np.mean(t)), float(np.percentile(t, 90))) for b, t in sorted(by_batch.items())}
        for model, by_batch in measured_batch_times(records).items()
    }


def _repeats(spec: PlanSpec, settings: BenchSettings) -> int:
    """How many simulated runs as long as a measured one pool about 20,000 requests (1 to 50)."""
    per_run = sum(m.rate_per_s for m in spec.models) * settings.duration_s
    return int(min(50, max(1, math.ceil(20000 / max(per_run, 1.0)))))


def _unique_batches(records: list) -> dict[float, float]:
    """Each served batch's run time, keyed by its start."""
    return {r.start_ms: r.done_ms - r.start_ms for r in records if math.isfinite(r.done_ms)}


def _batch_sizes(records: list) -> list[int]:
    sizes: dict[float, int] = {}
    for r in records:
        if math.isfinite(r.start_ms):
            sizes[r.start_ms] = r.batch
    return list(sizes.values())


def _done_runs(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {json.loads(line)["run_id"] for line in path.read_text().splitlines() if line.strip()}


def _drop_unfinished_requests(path: Path, done: set[str]) -> None:
    """Remove request rows of runs that never reached ``runs.jsonl`` (a bench stopped between the two
    writes), so the run, done again, is not counted twice."""
    if not path.exists():
        return
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    kept = rows[:1] + [row for row in rows[1:] if row and row[0] in done]
    if len(kept) != len(rows):
        partial = path.with_suffix(".partial")
        with partial.open("w", newline="") as handle:
            csv.writer(handle).writerows(kept)
        partial.replace(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def serve_bench(spec: PlanSpec, settings: BenchSettings, out_dir: Path, data_root: Path, prometheus_url: str) -> Path:
    """Run every pending (stress level, rate scale, configuration) and append its results under
    ``out_dir``; returns the ``runs.jsonl`` path."""
    from hase_dagster.core.config import TelemetryOptions
    from hase_dagster.core.metrics import LOAD_FIELD
    from hase_dagster.measure.load import under_load
    from hase_dagster.measure.serving import ServedSession, ServingMetrics, poisson_schedule, serve

    unknown = [k for k in settings.kinds if k not in CONFIG_KINDS]
    if unknown:
        raise HaseError(f"unknown --config {unknown}; expected some of {', '.join(CONFIG_KINDS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_path, requests_path = out_dir / "runs.jsonl", out_dir / "requests.csv"
    done = _done_runs(runs_path)
    _drop_unfinished_requests(requests_path, done)
    loads = [f"level={level:g}" for level in settings.stress_levels]
    started = time.perf_counter()
    exec_time = exec_time_for(spec, data_root, prometheus_url, loads)
    prediction_s = time.perf_counter() - started
    runtime = spec.served_runtime()
    sessions = {m.name: ServedSession(m.name, m.path, spec.device, settings.threads, runtime) for m in spec.models}
    batches = sorted(
        {*settings.grid_batches, *spec.batch_sizes, *(b for m in spec.models for b in m.batch_sizes or [])}
    )
    metrics = ServingMetrics() if settings.metrics_port is not None else None
    server = None
    if metrics is not None:
        from prometheus_client import start_http_server

        assert settings.metrics_port is not None
        try:
            server, _ = start_http_server(settings.metrics_port, addr="127.0.0.1", registry=metrics.registry)
        except OSError as exc:
            raise HaseError(
                f"cannot serve metrics on 127.0.0.1:{settings.metrics_port}: {exc.strerror or exc}"
            ) from None
        for model in spec.models:
            metrics.slo.labels(model=model.name).set(model.slo_ms)
    try:
        for session in sessions.values():
            session.warm_up(list(range(1, max(batches) + 1)))
        for level in settings.stress_levels:
            pending = _runs_at(spec, settings, level, exec_time, done)
            if not pending:
                continue
            telemetry = TelemetryOptions(fields=[LOAD_FIELD[spec.device]])
            with under_load(spec.device, level, telemetry) as loaded:
                steady = loaded.stressor.steady_load
                for scale, kind, run_id, configs, plan_s in pending():
                    spec_s = scaled(spec, level, scale)
                    share = spec.cotenant.share_at(level)
                    seed = settings.seed + int(level * 100) * 1000 + int(scale * 100)
                    rates = {m.name: m.rate_per_s for m in spec_s.models}
                    schedule = poisson_schedule(rates, settings.duration_s, seed)
                    if metrics is not None:
                        _publish_predictions(metrics, spec_s, exec_time, configs, share)
                    t0 = time.perf_counter()
                    records = serve(
                        sessions,
                        configs,
                        schedule,
                        settings.duration_s,
                        settings.drain_s,
                        {m.name: m.slo_ms for m in spec.models},
                        metrics,
                    )
                    wall_s = time.perf_counter() - t0
                    # The simulated run is as long as the measured one (an overloaded queue's tail grows with
                    # the run), repeated on independent streams until about 20,000 requests are pooled.
                    sim = {
                        "seconds": settings.duration_s,
                        "drain_s": settings.drain_s,
                        "repeats": _repeats(spec_s, settings),
                    }
                    simulated = simulate_configs(spec_s, configs, exec_time, share, seed=seed, **sim)
                    # The same simulation drawing the run's own batch times instead of the predictions:
                    # what is left of its error is the queueing model's, not the predictor's.
                    measured_exec = measured_exec_table(records)
                    batch_times = measured_batch_times(records)
                    simulated_measured_exec = (
                        simulate_service(spec_s, configs, EmpiricalServiceTime(batch_times), seed=seed, **sim)
                        if set(batch_times) == set(configs)
                        else None
                    )
                    line = {
                        "run_id": run_id,
                        "stress": level,
                        "rate_scale": scale,
                        "config": kind,
                        "device": spec.device,
                        "runtime": spec.served_runtime().model_dump(),
                        "duration_s": settings.duration_s,
                        "steady_load": steady,
                        "rates_per_s": rates,
                        "slo_ms": {m.name: m.slo_ms for m in spec.models},
                        "percentile": {m.name: m.percentile for m in spec.models},
                        "priority": {m.name: m.priority for m in spec.models},
                        "configs": {n: c.__dict__ for n, c in configs.items()},
                        "measured": measured_summary(spec_s, records, settings.duration_s),
                        "simulated": simulated,
                        "simulated_measured_exec": simulated_measured_exec,
                        "measured_exec_ms": {n: {str(b): v for b, v in t.items()} for n, t in measured_exec.items()},
                        "plan_seconds": plan_s,
                        "prediction_seconds": prediction_s,
                        "wall_seconds": wall_s,
                        "cotenant_share": share,
                        "slice_ms": spec.cotenant.slice_ms,
                        "burst_ms": spec.cotenant.burst_ms,
                    }
                    _append_requests(requests_path, run_id, records)
                    with runs_path.open("a") as handle:
                        handle.write(json.dumps(_jsonable(line)) + "\n")
                    print(_progress(line), flush=True)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return runs_path


def _runs_at(spec: PlanSpec, settings: BenchSettings, level: float, exec_time: TableExecTime, done: set[str]):
    """A function giving the runs still to do at ``level``: (scale, kind, run id, configs, planning s)."""

    def ids() -> list[tuple[float, str, str, int]]:
        out = []
        for scale in settings.rate_scales:
            for kind in settings.kinds:
                if kind == "grid":
                    if settings.grid_scales is not None and scale not in settings.grid_scales:
                        continue
                    if settings.grid_levels is not None and level not in settings.grid_levels:
                        continue
                    grid = grid_configs(spec, settings.grid_batches, settings.grid_delays_ms)
                    out += [(scale, kind, f"s{level:g}-r{scale:g}-grid{i}", i) for i in range(len(grid))]
                else:
                    out.append((scale, kind, f"s{level:g}-r{scale:g}-{kind}", -1))
        return [item for item in out if item[2] not in done]

    todo = ids()
    if not todo:
        return None

    def pending():
        for scale, kind, run_id, index in todo:
            spec_s = scaled(spec, level, scale)
            plan_s = 0.0
            if kind == "planner":
                t0 = time.perf_counter()
                configs = plan(spec_s, exec_time, spec.cotenant.share_at(level)).configs
                plan_s = time.perf_counter() - t0
            elif kind == "grid":
                configs = grid_configs(spec, settings.grid_batches, settings.grid_delays_ms)[index]
            else:
                configs = fixed_configs(spec_s, kind)
            yield scale, kind, run_id, configs, plan_s

    return pending


def _publish_predictions(metrics: Any, spec: PlanSpec, exec_time: TableExecTime, configs: dict, share: float) -> None:
    for model in spec.models:
        for batch in range(1, configs[model.name].max_batch + 1):
            mean, _ = exec_time(model.name, batch, spec.load)
            metrics.predicted.labels(model=model.name, batch=str(batch)).set(mean)
    simulated = simulate_configs(spec, configs, exec_time, share, 20.0, 0)
    for name, figures in simulated.items():
        for quantile in ("p50", "p90", "p99"):
            value = float(figures[f"{quantile}_ms"])
            metrics.predicted_e2e.labels(model=name, quantile=quantile).set(value if math.isfinite(value) else math.nan)


def _append_requests(path: Path, run_id: str, records: list) -> None:
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(["run_id", "model", "arrival_ms", "start_ms", "done_ms", "latency_ms", "batch"])
        for r in records:
            writer.writerow(
                [
                    run_id,
                    r.model,
                    f"{r.arrival_ms:.3f}",
                    f"{r.start_ms:.3f}",
                    f"{r.done_ms:.3f}",
                    f"{r.latency_ms:.3f}",
                    r.batch,
                ]
            )


def _progress(line: dict) -> str:
    parts = []
    for name, figures in line["measured"].items():
        sim = line["simulated"][name]
        parts.append(
            f"{name}: b{line['configs'][name]['max_batch']}/{line['configs'][name]['max_queue_delay_ms']:g}ms "
            f"in SLO {figures['attainment']:.1%} p99 {figures['p99_ms']:.1f} (sim {sim['p99_ms']:.1f}) ms"
        )
    return f"{line['run_id']}: " + "; ".join(parts)
