"""Per-kernel latency regressors: a FLOPs baseline, RandomForest, XGBoost and a roofline base with
an XGBoost residual (``estimators``), compared by MAPE; the kind with the lowest error on held-out
architectures ships.

Targets are learned in log space (kernel latencies span four orders of magnitude): the median (the
primary target, compared and checked), the mean and the p90. The median is primary because a
kernel's mean on a shared device carries the run's scheduling luck (on the 2-core CPU VM the same
kernel's mean differs by ~20% between two runs minutes apart); model-level composition calibrates
sums of kernel predictions to the measured model mean. Two held-out evaluations: random rows, and
whole model architectures (no kernel instance of the test architecture in training).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hase_dagster.analysis.design_space import DESIGN_SPACE_FAMILY
from hase_dagster.core.errors import HaseError
from hase_dagster.core.metrics import LOAD_FIELD
from hase_dagster.learn.compute_floor import ComputePeaks
from hase_dagster.learn.device_calibration import DeviceCalibration
from hase_dagster.learn.estimators import (
    KINDS,
    LOG_MS_RANGE,
    Estimator,
    FeatureLayout,
    load_estimator,
    make_estimator,
)
from hase_dagster.learn.features import (
    PRECISION_FEATURES,
    as_matrix,
    feature_frame,
    feature_matrix,
    kernel_family,
    numeric_columns,
)
from hase_dagster.learn.graph_factors import GraphFactors

if TYPE_CHECKING:  # imported where training needs it: a prediction from a saved regressor needs no pandas
    import pandas as pd

MIN_TRAINING_ROWS = 20
TARGETS = ("median_ms", "mean_ms", "p90_ms")
PRIMARY_TARGET = "median_ms"


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(np.mean(np.abs(predicted - measured) / measured) * 100)


def within(predicted: np.ndarray, measured: np.ndarray, tolerance: float = 0.10) -> float:
    """Share of predictions within +-tolerance of the measurement, in percent."""
    return float(np.mean(np.abs(predicted - measured) / measured <= tolerance) * 100)


@dataclass
class LatencyRegressor:
    """Trained estimators (log ms) for each target, with the feature schema they need."""

    kind: str
    ep: str
    load_fields: list[str]
    families: list[str]
    ops: list[str]
    models: dict[str, Estimator]
    layout: FeatureLayout
    metrics: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    batch_sizes: list[int] = field(default_factory=list)
    # In-graph over standalone GPU time per kernel category (learn.graph_factors); None: standalone times.
    graph_factors: GraphFactors | None = None
    # Another device's time over this regressor's, per kernel (learn.device_calibration); None: the trained device.
    device_calibration: DeviceCalibration | None = None
    # The predicted device's measured peaks (learn.compute_floor): no kernel under its FLOPs at them; None: no floor.
    compute_peaks: ComputePeaks | None = None

    @property
    def numeric_columns(self) -> list[str]:
        """The numeric feature columns the estimators were trained on, in matrix order (a regressor
        saved before the precision features has fewer)."""
        return sorted(self.layout.columns, key=self.layout.columns.__getitem__)

    def matrix(self, features: pd.DataFrame) -> np.ndarray:
        return as_matrix(features, self.families, self.ops, self.load_fields, self.numeric_columns)

    def predict(self, features: pd.DataFrame) -> dict[str, np.ndarray]:
        """Milliseconds per target for each row of a feature frame (p90 never below median or mean), on the device
        the regressor was trained on (a ``device_calibration`` applies in :meth:`predict_kernels`); the frame
        read the operands in the layout's order (``feature_frame(..., operand_order=layout.operand_order)``)."""
        return self.predict_matrix(self.matrix(features))

    def predict_kernels(
        self,
        kernels: Sequence[Mapping[str, Any]],
        loads: Sequence[Mapping[str, float]],
        floor_ms: np.ndarray | None = None,
    ) -> list[dict[str, np.ndarray]]:
        """Milliseconds per target for catalog-style kernel records under each of ``loads`` (one
        mapping of targets to per-kernel arrays per load), in one pass of the estimators; with a
        ``device_calibration``, each kernel's times are the calibrated device's (x its ratio); with ``compute_peaks``,
        none under its FLOPs at the device's peak (``floor_ms``: that floor per kernel where the caller has it,
        ``compute_peaks.floor_ms(kernels)``)."""
        x = feature_matrix(
            kernels, loads, self.families, self.ops, self.load_fields, self.numeric_columns, self.layout.operand_order,
            self.layout.family_variants,
        )  # fmt: skip
        predicted = self.predict_matrix(x)
        n = len(kernels)
        out = [{t: values[i * n : (i + 1) * n] for t, values in predicted.items()} for i in range(len(loads))]
        if self.device_calibration is not None and n:
            # The ratio was learned on mean times; a regressor without a mean target reads its first one.
            means = [targets.get("mean_ms", next(iter(targets.values()))) for targets in out]
            values = [float(load[self.load_fields[0]]) for load in loads]
            for targets, ratio in zip(out, self.device_calibration.ratios(kernels, means, values), strict=True):
                for target in targets:
                    targets[target] = targets[target] * ratio
        if self.compute_peaks is not None and n:
            floor = self.compute_peaks.floor_ms(kernels) if floor_ms is None else floor_ms
            for targets in out:
                for target in targets:
                    targets[target] = np.maximum(targets[target], floor)
        return out

    def predict_matrix(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Milliseconds per target for each row of a feature matrix (p90 never below median or mean)."""
        out = {t: np.exp(np.clip(m.predict(x), *LOG_MS_RANGE)) for t, m in self.models.items()}
        if "p90_ms" in out:
            out["p90_ms"] = np.maximum.reduce([out[t] for t in out])
        return out

    def knows(self, family: str, kernel: Mapping[str, Any] | None = None) -> bool:
        """Whether the regressor trained on ``family`` (with ``kernel``, a catalog-style record: on the family its
        features give that kernel, features.kernel_family)."""
        if kernel is not None and self.layout.family_variants:
            family = kernel_family(kernel)
        return family in self.families

    def save(self, folder: Path) -> dict[str, Any]:
        """Write the estimators into ``folder``; return the JSON entry that describes them."""
        return {
            "kind": self.kind,
            "ep": self.ep,
            "load_fields": self.load_fields,
            "families": self.families,
            "ops": self.ops,
            "batch_sizes": self.batch_sizes,
            "layout": self.layout.to_json(),
            "metrics": self.metrics,
            "versions": self.versions,
            "targets": {target: model.save(folder, target) for target, model in self.models.items()},
            "graph_factors": self.graph_factors.to_json() if self.graph_factors else None,
            "device_calibration": self.device_calibration.save(folder) if self.device_calibration else None,
            "compute_peaks": self.compute_peaks.to_json() if self.compute_peaks else None,
        }

    @classmethod
    def load(cls, entry: dict[str, Any], folder: Path) -> LatencyRegressor:
        """The regressor a :meth:`save` entry describes (data only: nothing in the folder runs)."""
        layout = FeatureLayout.from_json(entry["layout"])
        models = {target: load_estimator(layout, saved, folder) for target, saved in entry["targets"].items()}
        return cls(
            entry["kind"],
            entry["ep"],
            list(entry["load_fields"]),
            list(entry["families"]),
            list(entry["ops"]),
            models,
            layout,
            dict(entry.get("metrics", {})),
            dict(entry.get("versions", {})),
            [int(b) for b in entry.get("batch_sizes", [])],
            GraphFactors.from_json(entry["graph_factors"]) if entry.get("graph_factors") else None,
            DeviceCalibration.load(entry["device_calibration"], folder) if entry.get("device_calibration") else None,
            ComputePeaks.from_json(entry["compute_peaks"]) if entry.get("compute_peaks") else None,
        )


def library_versions() -> dict[str, str]:
    import pandas as pd
    import sklearn
    import xgboost

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "scikit-learn": sklearn.__version__,
        "xgboost": xgboost.__version__,
    }


def load_fields_for(ep: str, rows: pd.DataFrame) -> list[str]:
    """The background metrics used as features: the device's load field (always)."""
    field_name = LOAD_FIELD[ep]
    if f"bg_{field_name}" not in rows or rows[f"bg_{field_name}"].isna().any():
        raise HaseError(f"training rows lack the background load {field_name}")
    return [field_name]


def _train(
    kind: str,
    frame: pd.DataFrame,
    rows: pd.DataFrame,
    ep: str,
    load_fields: list[str],
    targets: tuple[str, ...] = TARGETS,
) -> LatencyRegressor:
    families = sorted(frame["family"].unique())
    ops = sorted(frame["op"].unique())
    # The precision features only where the rows hold more than fp32 models: on fp32 tables they
    # would only change which columns the trees sample, so fp32 predictors stay as they were.
    beyond_fp32 = names_in(rows, "model_precisions") - {"fp32"}
    numeric = [c for c in numeric_columns(load_fields) if beyond_fp32 or c not in PRECISION_FEATURES]
    x = as_matrix(frame, families, ops, load_fields, numeric)
    layout = FeatureLayout({name: i for i, name in enumerate(numeric)}, len(numeric), families, ops)
    models: dict[str, Estimator] = {}
    for target in targets:
        models[target] = make_estimator(kind, layout, ep).fit(x, np.log(rows[target].to_numpy()))
    return LatencyRegressor(
        kind,
        ep,
        load_fields,
        families,
        ops,
        models,
        layout,
        batch_sizes=sorted(int(b) for b in rows["batch_size"].unique()),
    )


def _scores(
    regressor: LatencyRegressor, frame: pd.DataFrame, rows: pd.DataFrame, target: str = PRIMARY_TARGET
) -> dict[str, Any]:
    return row_scores(regressor.predict(frame)[target], rows, target)


def row_scores(mean: np.ndarray, rows: pd.DataFrame, target: str = PRIMARY_TARGET) -> dict[str, Any]:
    """MAPE and share within +-10% of ``mean`` against the rows' ``target``: overall, per family, per stress level."""
    measured = rows[target].to_numpy()
    per_family = {
        family: round(
            mape(mean[(rows["family"] == family).to_numpy()], measured[(rows["family"] == family).to_numpy()]), 2
        )
        for family in sorted(rows["family"].unique())
    }
    per_level = {
        f"{level:.2f}": round(
            mape(
                mean[(rows["stress_level"] == level).to_numpy()], measured[(rows["stress_level"] == level).to_numpy()]
            ),
            2,
        )
        for level in sorted(rows["stress_level"].unique())
    }
    return {
        "mape": round(mape(mean, measured), 2),
        "within_10": round(within(mean, measured), 1),
        "rows": len(rows),
        "per_family": per_family,
        "per_stress_level": per_level,
    }


def held_out_row_predictions(
    kind: str, frame: pd.DataFrame, rows: pd.DataFrame, ep: str, load_fields: list[str], folds: int = 5, seed: int = 0
) -> dict[str, np.ndarray]:
    """Every row predicted once by a ``kind`` regressor fitted on the other folds (k-fold, folds drawn from ``seed``).

    Args:
        kind: the estimator kind (``KINDS``).
        frame: the rows' features (``feature_frame``).
        rows: the training rows, ``ok`` status, index 0..n-1.
        ep: their execution provider.
        load_fields: the load fields the features carry.
        folds: how many folds.
        seed: the fold assignment's seed.

    Returns:
        Each target's held-out prediction, in the rows' order.
    """
    fold_of = np.random.default_rng(seed).integers(0, folds, len(rows))
    held_out = {t: np.zeros(len(rows)) for t in TARGETS}
    for fold in range(folds):
        test = fold_of == fold
        predicted = _train(kind, frame[~test], rows[~test], ep, load_fields).predict(frame[test])
        for target in TARGETS:
            held_out[target][test] = predicted[target]
    return held_out


def train_regressor(
    rows: pd.DataFrame, ep: str, folds: int = 5, seed: int = 0, kind: str | None = None
) -> LatencyRegressor:
    """Compare the kinds on held-out rows (k-fold: every row predicted once by a model that did not
    see it, so the figure does not hang on one lucky split) and on held-out architectures; return the
    one best on held-out architectures, refitted on all rows. With ``kind`` given, skip the
    comparison and fit that kind on all rows.

    ``rows``: ``status = 'ok'`` kernel benchmark rows with catalog fields, ``bg_*`` load and an
    ``architecture`` column (the zoo model the instance belongs to; an instance of several models
    belongs to each, comma-separated).
    """
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    if len(rows) < MIN_TRAINING_ROWS:
        raise HaseError(
            f"only {len(rows)} measured kernel rows for {ep}; need {MIN_TRAINING_ROWS}: run kernel_benchmarks"
        )
    load_fields = load_fields_for(ep, rows)
    frame = feature_frame(rows, rows, load_fields)
    if kind is not None:
        fitted = _train(kind, frame, rows, ep, load_fields)
        fitted.metrics = {"best": kind, "primary_target": PRIMARY_TARGET, "training_rows": len(rows)}
        fitted.versions = library_versions()
        return fitted
    comparisons: dict[str, Any] = {}
    for kind in KINDS:
        held_out = held_out_row_predictions(kind, frame, rows, ep, load_fields, folds, seed)
        comparisons[kind] = {
            "held_out_rows": row_scores(held_out[PRIMARY_TARGET], rows),
            "held_out_rows_by_target": {t: row_scores(held_out[t], rows, t)["mape"] for t in TARGETS},
            "held_out_architectures": _held_out_architectures(kind, frame, rows, ep, load_fields),
        }
    best = min(KINDS, key=lambda k: _generalization_mape(comparisons[k]))
    final = _train(best, frame, rows, ep, load_fields)
    final.metrics = {
        "best": best,
        "primary_target": PRIMARY_TARGET,
        "comparison": comparisons,
        "training_rows": len(rows),
    }
    final.versions = library_versions()
    return final


def _generalization_mape(comparison: dict[str, Any]) -> float:
    """What a kind is chosen by: its MAPE on architectures it never saw (the users' case), or on
    held-out rows when there is only one architecture to learn from."""
    overall = comparison["held_out_architectures"].get("overall")
    return float(overall["mape"] if overall else comparison["held_out_rows"]["mape"])


def _held_out_architectures(
    kind: str, frame: pd.DataFrame, rows: pd.DataFrame, ep: str, load_fields: list[str]
) -> dict[str, Any]:
    """Leave one architecture out: train on instances that appear in no variant of it. Design-space
    probes (``sample_architectures``) are always trained on: they are no architecture a user brings,
    and dozens of them would decide the choice of kind.

    Rows that only variants of a precision no other architecture has use (``model_precisions``: the
    only int8 model's QLinearConv kernels, the only fp16 model's Casts and NCHW convolutions) are left
    out of the scores and counted (``unseen_precision_rows``): leaving their architecture out leaves
    their precision out too, which asks another question than a new architecture, and would choose the
    kind by how it extrapolates to a precision it never saw.
    """
    import pandas as pd

    members = rows["architecture"].str.split(",")
    samples = names_in(rows, "sample_architectures")
    model_precisions = (
        rows["model_precisions"].fillna("fp32").str.split(",")
        if "model_precisions" in rows
        else pd.Series([["fp32"]] * len(rows), index=rows.index)
    )
    results: dict[str, Any] = {}
    predicted_all, measured_all = [], []
    for architecture in sorted({a for names in members for a in names} - samples):
        in_test = members.apply(lambda names, a=architecture: a in names).to_numpy()
        if in_test.all() or (~in_test).sum() < MIN_TRAINING_ROWS:
            continue
        trained = {p for precisions in model_precisions[~in_test] for p in precisions}
        unseen = in_test & model_precisions.apply(lambda precisions, t=trained: not set(precisions) & t).to_numpy()
        scored = in_test & ~unseen
        if not scored.any():
            continue
        regressor = _train(kind, frame[~in_test], rows[~in_test], ep, load_fields, (PRIMARY_TARGET,))
        scores = _scores(regressor, frame[scored], rows[scored])
        results[architecture] = {k: scores[k] for k in ("mape", "within_10", "rows")}
        if unseen.any():
            results[architecture]["unseen_precision_rows"] = int(unseen.sum())
        predicted_all.append(regressor.predict(frame[scored])[PRIMARY_TARGET])
        measured_all.append(rows.loc[scored, PRIMARY_TARGET].to_numpy())
    if predicted_all:
        predicted, measured = np.concatenate(predicted_all), np.concatenate(measured_all)
        results["overall"] = {
            "mape": round(mape(predicted, measured), 2),
            "within_10": round(within(predicted, measured), 1),
            "rows": len(measured),
        }
    return results


def names_in(rows: pd.DataFrame, column: str) -> set[str]:
    """Every name in ``rows[column]``, a column of comma-separated names (none where it is missing)."""
    return set(",".join(rows[column].dropna()).split(",")) - {""} if column in rows else set()


def rows_without(rows: pd.DataFrame, architectures: Iterable[str]) -> pd.DataFrame:
    """``rows`` less every row of an instance any of ``architectures`` uses (``architecture`` is
    comma-separated): nothing of them is seen."""
    excluded = set(architectures)
    return rows[~rows["architecture"].str.split(",").apply(lambda names: bool(excluded & set(names)))]


def training_rows(store: Any, ep: str) -> pd.DataFrame:
    """Kernel benchmark rows of ``ep`` joined with the catalog, the architectures using each instance
    (``sample_architectures``: those of them that are design-space probes) and those variants'
    precisions (``model_precisions``). Held-out models do not count: an instance only they use is no
    training row. Then the reference probe rows (``reference_kernel_rows``, at this machine's speed:
    :mod:`hase_dagster.learn.reference_rows`) of every instance this warehouse did not time itself."""
    return store.query(
        f"""WITH arch AS (
               SELECT k.instance_id, k.ep, k.batch_size, string_agg(DISTINCT f.model_name, ',') AS architecture,
                      string_agg(DISTINCT f.model_name, ',') FILTER (WHERE f.family = '{DESIGN_SPACE_FAMILY}')
                          AS sample_architectures,
                      string_agg(DISTINCT coalesce(f.precision, 'fp32'), ',') AS model_precisions,
                      any_value(k.absorbed_ops_json) AS absorbed_ops_json
               FROM kernels k JOIN model_files f USING (variant_id) WHERE NOT f.held_out GROUP BY ALL)
           SELECT b.*, arch.architecture, arch.sample_architectures, arch.model_precisions, arch.absorbed_ops_json
           FROM kernel_benchmarks b JOIN arch USING (instance_id, ep, batch_size)
           WHERE b.ep = ? AND b.status = 'ok' AND b.mean_ms > 0
           UNION ALL BY NAME
           SELECT * EXCLUDE (speed_ratio) FROM reference_kernel_rows r
           WHERE r.ep = ? AND r.status = 'ok' AND r.mean_ms > 0
             AND r.instance_id NOT IN (SELECT instance_id FROM kernel_benchmarks WHERE ep = ?)""",
        [ep, ep, ep],
    )
