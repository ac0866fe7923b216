"""Run a hase command with the composition's per-op dispatch weights off (every kernel's dispatch alike, as before
learn.dispatch): the baseline of results/gpu-general/dispatch.

    .venv/bin/python results/gpu-general/dispatch/uniform_hase.py predictor export h100 ...
"""

from __future__ import annotations

import sys

from hase_dagster.learn import training
from hase_dagster.orchestration.cli import main

if __name__ == "__main__":
    training.dispatch_weights_of = lambda store, ep, fitted: None  # type: ignore[assignment]
    raise SystemExit(main(sys.argv[1:]))
