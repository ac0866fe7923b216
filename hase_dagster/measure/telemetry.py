"""Accelerator telemetry named as DCGM fields, sampled in the background.

On NVIDIA GPUs NVML provides the ``DCGM_FI_DEV_*`` fields and, on Hopper, the GPM API provides the
``DCGM_FI_PROF_*`` ratios. Without NVML only host metrics are reported, under their own ``HOST_*``
names: a GPU field is never invented.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import psutil

from hase_dagster.core.metrics import ALL_FIELDS, GPU_FIELDS, HOST_FIELDS, LOAD_FIELD

__all__ = ["ALL_FIELDS", "GPU_FIELDS", "HOST_FIELDS", "LOAD_FIELD"]


class MetricSource(Protocol):
    """Something that reads a set of named metrics now."""

    names: tuple[str, ...]

    def read(self) -> dict[str, float]: ...


class HostMetrics:
    """CPU utilisation (% of all cores since the last read), 1-minute load, memory used."""

    def __init__(self, fields: Iterable[str] = HOST_FIELDS) -> None:
        self.names = tuple(f for f in fields if f in HOST_FIELDS)
        psutil.cpu_percent(interval=None)  # the first call only sets the reference point

    def read(self) -> dict[str, float]:
        values = {
            "HOST_CPU_UTIL": psutil.cpu_percent(interval=None),
            "HOST_LOAD_1M": os.getloadavg()[0],
            "HOST_MEM_USED_MB": psutil.virtual_memory().used / 2**20,
        }
        return {name: values[name] for name in self.names}


class NvmlMetrics:
    """DCGM-named GPU fields from NVML (and GPM ratios where the GPU supports them)."""

    _GPM_FIELDS = {
        "DCGM_FI_PROF_SM_ACTIVE": "NVML_GPM_METRIC_SM_UTIL",
        "DCGM_FI_PROF_SM_OCCUPANCY": "NVML_GPM_METRIC_SM_OCCUPANCY",
        "DCGM_FI_PROF_DRAM_ACTIVE": "NVML_GPM_METRIC_DRAM_BW_UTIL",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    }

    def __init__(self, fields: Iterable[str] = GPU_FIELDS, index: int = 0) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        wanted = [f for f in fields if f in GPU_FIELDS]
        self._gpm = [f for f in wanted if f in self._GPM_FIELDS and self._gpm_supported()]
        self.names = tuple(f for f in wanted if f not in self._GPM_FIELDS or f in self._gpm)
        self._previous_sample = self._safe_gpm_sample() if self._gpm else None

    def _gpm_supported(self) -> bool:
        try:
            return bool(self._nvml.nvmlGpmQueryDeviceSupport(self._handle).isSupportedDevice)
        except Exception:  # old driver or binding without GPM
            return False

    def _gpm_sample(self):  # -> nvmlGpmSample_t
        sample = self._nvml.nvmlGpmSampleAlloc()
        self._nvml.nvmlGpmSampleGet(self._handle, sample)
        return sample

    def _read_gpm(self) -> dict[str, float]:
        nvml = self._nvml
        if self._previous_sample is None:
            self._previous_sample = self._gpm_sample()
            return {}
        current = self._gpm_sample()
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._gpm)
        request.sample1 = self._previous_sample
        request.sample2 = current
        for i, field in enumerate(self._gpm):
            request.metrics[i].metricId = getattr(nvml, self._GPM_FIELDS[field])
        nvml.nvmlGpmMetricsGet(request)
        nvml.nvmlGpmSampleFree(self._previous_sample)
        self._previous_sample = current
        return {field: float(request.metrics[i].value) for i, field in enumerate(self._gpm)}

    def read(self) -> dict[str, float]:
        nvml, handle = self._nvml, self._handle
        values: dict[str, float] = {}
        if {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"} & set(self.names):
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            values["DCGM_FI_DEV_GPU_UTIL"] = float(rates.gpu)
            values["DCGM_FI_DEV_MEM_COPY_UTIL"] = float(rates.memory)
        if "DCGM_FI_DEV_FB_USED" in self.names:
            values["DCGM_FI_DEV_FB_USED"] = nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
        if "DCGM_FI_DEV_SM_CLOCK" in self.names:
            values["DCGM_FI_DEV_SM_CLOCK"] = float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        if "DCGM_FI_DEV_POWER_USAGE" in self.names:
            values["DCGM_FI_DEV_POWER_USAGE"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        if self._gpm:
            try:
                values.update(self._read_gpm())
            except nvml.NVMLError:
                # GPM serves one client at a time (e.g. a DCGM agent): report these fields as
                # missing for this sample rather than invent them.
                self.close()
                self._previous_sample = self._safe_gpm_sample()
        return {name: values[name] for name in self.names if name in values}

    def _safe_gpm_sample(self):  # -> nvmlGpmSample_t | None
        try:
            return self._gpm_sample()
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        """Free the GPM sample so the next client may use GPM."""
        if self._previous_sample is not None:
            try:
                self._nvml.nvmlGpmSampleFree(self._previous_sample)
            except self._nvml.NVMLError:
                pass
            self._previous_sample = None


class CombinedMetrics:
    """Several sources read together."""

    def __init__(self, sources: list[MetricSource]) -> None:
        self.sources = sources
        self.names = tuple(name for source in sources for name in source.names)

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for source in self.sources:
            values.update(source.read())
        return values

    def close(self) -> None:
        for source in self.sources:
            close = getattr(source, "close", None)
            if close is not None:
                close()


def metric_source(device: str, fields: Iterable[str] = ALL_FIELDS) -> CombinedMetrics:
    """The metrics of ``fields`` this machine can really provide for ``device``.

    GPU fields come only from NVML on a ``cuda`` device; on a CPU they are left out, not faked.
    """
    fields = list(fields)
    unknown = [f for f in fields if f not in ALL_FIELDS]
    if unknown:
        raise ValueError(f"unknown telemetry fields {unknown}; known: {list(ALL_FIELDS)}")
    sources: list[MetricSource] = []
    if device == "cuda" and any(f in GPU_FIELDS for f in fields):
        sources.append(NvmlMetrics(fields))
    if any(f in HOST_FIELDS for f in fields):
        sources.append(HostMetrics(fields))
    return CombinedMetrics(sources)


@dataclass(frozen=True)
class Sample:
    time_ns: int
    values: dict[str, float]


class TelemetrySampler:
    """Reads a metric source every ``interval_s`` on a background thread and keeps the samples."""

    def __init__(self, source: MetricSource, interval_s: float = 0.1, keep: int = 100_000) -> None:
        self.source = source
        self.interval_s = interval_s
        self.keep = keep
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        # NVML's GPM samples are freed and replaced on every read: reads must not interleave (two
        # threads reading at once double-freed a sample and crashed the process on the H100).
        self._read_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    @property
    def names(self) -> tuple[str, ...]:
        return self.source.names

    def sample_now(self) -> Sample:
        with self._read_lock:
            sample = Sample(time.time_ns(), self.source.read())
        with self._lock:
            self._samples.append(sample)
            del self._samples[: -self.keep]
        return sample

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample_now()
            except Exception as exc:  # a failed read loses one sample, never the sampler
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> TelemetrySampler:
        self.sample_now()
        self._thread = threading.Thread(target=self._loop, name="hase-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def window_mean(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """Mean of each metric over samples in [start_ns, end_ns]; the first sample after the
        window when none fell inside (NVML averages over its own sample period anyway)."""
        with self._lock:
            inside = [s for s in self._samples if start_ns <= s.time_ns <= end_ns]
            if not inside:
                after = [s for s in self._samples if s.time_ns > end_ns]
                inside = after[:1]
        if not inside and (time.time_ns() - end_ns) / 1e9 < 10 * self.interval_s:
            inside = [self.sample_now()]
        names = {name for s in inside for name in s.values}
        return {
            name: sum(s.values[name] for s in inside if name in s.values) / sum(name in s.values for s in inside)
            for name in sorted(names)
        }

    def measure_idle_window(self, seconds: float) -> dict[str, float]:
        """Sample for ``seconds`` while the caller runs nothing: the background load."""
        start = time.time_ns()
        time.sleep(seconds)
        return self.window_mean(start, time.time_ns())
