"""Will the model fit? The predicted peak memory against what the device has free now: on a GPU
the free frame buffer Prometheus has from DCGM (``DCGM_FI_DEV_FB_FREE``, MiB), or NVML on this
machine when Prometheus does not have it; on a CPU the host's available memory. Co-tenants' memory
is what makes the difference on a shared device."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FB_FREE = "DCGM_FI_DEV_FB_FREE"
MIB = 2**20


def free_memory_now(ep: str, prometheus_url: str | None) -> tuple[float | None, str]:
    """MB free now on ``ep``'s device, and where that figure comes from (None where nothing says)."""
    if ep != "cuda":
        import psutil

        return psutil.virtual_memory().available / 1e6, "host available memory"
    if prometheus_url:
        from hase_dagster.core.errors import HaseError
        from hase_dagster.measure.prometheus import PrometheusClient

        try:
            series = PrometheusClient(prometheus_url, timeout_s=1.0).query(f"min({FB_FREE})")
        except HaseError:
            series = []
        if series:
            return float(series[0]["value"][1]) * MIB / 1e6, f"Prometheus {FB_FREE}"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            free = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free
        finally:
            pynvml.nvmlShutdown()
        return free / 1e6, "NVML on this machine"
    except Exception:  # no NVML, no GPU: nothing to compare with
        return None, "unknown"


def add_fit_warnings(predictions: Iterable[Any], ep: str, prometheus_url: str | None) -> None:
    """Append a warning to each prediction whose ``predicted_peak_memory_mb`` exceeds what is free now."""
    wanted = [p for p in predictions if getattr(p, "predicted_peak_memory_mb", None)]
    if not wanted:
        return
    free, source = free_memory_now(ep, prometheus_url)
    if free is None:
        return
    for prediction in wanted:
        if prediction.predicted_peak_memory_mb > free:
            prediction.warnings.append(
                f"predicted peak memory {prediction.predicted_peak_memory_mb:.0f} MB exceeds the {free:.0f} MB free "
                f"now on {ep} ({source}): the model may not fit beside what already runs there"
            )
