"""Training and loading the predictor (kernel regressor + model composition) from the warehouse."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hase_dagster.analysis.catalog import Kernel, kernel_from_dict
from hase_dagster.analysis.design_space import DESIGN_SPACE_FAMILY
from hase_dagster.core.documents import load_versioned_json
from hase_dagster.core.errors import HaseError
from hase_dagster.core.metrics import ALL_FIELDS, LOAD_FIELD
from hase_dagster.core.paths import DataPaths
from hase_dagster.learn.estimators import dumps
from hase_dagster.learn.graph_factors import GraphFactors
from hase_dagster.learn.host_speed import loop_reference
from hase_dagster.learn.model_timings import TimedModel
from hase_dagster.learn.predict import MIN_COMPOSITION_POINTS, Composition, Sums, model_sums
from hase_dagster.learn.regressor import LatencyRegressor, rows_without, train_regressor, training_rows
from hase_dagster.measure.host_speed import interpreter

if TYPE_CHECKING:  # loading a predictor (``hase predict --predictor``) imports neither pandas nor DuckDB
    import pandas as pd

    from warehouse.store import Warehouse

# Regressors of one warehouse, EP, kind and graph factors, by the architectures they were trained without.
RegressorMemo = dict[frozenset[str], LatencyRegressor]

# The predictor folder's format: data only (JSON, XGBoost's UBJSON, numpy arrays without pickle).
PREDICTOR_FORMAT = "hase-predictor"
PREDICTOR_FORMAT_VERSION = 2
PREDICTOR_FILE = "predictor.json"


@dataclass
class Predictor:
    """What `hase predict` loads: the kernel regressor and the model-level composition."""

    regressor: LatencyRegressor
    composition: Composition

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Write the predictor into ``folder`` (replaced whole: a half-written one never shows)."""
        folder = Path(folder)
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        document = {
            "format": PREDICTOR_FORMAT,
            "format_version": PREDICTOR_FORMAT_VERSION,
            "regressor": self.regressor.save(partial),
            "composition": self.composition.to_json(),
        }
        (partial / PREDICTOR_FILE).write_text(dumps(document))
        previous = folder.with_name(folder.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        if folder.exists():
            folder.replace(previous)
        partial.replace(folder)
        shutil.rmtree(previous, ignore_errors=True)
        return folder

    @staticmethod
    def load(folder: str | os.PathLike[str]) -> Predictor:
        """Read a predictor folder. Nothing in it is executed; a pickle from Hase before the folder
        format, a corrupt or foreign file, or another format version is refused with a HaseError."""
        folder = Path(folder)
        legacy = folder if folder.suffix == ".pkl" else folder.with_name("predictor.pkl")
        if folder.suffix == ".pkl" or (not folder.exists() and legacy.exists()):
            raise HaseError(
                f"{legacy} is a pickled predictor from an older Hase, which is no longer loaded (a pickle can run "
                "code): materialize latency_regressor again to write the folder format"
            )
        document_path = folder / PREDICTOR_FILE
        if not document_path.exists():
            raise HaseError(f"no trained predictor at {folder}: materialize latency_regressor first")
        document = load_versioned_json(
            document_path,
            PREDICTOR_FORMAT,
            PREDICTOR_FORMAT_VERSION,
            unreadable="{path} is not a readable predictor: {exc}",
            foreign="{path} does not hold a Hase predictor",
            other_version="{path} has predictor format version {found}, this Hase reads {version}: "
            "materialize latency_regressor again",
        )
        try:
            regressor = LatencyRegressor.load(document["regressor"], folder)
            composition = Composition.from_json(document["composition"])
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise HaseError(f"{folder} holds a damaged predictor: {exc}") from exc
        except Exception as exc:  # XGBoost raises its own error type for a damaged model file
            raise HaseError(f"{folder} holds a damaged predictor: {str(exc).splitlines()[0]}") from exc
        return Predictor(regressor, composition)


def predictor_path(root: Path, ep: str) -> Path:
    """The predictor folder of ``ep`` in the data directory ``root``."""
    return DataPaths(root).predictor(ep)


def kernel_from_row(row: dict[str, Any]) -> Kernel:
    """A catalog kernel rebuilt from a ``kernels`` table row."""
    return kernel_from_dict(
        row["variant_id"],
        row["ep"],
        {
            "order": row["kernel_order"],
            "node_name": row["node_name"],
            "family": row["family"],
            "op_type": row["op_type"],
            "domain": row["domain"],
            "absorbed_ops": json.loads(row["absorbed_ops_json"]),
            "absorbed_op_types": [],
            "attributes": json.loads(row["attributes_json"]),
            "inputs": json.loads(row["inputs_json"]),
            "outputs": json.loads(row["outputs_json"]),
            "flops": row["flops"],
            "input_bytes": row["input_bytes"],
            "output_bytes": row["output_bytes"],
            "weight_bytes": row["weight_bytes"],
            "in_graph_us": row["in_graph_us"],
        },
    )


def kernels_by_variant(store: Warehouse, ep: str) -> dict[str, list[Kernel]]:
    rows = store.query("SELECT * FROM kernels WHERE ep = ? ORDER BY variant_id, kernel_order", [ep])
    out: dict[str, list[Kernel]] = {}
    for row in rows.to_dict("records"):
        out.setdefault(row["variant_id"], []).append(kernel_from_row(row))
    return out


def measured_models(store: Warehouse, ep: str) -> pd.DataFrame:
    """Whole-model benchmark rows (ok) with each variant's architecture, family, input size,
    held-out flag, precision, the fp32 variant it was made from (``base_variant_id``, itself for
    fp32) and its top-1 agreement with that one (tables exported before the family column get it
    inferred from the name; before the precision columns, every variant is fp32)."""
    models = store.query(
        """SELECT b.* EXCLUDE (precision), f.model_name AS architecture, f.held_out, f.family,
                  coalesce(f.precision, b.precision, 'fp32') AS precision,
                  coalesce(f.base_variant_id, b.variant_id) AS base_variant_id, f.top1_agreement
           FROM model_benchmarks b JOIN model_files f USING (variant_id)
           WHERE b.ep = ? AND b.status = 'ok' ORDER BY b.variant_id, b.stress_level""",
        [ep],
    )
    models["family"] = family_or_inferred(models["architecture"], models["family"])
    return models


def family_or_inferred(names: pd.Series, families: pd.Series) -> pd.Series:
    """``families``, with the family inferred from the zoo name where a row has none (tables exported
    before the family column)."""
    from hase_dagster.core.config import infer_family  # here: a bundle's prediction reads no config

    return families.where(families.notna() & (families != ""), names.map(infer_family))


def architecture_families(store: Warehouse) -> dict[str, str]:
    """Each trained-on architecture (model files not held out) and its family."""
    files = store.query("SELECT DISTINCT model_name, family FROM model_files WHERE NOT held_out")
    return dict(zip(files["model_name"], family_or_inferred(files["model_name"], files["family"]), strict=True))


def networks(models: pd.DataFrame) -> pd.DataFrame:
    """``models`` (:func:`measured_models` rows) less design-space probes: a probe (a stem, a cell and
    a head) is a carrier of sampled kernels, no network a user runs, so it is no case of an evaluation
    and does not fit the composition."""
    return models[models["family"] != DESIGN_SPACE_FAMILY]


def background_load(row: dict[str, Any] | pd.Series) -> dict[str, float]:
    """The background metrics of a benchmark row, by field name (missing ones left out)."""
    import pandas as pd

    return {f: float(row[f"bg_{f}"]) for f in ALL_FIELDS if f"bg_{f}" in row and pd.notna(row[f"bg_{f}"])}


# The share of a host-clocked EP's idle kernel times below the runner's cost per call (noise: a kernel
# cannot take less than an empty call, but a timing can read a little under it).
HOST_FLOOR_QUANTILE = 0.01


def host_floor_ms(store: Warehouse, ep: str) -> float:
    """The kernel runner's own cost per call in the EP's host-clocked kernel times: the 1st percentile
    of its idle kernel times (the cheapest kernels, Flatten or a 1x1 reorder, are an empty call).
    0 where the kernels are device-clocked (GPU time of the kernel alone) or none is measured. An EP with
    any device-clocked kernel is device-clocked: its few host-clocked rows are kernels the device clock could
    not time (ORT's CUDA LSTM and GRU, ``measure.benchmark``), not the EP's way of timing, and their floor
    would be the cheapest of those, not an empty call.

    Args:
        store: the warehouse with the EP's kernel benchmarks.
        ep: the execution provider.

    Returns:
        The floor in ms.
    """
    if _has_device_clocked_kernels(store, ep):
        return 0.0
    rows = store.query(
        "SELECT mean_ms FROM kernel_benchmarks WHERE ep = ? AND status = 'ok' AND stress_level = 0 "
        "AND clock = 'host' AND mean_ms > 0",
        [ep],
    )
    if rows.empty:
        return 0.0
    return float(rows["mean_ms"].quantile(HOST_FLOOR_QUANTILE))


def host_clocked_families(store: Warehouse, ep: str) -> tuple[str, ...]:
    """The kernel families timed on the host clock on an EP whose other kernels are device-clocked: those the
    device clock could not time (``measure.benchmark``). Empty on a host-clocked EP (the CPU).

    Args:
        store: the warehouse with the EP's kernel benchmarks.
        ep: the execution provider.

    Returns:
        The families, sorted.
    """
    if not _has_device_clocked_kernels(store, ep):
        return ()
    rows = store.query(
        "SELECT DISTINCT family FROM kernel_benchmarks WHERE ep = ? AND status = 'ok' AND clock = 'host' "
        "ORDER BY family",
        [ep],
    )
    return tuple(rows["family"])


def _has_device_clocked_kernels(store: Warehouse, ep: str) -> bool:
    """Whether any of the EP's kernels was timed on the device clock (then the EP is device-clocked)."""
    return not store.query(
        "SELECT 1 FROM kernel_benchmarks WHERE ep = ? AND status = 'ok' AND clock LIKE 'device%' LIMIT 1", [ep]
    ).empty


def composition_points(
    regressor: LatencyRegressor,
    models: pd.DataFrame,
    kernels: dict[str, list[Kernel]],
    floor_ms: float = 0.0,
    wait_included_families: tuple[str, ...] = (),
) -> list[tuple[Sums, float, float]]:
    """Each measured model's sums (kernels less ``floor_ms``) with its measured mean and p90."""
    points = []
    for row in models.to_dict("records"):
        variant_kernels = kernels.get(row["variant_id"])
        if not variant_kernels:
            continue
        sums, _ = model_sums(regressor, variant_kernels, background_load(row), floor_ms, wait_included_families)
        points.append((sums, float(row["mean_ms"]), float(row["p90_ms"])))
    return points


def train_predictor(
    store: Warehouse,
    ep: str,
    exclude_architectures: Iterable[str] = (),
    kind: str | None = None,
    graph_factors: GraphFactors | None = None,
    timed_models: Sequence[TimedModel] = (),
    cross_fit: bool = False,
    regressors: RegressorMemo | None = None,
) -> Predictor:
    """Regressor on kernel benchmarks and composition on model benchmarks of ``ep``; with
    ``exclude_architectures``, nothing of those architectures is seen (no kernel instance any of
    them uses, no measurement of them). Held-out models (``held_out`` in the profile) are never seen;
    design-space probes train the regressor, not the composition. ``graph_factors`` (fitted
    elsewhere, on CUPTI's GPU time of whole networks) scale the regressor's kernel times inside a
    model, and the composition is fitted on the scaled times. ``timed_models`` (networks outside the
    warehouse, timed whole, their kernels detected statically: ``learn.model_timings``) are
    composition points beside the warehouse's models. With ``cross_fit``, the composition is fitted on
    out-of-sample kernel sums (:func:`fit_cross_fitted_composition`). ``regressors`` (a memo shared by calls on the
    same warehouse, EP, kind and graph factors) keeps each regressor by the architectures it was trained without, so
    that no set of exclusions is fitted twice."""
    excluded = set(exclude_architectures)
    models = measured_models(store, ep)
    models = models[~models["held_out"].astype(bool)]
    if excluded:
        models = models[~models["architecture"].isin(excluded)]
    regressor = _regressor_without(store, ep, kind, graph_factors, excluded, regressors)
    if cross_fit:
        composition = fit_cross_fitted_composition(store, ep, regressor, excluded, timed_models, models, regressors)
        return Predictor(regressor, composition)
    return Predictor(regressor, fit_composition(store, ep, regressor, timed_models, models))


def train_predictor_regressor(
    store: Warehouse,
    ep: str,
    kind: str | None = None,
    graph_factors: GraphFactors | None = None,
    exclude_architectures: Iterable[str] = (),
) -> LatencyRegressor:
    """The kernel regressor of :func:`train_predictor` (on every kernel benchmark row of ``ep`` but held-out
    models'), alone: also for a bundle that keeps another's composition.

    Args:
        store: the warehouse.
        ep: the execution provider.
        kind: the regressor kind (default: the comparison's pick).
        graph_factors: in-graph factors the regressor carries (``learn.graph_factors``).
        exclude_architectures: architectures none of whose kernel instances is seen.

    Returns:
        The trained regressor.
    """
    rows = training_rows(store, ep)
    excluded = set(exclude_architectures)
    if excluded:
        rows = rows_without(rows, excluded)
    regressor = train_regressor(rows.reset_index(drop=True), ep, kind=kind)
    regressor.graph_factors = graph_factors
    return regressor


def fit_composition(
    store: Warehouse,
    ep: str,
    regressor: LatencyRegressor,
    timed_models: Sequence[TimedModel] = (),
    models: pd.DataFrame | None = None,
) -> Composition:
    """The composition of ``regressor``'s kernel predictions into whole-model times, fitted on the
    warehouse's measured networks of ``ep`` and on ``timed_models``.

    Args:
        store: the warehouse.
        ep: the execution provider.
        regressor: the trained kernel regressor (its graph factors apply).
        timed_models: networks outside the warehouse, timed whole (``learn.model_timings``).
        models: the warehouse's measured networks to fit on (default: every one not held out).

    Returns:
        The fitted composition.
    """
    if models is None:
        models = measured_models(store, ep)
        models = models[~models["held_out"].astype(bool)]
    # Design-space probes train the kernels only: hundreds of them would outweigh the real networks
    # the composition is for (fitted on them too, every setting got worse: results/gpu-general).
    floor = host_floor_ms(store, ep)
    included = host_clocked_families(store, ep)
    points = composition_points(regressor, networks(models), kernels_by_variant(store, ep), floor, included)
    points += _timed_points(store, ep, regressor, timed_models, floor, included)
    return with_host_reference(Composition.fit(points, floor, included), models)


def fit_cross_fitted_composition(
    store: Warehouse,
    ep: str,
    regressor: LatencyRegressor,
    exclude_architectures: Iterable[str] = (),
    timed_models: Sequence[TimedModel] = (),
    models: pd.DataFrame | None = None,
    regressors: RegressorMemo | None = None,
) -> Composition:
    """The composition of :func:`fit_composition`, fitted on out-of-sample kernel sums: each training
    architecture's models are summed by a regressor of ``regressor``'s kind and graph factors trained without
    that architecture (and without ``exclude_architectures``), as a new network's kernels are summed by a
    regressor that never saw them. The in-sample sums of :func:`fit_composition` come from the regressor that
    saw those very kernels, and on the CPU the held-out models came out too fast (results/cpu/cross-fit).

    A model whose precision no other training architecture has is left out: its sums would come from a
    regressor that never saw that precision (the CPU's fp16 / int8 resnet18, +230%, pulled every coefficient to
    0.4x). ``timed_models`` are summed by ``regressor``: their networks are in no training row. With fewer out-of-sample
    points than a fit needs (a single training architecture), the in-sample fit.

    Args:
        store: the warehouse.
        ep: the execution provider.
        regressor: the trained kernel regressor (its kind and graph factors are used for the others).
        exclude_architectures: architectures none of whose kernel instances any of the regressors sees.
        timed_models: networks outside the warehouse, timed whole (``learn.model_timings``).
        models: the warehouse's measured networks to fit on (default: every one not held out).
        regressors: regressors already trained (of ``regressor``'s kind and graph factors, on ``store``), by the
            architectures they were trained without; those trained here are added.

    Returns:
        The fitted composition (``cross_fitted`` set).
    """
    if models is None:
        models = measured_models(store, ep)
        models = models[~models["held_out"].astype(bool)]
    excluded = set(exclude_architectures)
    floor = host_floor_ms(store, ep)
    included = host_clocked_families(store, ep)
    kernels = kernels_by_variant(store, ep)
    trained = networks(models)
    timed = _timed_points(store, ep, regressor, timed_models, floor, included)
    points = []
    for architecture in sorted(trained["architecture"].unique()):
        own = trained["architecture"] == architecture
        rows = trained[own & trained["precision"].isin(set(trained.loc[~own, "precision"]))]
        if rows.empty:
            continue
        without = _regressor_without(
            store, ep, regressor.kind, regressor.graph_factors, excluded | {architecture}, regressors
        )
        points += composition_points(without, rows, kernels, floor, included)
    if len(points) + len(timed) < MIN_COMPOSITION_POINTS:
        # One training architecture (or one per precision) leaves nothing out of sample to fit on: in-sample sums.
        points = composition_points(regressor, trained, kernels, floor, included)
    composition = replace(Composition.fit(points + timed, floor, included), cross_fitted=True)
    return with_host_reference(composition, models)


def _regressor_without(
    store: Warehouse,
    ep: str,
    kind: str | None,
    graph_factors: GraphFactors | None,
    excluded: set[str],
    regressors: RegressorMemo | None,
) -> LatencyRegressor:
    """:func:`train_predictor_regressor` without ``excluded``, taken from ``regressors`` where it is there (and kept
    there when trained)."""
    key = frozenset(excluded)
    if regressors is not None and key in regressors:
        return regressors[key]
    regressor = train_predictor_regressor(store, ep, kind, graph_factors, excluded)
    if regressors is not None:
        regressors[key] = regressor
    return regressor


def _timed_points(
    store: Warehouse,
    ep: str,
    regressor: LatencyRegressor,
    timed_models: Sequence[TimedModel],
    floor_ms: float,
    wait_included_families: tuple[str, ...],
) -> list[tuple[Sums, float, float]]:
    """Composition points of ``timed_models``, each at the load of its stress level."""
    loads = {level: load_at_level(store, ep, level) for level in sorted({t.stress_level for t in timed_models})}
    return [
        (
            model_sums(regressor, list(t.kernels), loads[t.stress_level], floor_ms, wait_included_families)[0],
            t.mean_ms,
            t.p90_ms,
        )
        for t in timed_models
    ]


def with_host_reference(composition: Composition, models: pd.DataFrame) -> Composition:
    """``composition`` with the host loop reading typical of the idle model timings it was fitted on (their
    median ``host_loop_ms``, read by this interpreter), which ``hase predict --host-reading`` scales from, and their
    10th-90th percentile range (each GPU prediction's ``host_range_ms``); unchanged where no idle row carries a
    reading (tables timed before it was read)."""
    if "host_loop_ms" not in models:
        return composition
    readings = models.loc[models["stress_level"] == 0, "host_loop_ms"].astype(float).dropna()
    if readings.empty:
        return composition
    reference, loop_range = loop_reference(readings.tolist())
    return replace(composition, host_loop_ms=reference, host_loop_python=interpreter(), host_loop_range_ms=loop_range)


def load_at_level(store: Warehouse, ep: str, level: float) -> dict[str, float]:
    """The background load at stress ``level``: the mean background of the whole-model benchmarks at
    that level (the rows the composition is fitted on), or of the kernel benchmarks where no model was
    benchmarked at it. Each field comes from the model rows where they measured it.

    The two differ: a kernel benchmark's background window also catches the benchmark's own kernels
    (on the H100, 7.3% GPU utilisation at idle against 0.06% for the model rows), and a prediction under
    that load added time-slicing and load-share terms no idle training model ever had.

    Args:
        store: the warehouse.
        ep: the execution provider.
        level: a benchmarked stress level.

    Returns:
        The mean background metrics, by field name.
    """
    rows = store.query("SELECT * FROM kernel_benchmarks WHERE ep = ? AND stress_level = ?", [ep, level])
    if rows.empty:
        levels = store.query("SELECT DISTINCT stress_level FROM kernel_benchmarks WHERE ep = ? ORDER BY 1", [ep])
        raise HaseError(
            f"stress level {level} was never benchmarked on {ep}; benchmarked: {levels['stress_level'].tolist()}"
        )
    models = store.query(
        "SELECT * FROM model_benchmarks WHERE ep = ? AND stress_level = ? AND status = 'ok'", [ep, level]
    )
    out = {}
    for f in ALL_FIELDS:
        column = f"bg_{f}"
        for frame in (models, rows):
            if column in frame and frame[column].notna().any():
                out[f] = float(frame[column].mean())
                break
    if LOAD_FIELD[ep] not in out:
        raise HaseError(f"the {ep} benchmarks at level {level} have no {LOAD_FIELD[ep]} background")
    return out
