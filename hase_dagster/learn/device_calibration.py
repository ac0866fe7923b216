"""A bundle's kernel times carried to another device of its execution provider.

A bundle predicts for the device its tables were timed on. Another device of the same kind (an H200 for the H100's
bundle: the same processor, HBM 1.4x faster and a larger L2) runs the same kernels at other speeds, and not at one
speed: on 2026-11-28 the H200 ran the H100 tables' memory-bound kernels at 0.71-0.93x their H100 time and the
matrix products at 0.95-1.0x (``results/gpu-general/device-calibration/README.md``). ``hase predictor calibrate``
takes a few minutes of kernels the bundle's tables hold, timed on the new device (profile
``gpu_device_calibration``), and learns their time ratio from the source device's time, the FLOPs, the arithmetic
intensity and the stress level: the ratio :mod:`hase_dagster.learn.reference_rows` brings another machine's probe
rows to this one with. The calibrated regressor multiplies each kernel's prediction by the ratio its own kernel
gets. The composition (per-run host cost, dispatch, waits under load) stays the source device's: it takes the
calibrated kernel times as its inputs, but its host terms are the source host's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hase_dagster.learn.estimators import TREE_ARRAYS, predict_tree_arrays

CALIBRATION_TREES = "device_calibration.trees.npz"


def ratio_feature_matrix(
    mean_ms: np.ndarray, flops: np.ndarray, moved_bytes: np.ndarray, stress: np.ndarray
) -> np.ndarray:
    """Features of a kernel for its speed ratio between two devices: log time on the reference device, log FLOPs,
    log FLOPs per byte moved and the stress level. Small kernels are bound by per-launch costs, large ones by
    the device's memory or its arithmetic, and which one the intensity says.

    Args:
        mean_ms: the kernel's mean time on the reference device.
        flops: its FLOPs (negative or missing read as 0).
        moved_bytes: input, output and weight bytes together.
        stress: the stress level (0 idle to 1 full load).

    Returns:
        One row per kernel, four columns.
    """
    flops = np.clip(np.nan_to_num(np.asarray(flops, dtype=float)), 0, None)
    moved = np.clip(np.nan_to_num(np.asarray(moved_bytes, dtype=float)), 0, None)
    return np.column_stack(
        [
            np.log(np.asarray(mean_ms, dtype=float)),
            np.log1p(flops),
            np.log1p(flops) - np.log1p(moved),
            np.asarray(stress, dtype=float),
        ]
    )


@dataclass
class DeviceCalibration:
    """The time ratio of another device over a regressor's own, per kernel.

    Attributes:
        device: the device the calibrated predictions are for.
        source_device: the device the regressor was trained on.
        trees: the ratio's trees as arrays (:func:`ratio_feature_matrix` to the log ratio).
        level_loads: (stress level, the regressor's load field there) of the source device's benchmarks, by level:
            a prediction's load is read back as the stress level the ratio was learned at.
        pairs: the kernel timings both devices made, which the ratio was fitted on.
        median_ratio: their plain median ratio.
        cross_validated_error_pct: median absolute error of the ratio on kernels left out of the fit (5 folds).
    """

    device: str
    source_device: str
    trees: dict[str, np.ndarray]
    level_loads: list[tuple[float, float]]
    pairs: int
    median_ratio: float
    cross_validated_error_pct: float

    def stress_level(self, load_value: float) -> float:
        """The stress level a load field value stands for, read off the source device's levels (linear between
        them, clamped at the ends)."""
        levels, loads = zip(*sorted(self.level_loads, key=lambda pair: pair[1]), strict=True)
        return float(np.interp(load_value, loads, levels))

    def ratios(
        self, kernels: Sequence[Mapping[str, Any]], mean_ms: Sequence[np.ndarray], load_values: Sequence[float]
    ) -> list[np.ndarray]:
        """The ratio for each kernel (catalog-style records) under each load: ``mean_ms[i]`` holds the kernels'
        source-device means under the load whose load field reads ``load_values[i]``. The kernels' sizes are read
        once, and every load's rows walk the trees in one pass."""
        flops = np.array([float(k.get("flops") or 0) for k in kernels])
        moved = np.array(
            [
                float(k.get("input_bytes") or 0) + float(k.get("output_bytes") or 0) + float(k.get("weight_bytes") or 0)
                for k in kernels
            ]
        )
        n = len(kernels)
        features = ratio_feature_matrix(
            np.clip(np.concatenate(list(mean_ms)), 1e-6, None),
            np.tile(flops, len(load_values)),
            np.tile(moved, len(load_values)),
            np.repeat([self.stress_level(value) for value in load_values], n),
        )
        ratio = np.exp(predict_tree_arrays(self.trees, features))
        return [ratio[i * n : (i + 1) * n] for i in range(len(load_values))]

    def save(self, folder: Path) -> dict[str, Any]:
        """Write the trees into ``folder``; return the JSON entry that describes the calibration."""
        np.savez_compressed(folder / CALIBRATION_TREES, **self.trees)  # type: ignore[arg-type]  # stubs read **kwds as allow_pickle
        return {
            "device": self.device,
            "source_device": self.source_device,
            "trees": CALIBRATION_TREES,
            "level_loads": [[level, load] for level, load in self.level_loads],
            "pairs": self.pairs,
            "median_ratio": self.median_ratio,
            "cross_validated_error_pct": self.cross_validated_error_pct,
        }

    @classmethod
    def load(cls, entry: Mapping[str, Any], folder: Path) -> DeviceCalibration:
        """The calibration a :meth:`save` entry describes."""
        with np.load(folder / entry["trees"], allow_pickle=False) as data:
            trees = {k: data[k] for k in data.files}
        if set(trees) != set(TREE_ARRAYS):
            raise ValueError(f"{entry['trees']} holds {sorted(trees)}, not the arrays {list(TREE_ARRAYS)}")
        return cls(
            str(entry["device"]),
            str(entry["source_device"]),
            trees,
            [(float(level), float(load)) for level, load in entry["level_loads"]],
            int(entry["pairs"]),
            float(entry["median_ratio"]),
            float(entry["cross_validated_error_pct"]),
        )


__all__ = ["CALIBRATION_TREES", "DeviceCalibration", "ratio_feature_matrix"]
