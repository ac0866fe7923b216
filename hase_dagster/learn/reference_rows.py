"""Design-space kernel rows timed on another machine, brought to this machine's speed.

A profile that names ``reference_tables`` (exported warehouse tables, e.g. ``results/cpu/tables``)
trains its regressor on its own kernel rows plus the design-space probes of those tables: operator,
recurrent, image-to-image and transformer probes that a 10-minute run cannot time itself. Another
machine runs at another speed, and not one speed: between two VMs of 2026-11-24 and 2026-11-26 the
convolutions ran 2.2x faster and the 5-us reorders 1.4x (``results/cpu/reference-rows/README.md``). So
the ratio between the machines is learned from the kernels both timed (the same instance, batch size
and stress level), as a function of the reference time, the FLOPs, the arithmetic intensity and the
stress level, and each probe row is scaled by the ratio its own kernel gets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hase_dagster.core.errors import HaseError
from hase_dagster.learn.device_calibration import DeviceCalibration, ratio_feature_matrix
from hase_dagster.learn.estimators import predict_tree_arrays, tree_arrays
from hase_dagster.learn.regressor import training_rows
from hase_dagster.learn.reports import import_tables

# The timing columns a ratio scales (a standard deviation scales with its mean).
TIME_COLUMNS = ("mean_ms", "median_ms", "p90_ms", "min_ms", "std_ms")
# Below this many shared timings the ratio is not known well enough to scale anything.
MIN_PAIRS = 50
PAIR_KEYS = ["instance_id", "batch_size", "stress_level", "ep"]


class CalibrationError(HaseError):
    """Too few kernel timings shared with the reference tables to learn the speed ratio (another ORT
    build fingerprints other kernels, another profile times other models)."""


@dataclass
class SpeedCalibration:
    """This machine's time over the reference machine's, per kernel row.

    Attributes:
        booster: XGBoost trees from :func:`ratio_features` to the log of the ratio.
        pairs: the shared timings it was fitted on.
        median_ratio: the plain median ratio over those pairs.
        cross_validated_error_pct: median absolute error of the ratio on instances left out of the fit
            (5 folds by instance), in %: how far a probe row's scaled time can be trusted.
    """

    booster: Any
    pairs: int
    median_ratio: float
    cross_validated_error_pct: float

    def describe(self, rows: pd.DataFrame) -> str:
        """One line on the calibrated ``rows`` (:func:`calibrated_reference_rows`) and this calibration."""
        kernels = rows["instance_id"].nunique() if len(rows) else 0
        return (
            f"{len(rows)} reference rows of {kernels} kernels; speed ratio {self.median_ratio:.2f} (median of "
            f"{self.pairs} shared timings), cross-validated error {self.cross_validated_error_pct:.1f}%"
        )

    def ratios(self, rows: pd.DataFrame) -> np.ndarray:
        """The ratio for each reference row of ``rows`` (kernel benchmark columns)."""
        return np.exp(np.asarray(self.booster.inplace_predict(ratio_features(rows)), dtype=float))


def ratio_features(rows: pd.DataFrame) -> np.ndarray:
    """Features of a reference row for its speed ratio (:func:`ratio_feature_matrix`): log reference time, log
    FLOPs, log FLOPs per byte moved and the stress level. Small kernels are bound by the runner's per-call cost and
    move with the machine's clock and caches, large ones with its vector units."""
    moved = rows["input_bytes"].fillna(0) + rows["output_bytes"].fillna(0) + rows["weight_bytes"].fillna(0)
    return ratio_feature_matrix(
        rows["mean_ms"].to_numpy(dtype=float),
        rows["flops"].fillna(0).to_numpy(dtype=float),
        moved.to_numpy(dtype=float),
        rows["stress_level"].to_numpy(dtype=float),
    )


def _fit_booster(x: np.ndarray, y: np.ndarray) -> Any:
    from xgboost import XGBRegressor

    # The median, not the mean, of the log ratio: a few kernels caught by a burst of the stressor
    # are 2-7x off either way.
    model = XGBRegressor(
        objective="reg:absoluteerror",
        n_estimators=200,
        max_depth=3,
        learning_rate=0.05,
        min_child_weight=20,
        n_jobs=1,
        random_state=0,
    )
    model.fit(x, y)
    return model.get_booster()


