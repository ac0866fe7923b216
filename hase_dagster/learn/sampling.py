"""Adaptive kernel sampling (issue 11, item 1): which design-space probes to measure next.

A committee of kernel regressors, each trained without one family of the measured networks,
predicts every kernel of every candidate probe. Where they disagree (the spread of their log
predictions) no family's data settles the kernel's cost: that is where a family held out, or a
user's network, is predicted worst. Candidates are then chosen greedily by the mean disagreement
of the kernels they would add that earlier choices do not already cover (measuring costs per kernel,
so a many-kernel cell does not win by its count alone), plus a share drawn at random so the sample
still covers the space where the committee happens to agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.learn.regressor import PRIMARY_TARGET, LatencyRegressor, rows_without, train_regressor


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's kernels and their committee disagreement (std of log ms), by instance id."""

    name: str
    spreads: dict[str, float]


def committee(
    rows: pd.DataFrame, ep: str, families: Mapping[str, str], kind: str = "xgboost"
) -> list[LatencyRegressor]:
    """One kernel regressor per family, each trained on ``rows`` without that family's instances.

    Args:
        rows: kernel benchmark training rows (``training_rows``), ``architecture`` comma-separated.
        ep: the execution provider.
        families: architecture name -> family.
        kind: the regressor kind every member uses.

    Returns:
        The members, one per family that leaves rows to train on.
    """
    members = []
    for family in sorted(set(families.values())):
        kept = rows_without(rows, {a for a, f in families.items() if f == family}).reset_index(drop=True)
        if len(kept) and len(kept) < len(rows):
            members.append(train_regressor(kept, ep, kind=kind))
    return members


def kernel_spreads(
    members: Sequence[LatencyRegressor], kernels: Sequence[Kernel], loads: Sequence[Mapping[str, float]]
) -> dict[str, float]:
    """The committee's disagreement per kernel instance: the standard deviation of the members'
    log predictions of ``PRIMARY_TARGET``, averaged over ``loads``."""
    if not kernels or len(members) < 2:
        return {}
    records = [k.to_dict() for k in kernels]
    logs = np.stack(
        [
            np.stack([np.log(p[PRIMARY_TARGET]) for p in member.predict_kernels(records, [dict(x) for x in loads])])
            for member in members
        ]
    )  # members x loads x kernels
    spread = logs.std(axis=0).mean(axis=0)
    return {k.instance_id: float(s) for k, s in zip(kernels, spread)}


def choose(candidates: Sequence[CandidateScore], count: int, explore_share: float = 0.25, seed: int = 0) -> list[str]:
    """Pick ``count`` candidates: most by the mean disagreement of the kernels they add that the
    picks before them do not cover (greedy; a candidate that adds none scores 0), the rest
    (``explore_share``) at random from the others.

    Args:
        candidates: each candidate's kernels and spreads.
        count: how many to pick (all when fewer exist).
        explore_share: the share of ``count`` drawn at random after the greedy picks.
        seed: the random draw's seed.

    Returns:
        The picked names, greedy picks first in the order picked.
    """
    if not 0.0 <= explore_share <= 1.0:
        raise ValueError(f"explore_share must be in [0, 1], got {explore_share}")
    count = min(count, len(candidates))
    greedy_count = count - int(round(count * explore_share))
    covered: set[str] = set()
    picked: list[str] = []
    left = list(candidates)
    for _ in range(greedy_count):
        gains = [float(np.mean([s for i, s in c.spreads.items() if i not in covered] or [0.0])) for c in left]
        best = int(np.argmax(gains))
        chosen = left.pop(best)
        picked.append(chosen.name)
        covered.update(chosen.spreads)
    rng = np.random.default_rng(seed)
    extra: list[int] = (
        [int(i) for i in rng.choice(len(left), size=count - len(picked), replace=False)] if count > len(picked) else []
    )
    return picked + [left[i].name for i in sorted(extra)]
