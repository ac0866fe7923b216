"""The serving proof's report from ``hase serve-bench``'s ``runs.jsonl``: SLO attainment per model,
goodput, simulated against measured p50/p99, and the plan against the brute-force best."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

from hase_dagster.core.errors import HaseError

BASELINES = ("batch1", "triton-default")


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, str):
        return float(value)  # "inf"
    return float(value)


def read_runs(path: Path) -> list[dict[str, Any]]:
    """Every run line of a ``runs.jsonl``."""
    if not path.exists():
        raise HaseError(f"no serve-bench results at {path}")
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except ValueError as exc:
        raise HaseError(f"{path} is not a serve-bench runs.jsonl: {exc}") from None


def goodput(run: dict[str, Any]) -> float:
    """Requests answered within their SLO per second, all models together."""
    return sum(_num(m["goodput_per_s"]) for m in run["measured"].values())


def weighted_slos_met(run: dict[str, Any]) -> float:
    """SLOs met, each weighted as the planner weighs it (a higher priority outweighs all below)."""
    levels = max(run["priority"].values())
    return sum(2.0 ** (levels - run["priority"][n]) * bool(m["slo_met"]) for n, m in run["measured"].items())


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda r: (weighted_slos_met(r), goodput(r)))


def _first(by_kind: dict[str, list[dict[str, Any]]], kind: str) -> dict[str, Any] | None:
    runs = by_kind.get(kind)
    return runs[0] if runs else None


def _fmt(value: float, digits: int = 1) -> str:
    if math.isnan(value):
        return "-"
    return "never" if math.isinf(value) else f"{value:.{digits}f}"


def _config_text(run: dict[str, Any], name: str) -> str:
    config = run["configs"][name]
    return f"{config['max_batch']} / {config['max_queue_delay_ms']:g}"


def _relative_error(simulated: float, measured: float) -> float:
    if not (math.isfinite(simulated) and math.isfinite(measured)) or measured <= 0:
        return math.nan
    return (simulated - measured) / measured


def serving_report(path: Path) -> str:
    """The markdown report of the runs in ``path`` (a ``runs.jsonl``)."""
    runs = read_runs(path)
    if not runs:
        raise HaseError(f"{path} holds no runs")
    scenarios: dict[tuple[float, float], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        scenarios[(run["stress"], run["rate_scale"])][run["config"]].append(run)
    models = list(runs[0]["measured"])
    first = runs[0]
    lines = [
        f"# Serving: planner against baselines ({first['device']})",
        "",
        f"{len(runs)} measured runs of {first['duration_s']:g} s of Poisson arrivals each; models "
        + ", ".join(
            f"{n} (p{first['percentile'][n]} <= {first['slo_ms'][n]:g} ms, priority {first['priority'][n]}, "
            f"{first['rates_per_s'][n] / first['rate_scale']:g}/s at rate scale 1)"
            for n in models
        )
        + f". Co-tenant in the simulation: burst {first.get('burst_ms', '-')} ms, slice {first['slice_ms']:g} ms.",
        "",
        "## Per scenario and configuration",
        "",
        "Batch / delay (ms) per model; in SLO = share of requests within the SLO (measured); p50 and p99 "
        "measured (simulated); goodput = requests within their SLO per second, all models.",
        "",
        "| stress | rate x | config | "
        + " | ".join(f"{n}: batch/delay | {n}: in SLO | {n}: p50 ms | {n}: p99 ms" for n in models)
        + " | goodput/s |",
        "| --- | --- | --- | " + " | ".join("--- | --- | --- | ---" for _ in models) + " | --- |",
    ]
    sim_errors: dict[str, list[tuple[float, float]]] = defaultdict(list)
    comparison = []
    for (stress, scale), by_kind in sorted(scenarios.items()):
        shown = []
        for kind in ("planner", *BASELINES):
            shown += [(kind, r) for r in by_kind.get(kind, [])]
        if by_kind.get("grid"):
            shown.append((f"grid best of {len(by_kind['grid'])}", _best(by_kind["grid"])))
        for label, run in shown:
            cells = []
            for name in models:
                measured, simulated = run["measured"][name], run["simulated"][name]
                cells.append(
                    f"{_config_text(run, name)} | {_num(measured['attainment']):.1%} "
                    f"| {_fmt(_num(measured['p50_ms']))} ({_fmt(_num(simulated['p50_ms']))}) "
                    f"| {_fmt(_num(measured['p99_ms']))} ({_fmt(_num(simulated['p99_ms']))})"
                )
            lines.append(f"| {stress:g} | {scale:g} | {label} | " + " | ".join(cells) + f" | {goodput(run):.1f} |")
        for run in [r for kind_runs in by_kind.values() for r in kind_runs]:
            for name in models:
                measured = run["measured"][name]
                for source in ("simulated", "simulated_measured_exec"):
                    if not run.get(source):
                        continue
                    for q in ("p50", "p99"):
                        error = _relative_error(_num(run[source][name][f"{q}_ms"]), _num(measured[f"{q}_ms"]))
                        if not math.isnan(error):
                            sim_errors[f"{source}:{q}"].append((error, stress))
        comparison.append((stress, scale, by_kind))
    lines += ["", "## Planner against the baselines and the brute-force best", ""]
    lines += [
        "| stress | rate x | planner goodput/s | batch1 | triton-default | grid best | planner / grid best "
        "| plan s | grid measuring s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    wins = {k: [0, 0, 0] for k in BASELINES}  # better, equal (same configs or within 1%), worse
    ratios = []
    for stress, scale, by_kind in comparison:
        planner = _first(by_kind, "planner")
        cells = []
        for kind in BASELINES:
            baseline = _first(by_kind, kind)
            cells.append(f"{goodput(baseline):.1f}" if baseline else "-")
            if planner and baseline:
                same = baseline["configs"] == planner["configs"]
                diff = goodput(planner) - goodput(baseline)
                index = 1 if same or abs(diff) <= 0.01 * max(goodput(baseline), 1e-9) else (0 if diff > 0 else 2)
                wins[kind][index] += 1
        grid = by_kind.get("grid", [])
        best = _best(grid) if grid else None
        ratio = goodput(planner) / goodput(best) if planner and best and goodput(best) > 0 else math.nan
        if not math.isnan(ratio):
            ratios.append(ratio)
        grid_s = sum(r["wall_seconds"] for r in grid)
        planner_text = f"{goodput(planner):.1f}" if planner else "-"
        best_text = f"{goodput(best):.1f}" if best else "-"
        plan_s = f"{planner['plan_seconds']:.2f}" if planner else "-"
        lines.append(
            f"| {stress:g} | {scale:g} | {planner_text} | {' | '.join(cells)} | {best_text} "
            f"| {_fmt(ratio * 100, 0)}% | {plan_s} | {grid_s:.0f} |"
        )
    lines += ["", "## Against the targets (issue 16)", ""]
    declared = [(r, n) for r in runs if r["config"] == "planner" for n in models if bool(r["simulated"][n]["slo_met"])]
    kept = [(r, n) for r, n in declared if bool(r["measured"][n]["slo_met"])]
    at_99 = [(r, n) for r, n in declared if _num(r["measured"][n]["attainment"]) >= 0.99]
    lines.append(
        f"- SLOs the planner declared attainable: {len(declared)}; met at their percentile in the measured run: "
        f"{len(kept)}; with at least 99% of requests within the SLO: {len(at_99)}."
    )
    missed = [(r, n) for r, n in declared if (r, n) not in kept]
    for run, name in missed:
        lines.append(
            f"  - missed: stress {run['stress']:g}, rate x{run['rate_scale']:g}, {name}: "
            f"{_num(run['measured'][name]['attainment']):.1%} in SLO, measured p{run['percentile'][name]} "
            f"over the SLO of {run['slo_ms'][name]:g} ms"
        )
    if ratios:
        lines.append(
            f"- Planner goodput / brute-force best: median {median(ratios):.0%}, worst {min(ratios):.0%} over "
            f"{len(ratios)} scenarios with a grid (target: within 10%, i.e. >= 90%)."
        )
    for kind, (better, equal, worse) in wins.items():
        lines.append(
            f"- Against {kind}: planner better in {better}, equal (same or within 1%) in {equal}, worse in {worse}."
        )
    sources = {
        "simulated": "Simulated (Hase's predicted batch times)",
        "simulated_measured_exec": "Simulated with the run's own measured batch times (the queueing model alone)",
    }
    for source, title in sources.items():
        for q in ("p50", "p99"):
            errors = sim_errors.get(f"{source}:{q}", [])
            if not errors:
                continue
            absolute = [abs(e) for e, _ in errors]
            within = sum(a <= 0.15 for a in absolute) / len(absolute)
            signed = median(e for e, _ in errors)
            lines.append(
                f"- {title}, {q} against measured: median absolute error {median(absolute):.0%} (median signed "
                f"{signed:+.0%}), within +-15% in {within:.0%} of {len(absolute)} (model, run) pairs with both finite"
                + (" (target for p99: +-15%)." if q == "p99" else ".")
            )
            by_stress = ", ".join(
                f"stress {level:g}: {median(abs(e) for e, s in errors if s == level):.0%}"
                for level in sorted({s for _, s in errors})
            )
            lines.append(f"  - median absolute error by stress: {by_stress}")
    planning = [r["plan_seconds"] for r in runs if r["config"] == "planner"]
    grid_total = sum(r["wall_seconds"] for r in runs if r["config"] == "grid")
    if planning:
        lines.append(
            f"- Planning took {median(planning):.2f} s per scenario (median; predictions once: "
            f"{runs[0]['prediction_seconds']:.1f} s); measuring the grid took {grid_total:.0f} s of serving."
        )
    return "\n".join(lines) + "\n"
