"""Run a ``hase`` command with the XGBoost residual fitted at another seed and row / column subsample.

Measures how much of a change's effect is XGBoost's own randomness: ``Boosted.fit`` is patched to
``random_state=SEED`` and ``subsample`` = ``colsample_bytree`` = SUBSAMPLE (the shipped fit is seed 0, 0.8).

    .venv/bin/python results/cpu/prelu-feeds/seeded_hase.py SEED SUBSAMPLE evaluate-tables TABLES --ep cpu ...
    .venv/bin/python results/cpu/prelu-feeds/seeded_hase.py SEED SUBSAMPLE predictor export cpu --tables TABLES ...
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

import hase_dagster.learn.estimators as estimators
from hase_dagster.orchestration.cli import main


def patched_fit(seed: int, subsample: float) -> Any:
    """``Boosted.fit`` with the shipped settings except ``random_state`` and the two subsample rates."""

    def fit(self: estimators.Boosted, x: np.ndarray, y: np.ndarray) -> estimators.Boosted:
        from xgboost import XGBRegressor

        model = XGBRegressor(
            n_estimators=self.n_estimators,
            max_depth=self.max_depth,
            learning_rate=0.03,
            subsample=subsample,
            colsample_bytree=subsample,
            n_jobs=-1,
            random_state=seed,
        )
        model.fit(x, y)
        self.booster = model.get_booster()
        self.trees = None
        return self

    return fit


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("hase: error: usage: seeded_hase.py SEED SUBSAMPLE HASE-COMMAND [ARGS ...]")
    estimators.Boosted.fit = patched_fit(int(sys.argv[1]), float(sys.argv[2]))  # type: ignore[method-assign]
    raise SystemExit(main(sys.argv[3:]))