def shared_timings(local: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Kernel timings both machines made: the reference row's columns, ``local_ms`` and ``log_ratio``.

    Args:
        local: this warehouse's kernel benchmark rows.
        reference: the reference tables' kernel benchmark rows.

    Returns:
        One row per (instance, batch size, stress level, EP) timed ``ok`` on both.
    """
    ok_local = local[(local["status"] == "ok") & (local["mean_ms"] > 0)]
    ok_reference = reference[(reference["status"] == "ok") & (reference["mean_ms"] > 0)]
    pairs = ok_reference.merge(
        ok_local[[*PAIR_KEYS, "mean_ms"]].rename(columns={"mean_ms": "local_ms"}), on=PAIR_KEYS, how="inner"
    )
    pairs["log_ratio"] = np.log(pairs["local_ms"] / pairs["mean_ms"])
    return pairs


def fit_calibration(pairs: pd.DataFrame, folds: int = 5) -> SpeedCalibration:
    """Fit the speed ratio on shared timings and measure it on instances the fit did not see.

    Args:
        pairs: :func:`shared_timings`.
        folds: instance folds of the cross-validated error.

    Returns:
        The calibration.

    Raises:
        CalibrationError: fewer than :data:`MIN_PAIRS` shared timings.
    """
    if len(pairs) < MIN_PAIRS:
        raise CalibrationError(
            f"the reference tables share {len(pairs)} kernel timings with this warehouse; "
            f"at least {MIN_PAIRS} are needed to learn the speed ratio between the machines"
        )
    x, y = ratio_features(pairs), pairs["log_ratio"].to_numpy()
    instances = pairs["instance_id"].unique()
    fold_of = dict(zip(instances, np.random.default_rng(0).permutation(len(instances)) % folds, strict=True))
    fold = pairs["instance_id"].map(fold_of).to_numpy()
    errors = []
    for k in range(folds):
        test = fold == k
        if test.any() and (~test).sum() >= MIN_PAIRS:
            predicted = _fit_booster(x[~test], y[~test]).inplace_predict(x[test])
            errors.append(np.abs(np.exp(y[test] - predicted) - 1))
    error = float(np.median(np.concatenate(errors)) * 100) if errors else float("nan")
    return SpeedCalibration(_fit_booster(x, y), len(pairs), float(np.exp(np.median(y))), error)


def device_calibration(
    local: pd.DataFrame,
    reference: pd.DataFrame,
    device: str,
    source_device: str,
    level_loads: list[tuple[float, float]],
) -> DeviceCalibration:
    """The ratio of ``local``'s device over ``reference``'s, learned from the kernels both timed, as a
    regressor's :class:`DeviceCalibration`.

    Args:
        local: the new device's kernel benchmark rows (one EP).
        reference: the kernel benchmark rows the regressor was trained on (that EP).
        device: the new device's name.
        source_device: the regressor's device.
        level_loads: (stress level, the regressor's load field there) on the source device.

    Returns:
        The calibration, its trees as arrays that predict what XGBoost predicts.

    Raises:
        CalibrationError: fewer than :data:`MIN_PAIRS` shared timings.
    """
    pairs = shared_timings(local, reference)
    calibration = fit_calibration(pairs)
    trees = tree_arrays(calibration.booster)
    x = ratio_features(pairs)
    expected = np.asarray(calibration.booster.inplace_predict(x), dtype=float)
    if not np.allclose(predict_tree_arrays(trees, x), expected, rtol=1e-6, atol=1e-6):
        raise HaseError("the speed ratio's trees as arrays predict differently from XGBoost")
    return DeviceCalibration(
        device,
        source_device,
        trees,
        level_loads,
        calibration.pairs,
        calibration.median_ratio,
        calibration.cross_validated_error_pct,
    )


def probe_training_rows(reference: Any, ep: str) -> pd.DataFrame:
    """The reference tables' training rows of design-space probes' kernels, as
    :func:`hase_dagster.learn.regressor.training_rows` gives them, each row named after its probes
    only (``architecture``): a reference zoo model is no architecture of this warehouse.

    Args:
        reference: a warehouse filled from the reference tables.
        ep: the execution provider.
    """
    rows = training_rows(reference, ep)
    rows = rows[rows["sample_architectures"].notna()].copy()
    rows["architecture"] = rows["sample_architectures"]
    return rows


def calibrated_reference_rows(
    local: pd.DataFrame, reference_rows: pd.DataFrame, reference_benchmarks: pd.DataFrame
) -> tuple[pd.DataFrame, SpeedCalibration]:
    """Reference probe rows at this machine's speed, less every instance this warehouse timed itself
    (its own rows win).

    Args:
        local: this warehouse's kernel benchmark rows (one EP).
        reference_rows: :func:`probe_training_rows` of the reference.
        reference_benchmarks: every kernel benchmark row of the reference (one EP), the probes' and
            the zoo's: the shared timings the ratio is learned from.

    Returns:
        The scaled rows (with ``speed_ratio``) and the calibration.
    """
    calibration = fit_calibration(shared_timings(local, reference_benchmarks))
    rows = reference_rows[~reference_rows["instance_id"].isin(set(local["instance_id"]))].copy()
    if rows.empty:
        rows["speed_ratio"] = pd.Series(dtype=float)
        return rows, calibration
    ratio = calibration.ratios(rows)
    for column in TIME_COLUMNS:
        if column in rows:
            rows[column] = rows[column].astype(float) * ratio
    rows["speed_ratio"] = ratio
    return rows, calibration


def refresh_reference_rows(
    store: Any, ep: str, reference_tables: str | os.PathLike[str] | None, scratch: str | os.PathLike[str]
) -> tuple[pd.DataFrame, SpeedCalibration | None]:
    """Replace ``store``'s reference rows of ``ep`` (table ``reference_kernel_rows``) with the
    calibrated probe rows of ``reference_tables``, or with none when it is None.

    Args:
        store: this machine's warehouse, its kernel benchmarks done.
        ep: the execution provider.
        reference_tables: a folder of exported tables, or None.
        scratch: a DuckDB file the reference tables are imported into (replaced).

    Returns:
        The rows written and the calibration (None without reference tables).

    Raises:
        CalibrationError: too few shared timings (the table is left empty).
        HaseError: ``reference_tables`` is no folder of exported tables.
    """
    # Rows of an earlier calibration go first: a failed one must not leave them to be trained on.
    store.replace_partition("reference_kernel_rows", {"ep": ep}, pd.DataFrame())
    if reference_tables is None:
        return pd.DataFrame(), None
    reference = import_tables(resolve_reference_tables(reference_tables), scratch)
    query = "SELECT * FROM kernel_benchmarks WHERE ep = ?"
    rows, calibration = calibrated_reference_rows(
        store.query(query, [ep]), probe_training_rows(reference, ep), reference.query(query, [ep])
    )
    store.replace_partition("reference_kernel_rows", {"ep": ep}, rows)
    return rows, calibration


def resolve_reference_tables(path: str | os.PathLike[str]) -> Path:
    """``path`` as a folder of exported tables, or a one-line error naming what is missing."""
    folder = Path(path)
    needed = ("kernel_benchmarks", "kernels", "model_files")
    missing = [name for name in needed if not (folder / f"{name}.parquet").is_file()]
    if missing:
        raise HaseError(f"reference tables {folder} lack {', '.join(f'{m}.parquet' for m in missing)}")
    return folder


__all__ = [
    "CalibrationError",
    "MIN_PAIRS",
    "SpeedCalibration",
    "calibrated_reference_rows",
    "device_calibration",
    "fit_calibration",
    "probe_training_rows",
    "refresh_reference_rows",
    "ratio_features",
    "resolve_reference_tables",
    "shared_timings",
]
