"""Run a ``hase`` command with the XGBoost residual fitted at another seed and row / column subsample.

Measures how much of a change's effect is XGBoost's own randomness: ``XGBRegressor`` is patched to
``random_state=SEED`` and ``subsample`` = ``colsample_bytree`` = SUBSAMPLE (the shipped fit is seed 0, 0.8).

    .venv/bin/python results/cpu/prelu-feeds/seeded_hase.py SEED SUBSAMPLE evaluate-tables TABLES --ep cpu ...
    .venv/bin/python results/cpu/prelu-feeds/seeded_hase.py SEED SUBSAMPLE predictor export cpu --tables TABLES ...
"""

from __future__ import annotations

import sys
from typing import Any

import xgboost

from hase_dagster.orchestration.cli import main


def reseeded(seed: int, subsample: float) -> type[xgboost.XGBRegressor]:
    """``XGBRegressor`` with ``random_state`` and both subsample rates replaced; every other setting is the caller's
    (``Boosted.fit`` imports it from ``xgboost`` at each fit, so patching the module reaches it)."""

    class Reseeded(xgboost.XGBRegressor):
        def __init__(self, **settings: Any) -> None:
            replaced = {"random_state": seed, "subsample": subsample, "colsample_bytree": subsample}
            super().__init__(**{**settings, **replaced})

    return Reseeded


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("hase: error: usage: seeded_hase.py SEED SUBSAMPLE HASE-COMMAND [ARGS ...]")
    xgboost.XGBRegressor = reseeded(int(sys.argv[1]), float(sys.argv[2]))  # type: ignore[misc]
    raise SystemExit(main(sys.argv[3:]))
