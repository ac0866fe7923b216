"""The compute floor: no kernel is predicted faster than its FLOPs at the device's measured peak.

Trees answer a shape outside their rows from the rows nearest it, and for a matrix product wider than any row they
hold that can be a rate no device reaches: on 2026-11-28 the ``h200`` bundle predicted 432-703 TFLOPS for 7 of 12
bias-free projections 2048 wide, which ran at 308-331 (``results/gpu-general/gemm-patch-probe``), where the H100's
measured TF32 peak is 410 and no row of its tables runs above 352. A kernel of F FLOPs in precision p takes at least
F / peak(p); this module turns a device profile's GEMM peaks (``hase device-profile``,
:func:`hase_dagster.measure.device_profile.peaks_of`) into that bound per kernel precision.

Which peak a precision gets:

- ``fp32`` on CUDA: the faster of FP32 and TF32. ORT's CUDA EP runs fp32 products and convolutions on TF32 tensor
  cores by default (the tables' fp32 GEMMs reach 352 TFLOPS, six times the FP32 peak of 54).
- ``fp16``: the FP16 peak (on CUDA the faster of FP16 and BF16: the same tensor cores).
- ``fp32`` on a CPU: the best FP32 GEMM on any number of threads.
- ``int8``: no floor. The profile's INT8 figure is ``torch._int_mm``'s 137 TOPS on the H100, far below what the
  tensor cores do, so it is no bound on ORT's INT8 kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hase_dagster.core.errors import HaseError
from hase_dagster.learn.features import kernel_precision

# Precisions the floor bounds, and the profile's GEMM figures each may run at, per EP.
_PEAK_SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    "cuda": {"fp32": ("fp32", "tf32"), "fp16": ("fp16", "bf16")},
    "cpu": {"fp32": ("fp32",)},
}


@dataclass(frozen=True)
class ComputePeaks:
    """A device's measured peak TFLOPS per kernel precision, and where they come from.

    Attributes:
        tflops: the peak per kernel precision (``fp32``, ``fp16``), as :func:`compute_peaks` maps them.
        device_name: the device the profile measured.
        measured: the profile's date.
    """

    tflops: dict[str, float]
    device_name: str = ""
    measured: str = ""

    def floor_ms(self, kernels: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The least time of each catalog-style kernel record in ms: its FLOPs over its precision's peak (0 for a
        precision without a peak or a kernel without FLOPs)."""
        out = np.zeros(len(kernels))
        for i, kernel in enumerate(kernels):
            peak = self.tflops.get(kernel_precision(kernel))
            flops = float(kernel.get("flops") or 0)
            if peak and flops > 0:
                out[i] = flops / (peak * 1e9)  # TFLOPS = 1e9 FLOPs per ms
        return out

    def to_json(self) -> dict[str, Any]:
        return {"tflops": dict(self.tflops), "device_name": self.device_name, "measured": self.measured}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ComputePeaks:
        return cls({str(k): float(v) for k, v in data["tflops"].items()}, str(data.get("device_name", "")),
                   str(data.get("measured", "")))  # fmt: skip


def compute_peaks(profile: Mapping[str, Any], ep: str) -> ComputePeaks:
    """The compute floor's peaks from a device profile document (``device_profile.json``) for kernels of ``ep``.

    Args:
        profile: a device profile (``hase_dagster.measure.device_profile.read_profile``).
        ep: the execution provider the kernels run on (``cuda`` or ``cpu``); the profile must be of that device.

    Returns:
        The peak per precision the profile measured a GEMM for.

    Raises:
        HaseError: the profile is of another device kind, or measured no GEMM the floor can use.
    """
    from hase_dagster.measure.device_profile import peaks_of

    if ep not in _PEAK_SOURCES:
        raise HaseError(f"no compute floor for the {ep} EP (it has one for {', '.join(_PEAK_SOURCES)})")
    if profile.get("device") != ep:
        raise HaseError(f"the device profile is of {profile.get('device')!r}, the kernels run on {ep}")
    measured = (profile.get("peaks") or peaks_of(dict(profile)))["tflops"]
    tflops = {
        precision: max(float(measured[name]) for name in names if name in measured)
        for precision, names in _PEAK_SOURCES[ep].items()
        if any(name in measured for name in names)
    }
    if not tflops:
        raise HaseError(f"the device profile of {profile.get('device_name', ep)} holds no GEMM peak the floor uses")
    return ComputePeaks(tflops, str(profile.get("device_name", "")), str(profile.get("date", "")))
