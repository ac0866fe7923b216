"""The time-slicing wait as one term against two (``timeslice_arrival`` + ``timeslice_crossings``).

A long GPU-bound run pays a burst at every slice boundary it crosses; a short host-bound one pays a burst on
arrival and hides part of it in its own dispatch gaps. One coefficient on the whole wait (the composition up
to 2026-11-24, ``timeslice_wait``) served neither. This script prints, in markdown:

1. the measured loaded-over-idle time of every timed network of sets E-H (both machines of set F) at stress
   0.5 and 1.0 against the two compositions' predicted ratio, by the network's idle time;
2. leave one set out: each composition fitted as ``hase predictor export`` fits it (the tables' models and
   the generator's ``chk_`` networks of sets gen, D and E, less the set scored), scored on sets D-H (every
   network), overall and by batch and stress level.

    .venv/bin/python results/gpu-general/wait_split.py results/bundles/h100 > results/gpu-general/wait_split.md
    # about 4 min; the ONNX files as the READMEs export them: /tmp/ckg, /tmp/gpuD .. /tmp/gpuH
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "results" / "cpu-general"), str(ROOT / "results" / "gpu-general")]

import composition_sets_study  # noqa: E402
import score_gpu  # noqa: E402

from hase_dagster.learn import predict  # noqa: E402
from hase_dagster.learn.bundles import load_bundle  # noqa: E402
from hase_dagster.learn.predict import Composition, Term  # noqa: E402
from hase_dagster.learn.reports import error_cell  # noqa: E402

TIMED = ROOT / "results" / "cpu-general"
# set: (timing folders, ONNX folder)
SETS: dict[str, tuple[list[Path], Path]] = {
    "gen": ([TIMED / "gpu", TIMED / "gpu-small"], Path("/tmp/ckg")),
    "D": ([TIMED / "gpu-setD"], Path("/tmp/gpuD")),
    "E": ([TIMED / "gpu-setE"], Path("/tmp/gpuE")),
    "F": ([TIMED / "gpu-setF"], Path("/tmp/gpuF")),
    "F, machine 2": ([TIMED / "gpu-setF" / "machine2"], Path("/tmp/gpuF")),
    "G": ([TIMED / "gpu-setG"], Path("/tmp/gpuG")),
    "H": ([TIMED / "gpu-setH"], Path("/tmp/gpuH")),
}
TRAINING_SETS = ("gen", "D", "E")
SCORED_SETS = ("D", "E", "F", "F, machine 2", "G", "H")
ONE_WAIT = Term("timeslice_wait", 0.0, float("inf"), 1.0, "the whole time-slicing wait, one coefficient")
SPLIT = ("timeslice_arrival", "timeslice_crossings")


@contextmanager
def one_wait_term() -> Iterator[None]:
    """The composition's terms with the wait as one term, as fitted up to 2026-11-24."""
    mean, p90 = predict.MEAN_TERMS, predict.P90_TERMS

    def swap(terms: tuple[Term, ...]) -> tuple[Term, ...]:
        kept = [t for t in terms if t.name != SPLIT[1]]
        return tuple(ONE_WAIT if t.name == SPLIT[0] else t for t in kept)

    predict.MEAN_TERMS, predict.P90_TERMS = swap(mean), swap(p90)
    try:
        yield
    finally:
        predict.MEAN_TERMS, predict.P90_TERMS = mean, p90


def points(bundle_dir: str) -> tuple[list[tuple], pd.DataFrame]:
    """The tables' training points, and every timed network's: set, model, batch, level, point."""
    bundle = load_bundle(bundle_dir)
    _, tables, loads = composition_sets_study.table_points(bundle.predictor.regressor)
    rows = [
        {"set": name, **row}
        for name, (folders, files) in SETS.items()
        for row in composition_sets_study.timed_points(bundle, score_gpu.measured(folders), files, loads)
    ]
    return tables, pd.DataFrame(rows)


def fit(tables: list[tuple], frame: pd.DataFrame, without: str, one_term: bool) -> Composition:
    """The composition of the tables and the generator's networks of the training sets less ``without``."""
    beside = frame[frame.set.isin(TRAINING_SETS) & (frame.set != without) & frame.model.str.startswith("chk_")]
    if one_term:
        with one_wait_term():
            return Composition.fit(tables + list(beside.point))
    return Composition.fit(tables + list(beside.point))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    args = parser.parse_args()
    tables, frame = points(args.bundle)
    scored = []
    for name in SCORED_SETS:
        part = frame[frame.set == name].copy()
        for label, one_term in (("one term", True), ("split", False)):
            composition = fit(tables, frame, name, one_term)
            part[label] = [composition.apply(s)[0] for s, _, _ in part.point]
        scored.append(part)
    cases = pd.concat(scored)
    cases["measured"] = [m for _, m, _ in cases.point]

    print("## Loaded over idle time, sets F-H (never in training), median by idle time\n")
    held = cases[cases.set.isin(["F", "F, machine 2", "G", "H"])]
    wide = held.pivot_table(index=["set", "model"], columns="level", values=["measured", "one term", "split"])
    rows = []
    for level in (0.5, 1.0):
        ratio = pd.DataFrame({k: wide[k][level] / wide[k][0.0] for k in ("measured", "one term", "split")})
        ratio["idle ms"] = pd.cut(wide["measured"][0.0], [0, 1, 2, 4, 8, 16, 1000])
        table = ratio.groupby("idle ms", observed=True).agg(
            networks=("measured", "size"), measured=("measured", "median"), one=("one term", "median"),
            split=("split", "median"),
        )  # fmt: skip
        rows.append(table.round(3).assign(stress=level).reset_index())
    print(pd.concat(rows).rename(columns={"one": "one term"}).to_markdown(index=False))

    for label in ("one term", "split"):
        cases[f"{label} error"] = (cases[label] / cases.measured - 1) * 100
    print("\n## Leave one set out: MAPE (within +-10%), one term -> split\n")
    by_set = cases.groupby("set", sort=False).apply(
        lambda p: pd.Series(
            {
                "cases": len(p),
                "all": f"{error_cell(p['one term error'])} -> {error_cell(p['split error'])}",
                "batch 16/64": f"{error_cell(p[p.batch >= 16]['one term error'])} -> "
                f"{error_cell(p[p.batch >= 16]['split error'])}",
            }
        ),
        include_groups=False,
    )
    print(by_set.to_markdown())
    print("\n## Pooled over the scored sets, by batch and stress level\n")
    cells = cases.groupby(["batch", "level"]).apply(
        lambda p: f"{error_cell(p['one term error'])} -> {error_cell(p['split error'])}", include_groups=False
    )
    print(cells.unstack().to_markdown())
    print(f"\nAll {len(cases)}: {error_cell(cases['one term error'])} -> {error_cell(cases['split error'])}")
    composition = fit(tables, frame, "", one_term=False)
    coefficients = {k: round(v, 3) for k, v in composition.mean_coefficients.items()}
    print(f"\nThe split fitted on every training set: {coefficients}, wait share {composition.wait_gpu_share}")


if __name__ == "__main__":
    main()
