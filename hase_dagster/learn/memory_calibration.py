"""Calibrating the peak-memory prediction's per-EP terms (``analysis.peak_memory``: the session's
constant and the arena's share of the activations) from measured peaks, with a leave-one-model-out
check so that the reported error is for models the terms never saw.

Two models of what the EP adds to weights + live activations + workspace are compared:

- ``linear``: a constant (the session: handles, kernels, the arena's first regions) plus a share of
  the activations' peak (the arena's fragmentation), fitted by least squares on the relative error;
- ``pow2``: ORT's BFC arena growing by ``kNextPowerOfTwo`` (regions of 1, 2, 4, ... MiB, each at
  most 1 GiB, until they hold ``k`` x (activations + workspace)), plus a constant; fitted on a grid.

``python -m hase_dagster.learn.memory_calibration MEMORY.json ...`` (outputs of ``hase memory
--json``) prints both fits, their in-sample and leave-one-model-out errors, per model and batch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hase_dagster.core.errors import HaseError

MIB = 2**20
# ORT's BFC arena defaults (OrtArenaCfg): the first region is 1 MiB, each next one twice the last,
# and a region grows no further than 1 GiB (max_power_of_two_extend_bytes).
ARENA_INITIAL_CHUNK = 1 * MIB
ARENA_MAX_EXTEND = 1024 * MIB


@dataclass(frozen=True)
class MemoryCase:
    """One measured session: the prediction's parts (bytes) and the measured peak (bytes)."""

    model: str
    batch: int
    weights: int
    activations: int
    workspace: int
    measured: int


@dataclass(frozen=True)
class MemoryTerms:
    """Fitted terms: ``session_bytes`` (a constant per session) and ``arena_share`` (of the activations'
    peak) for the linear model; ``k`` scales the arena's demand in the pow2 model."""

    kind: str
    session_bytes: int
    arena_share: float = 0.0
    k: float = 1.0


def arena_pow2_bytes(demand: float, initial: int = ARENA_INITIAL_CHUNK, cap: int = ARENA_MAX_EXTEND) -> int:
    """Bytes ORT's arena holds once its regions, grown by ``kNextPowerOfTwo`` from ``initial``
    (doubling, each region at most ``cap``), add up to at least ``demand``.

    A simplification of ``BFCArena::Extend``: it assumes the demand arrives in pieces no larger than
    the next region (a larger request makes ORT skip region sizes) and no fragmentation.
    """
    total, region = 0, initial
    while total < demand:
        total += region
        region = min(region * 2, cap)
    return total


def predict_case(case: MemoryCase, terms: MemoryTerms) -> float:
    """The predicted peak (bytes) of ``case`` under ``terms``."""
    if terms.kind == "pow2":
        return case.weights + terms.session_bytes + arena_pow2_bytes(terms.k * (case.activations + case.workspace))
    base = case.weights + case.activations + case.workspace
    return base + terms.session_bytes + terms.arena_share * case.activations


def fit_linear(cases: Sequence[MemoryCase]) -> MemoryTerms:
    """Session constant and arena share minimizing the squared relative error; the share is kept at
    or above 0 (a negative share would say the workspace assumption over-counts, and is refitted as
    0 with the constant alone).

    Raises:
        HaseError: fewer than two cases.
    """
    if len(cases) < 2:
        raise HaseError(f"fitting memory terms needs at least 2 measured cases, got {len(cases)}")
    measured = np.array([c.measured for c in cases], dtype=float)
    base = np.array([c.weights + c.activations + c.workspace for c in cases], dtype=float)
    acts = np.array([c.activations for c in cases], dtype=float)
    target = 1 - base / measured
    design = np.column_stack([1 / measured, acts / measured])
    session, share = np.linalg.lstsq(design, target, rcond=None)[0]
    if share < 0:
        share = 0.0
        session = float(np.sum(target / measured) / np.sum(1 / measured**2))
    return MemoryTerms("linear", int(round(session)), float(share))


