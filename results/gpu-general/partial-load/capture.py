"""Run a ``hase`` command in this process and keep what composition needs: with ``fit``, the training points an
export fits its composition on (pickled before the fit); with ``predict``, each predicted case's sums.

    .venv/bin/python results/gpu-general/partial-load/capture.py fit|predict OUT.pkl HASE_ARGS...
"""

from __future__ import annotations

import pickle
import sys

import hase_dagster.learn.predict as composition
from hase_dagster.orchestration.cli import main


def run(mode: str, out: str, args: list[str]) -> int:
    cases: list[tuple] = []
    if mode == "fit":
        fit = composition.Composition.fit.__func__  # type: ignore[attr-defined]

        def capture_fit(cls, points, *rest, **options):  # noqa: ANN001, ANN202
            with open(out, "wb") as handle:
                pickle.dump(points, handle)
            return fit(cls, points, *rest, **options)

        composition.Composition.fit = classmethod(capture_fit)  # type: ignore[method-assign, assignment]
    else:
        model_prediction = composition._model_prediction

        def capture_case(model, regressor, composed, load, source, batch, sums, *rest):  # noqa: ANN001, ANN202
            cases.append((model, source, batch, sums))
            return model_prediction(model, regressor, composed, load, source, batch, sums, *rest)

        composition._model_prediction = capture_case  # type: ignore[assignment]
    try:
        return main(args)
    finally:
        if mode != "fit":
            with open(out, "wb") as handle:
                pickle.dump(cases, handle)


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
