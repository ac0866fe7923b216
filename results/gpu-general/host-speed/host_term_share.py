"""Tried, not kept: the host-bound share from the h200 composition's own host-side terms (per run, launch shortfall,
dispatch stall, per kernel: their share of the idle prediction) instead of ``min(1, 3 (1 - gpu busy share))``, scored
on the H200 checks at reference 0.665 ms. Each argument is READINGS.json:FILES_DIR:PREDICTIONS_DIR (README).

    .venv/bin/python results/gpu-general/host-speed/host_term_share.py READINGS.json:FILES:PREDICTIONS ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.host_speed import host_speed_factor
from hase_dagster.learn.predict import (
    host_staged_kernels,
    idle_load,
    kernel_sums,
    predict_kernels_under,
    time_slicing_of,
)

HOST_TERMS = ("per_run", "launch_shortfall", "dispatch_stall", "per_kernel")
REFERENCE_MS = 0.665


def host_term_share(bundle, path: Path, batch: int) -> float:  # noqa: ANN001 (a learn.bundles.Bundle)
    """The share of the idle prediction of ``path`` that the composition's host-side terms make."""
    regressor, composition = bundle.predictor.regressor, bundle.predictor.composition
    kernels, _ = bundle.kernels(path, batch)
    idle = predict_kernels_under(regressor, kernels, [idle_load(regressor, bundle.load_for("idle")[0])])[0]
    sums = kernel_sums(
        idle, 0.0, idle, time_slicing_of("cuda"), composition.host_floor_ms, host_staged_kernels(kernels),
        composition.wait_included_families,
    )  # fmt: skip
    values = sums.values(composition.dispatch_ms, composition.wait_gpu_share, composition.per_kernel_counts_views)
    terms = {name: c * values[name] for name, c in (composition.mean_coefficients or {}).items()}
    return sum(terms[name] for name in HOST_TERMS) / sum(terms.values())


def main() -> int:
    bundle = load_bundle("h200")
    for spec in sys.argv[1:]:
        readings, files, predictions = spec.split(":")
        predicted = {}
        for path in Path(predictions).glob("predictions_b*.json"):
            for row in json.loads(path.read_text())["predictions"]:
                if row["load_source"].startswith("idle"):
                    predicted[row["model"]] = row
        shares: dict[str, float] = {}
        gain, terms = [], []
        for window in json.loads(Path(readings).read_text()):
            model, measured, reading = window["model"], window["mean_ms"], window["loop_mean_ms"]
            batch = int(model.rsplit("_b", 1)[1].split(".")[0])
            if model not in shares:
                shares[model] = host_term_share(bundle, Path(files) / model, batch)
            row = predicted[model]
            shipped = row["predicted_ms"] * host_speed_factor(row["gpu_busy_share"], reading, REFERENCE_MS)
            by_terms = row["predicted_ms"] * (1 + min(1.0, shares[model]) * (reading / REFERENCE_MS - 1))
            gain.append(abs(shipped - measured) / measured * 100)
            terms.append(abs(by_terms - measured) / measured * 100)
        g, t = np.array(gain), np.array(terms)
        print(
            f"{Path(readings).parent.name}: shipped (gain 3.0) {g.mean():.1f}% ({(g <= 10).mean() * 100:.0f}% within"
            f" +-10%); composition's host terms {t.mean():.1f}% ({(t <= 10).mean() * 100:.0f}%); host-term shares"
            f" {min(shares.values()):.2f}-{max(shares.values()):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