def fit_pow2(cases: Sequence[MemoryCase]) -> MemoryTerms:
    """The constant (0-300 MiB, 1 MiB steps) and demand scale ``k`` (0.5-4) of the pow2 model with
    the least mean absolute relative error."""
    if not cases:
        raise HaseError("fitting memory terms needs at least 1 measured case")
    best: tuple[float, MemoryTerms] | None = None
    for k in np.arange(0.5, 4.0001, 0.05):
        arenas = [arena_pow2_bytes(k * (c.activations + c.workspace)) for c in cases]
        for session in range(0, 301 * MIB, MIB):
            error = float(np.mean([abs((c.weights + session + a) / c.measured - 1) for c, a in zip(cases, arenas)]))
            if best is None or error < best[0]:
                best = (error, MemoryTerms("pow2", session, 0.0, round(float(k), 2)))
    assert best is not None
    return best[1]


FITTERS: dict[str, Callable[[Sequence[MemoryCase]], MemoryTerms]] = {"linear": fit_linear, "pow2": fit_pow2}


def leave_one_model_out(cases: Sequence[MemoryCase], kind: str = "linear") -> list[tuple[MemoryCase, float]]:
    """Each case predicted by terms fitted on the other models' cases (all its batch sizes left
    out together): ``(case, error_pct)``."""
    fitter = FITTERS[kind]
    out = []
    for model in sorted({c.model for c in cases}):
        terms = fitter([c for c in cases if c.model != model])
        out += [(c, (predict_case(c, terms) / c.measured - 1) * 100) for c in cases if c.model == model]
    return out


def cases_from_memory_json(paths: Sequence[str | os.PathLike[str]]) -> list[MemoryCase]:
    """The measured cases of ``hase memory --json`` outputs (rows with a measured peak).

    Raises:
        HaseError: a file that is missing or not such an output.
    """
    cases = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            rows = data["models"] if isinstance(data, dict) else data
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HaseError(f"{path} is not a `hase memory --json` output: {exc}") from exc
        for row in rows:
            if not row.get("peak_memory_mb"):
                continue
            stem = Path(row["model"]).stem
            match = re.match(r"(.+?)(?:_i\d+)?_b(\d+)$", stem)
            cases.append(
                MemoryCase(
                    model=match.group(1) if match else stem,
                    batch=int(match.group(2)) if match else 0,
                    weights=int(row["weights_bytes"]),
                    activations=int(row["activation_peak_bytes"]),
                    workspace=int(row["workspace_bytes"]),
                    measured=int(round(row["peak_memory_mb"] * 1e6)),
                )
            )
    return cases


def report(cases: Sequence[MemoryCase]) -> str:
    """Markdown: each model's fit on all cases, in-sample and leave-one-model-out errors per case."""
    lines = []
    for kind, fitter in FITTERS.items():
        terms = fitter(cases)
        inside = [(predict_case(c, terms) / c.measured - 1) * 100 for c in cases]
        held = dict(((c.model, c.batch), e) for c, e in leave_one_model_out(cases, kind))
        lines += [
            f"### {kind}: session {terms.session_bytes / 1e6:.1f} MB, arena share {terms.arena_share:.3f}, k {terms.k}",
            f"MAPE in-sample {np.mean(np.abs(inside)):.1f}%, leave one model out "
            f"{np.mean(np.abs(list(held.values()))):.1f}%",
            "",
            "| model | batch | measured MB | predicted MB | error | error, model left out |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c.model} | {c.batch} | {c.measured / 1e6:.1f} | {predict_case(c, terms) / 1e6:.1f} | {e:+.1f}% "
            f"| {held[(c.model, c.batch)]:+.1f}% |"
            for c, e in zip(cases, inside)
        ]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m hase_dagster.learn.memory_calibration MEMORY.json ...", file=sys.stderr)
        return 2
    try:
        print(report(cases_from_memory_json(argv)))
    except HaseError as exc:
        print(f"hase: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
