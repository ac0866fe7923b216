import time

import pytest

from hase_dagster.measure.telemetry import GPU_FIELDS, HOST_FIELDS, TelemetrySampler, metric_source


def test_cpu_reports_configured_host_fields_and_no_gpu_values() -> None:
    source = metric_source("cpu", ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "HOST_CPU_UTIL", "HOST_LOAD_1M"])
    assert source.names == ("HOST_CPU_UTIL", "HOST_LOAD_1M")
    values = source.read()
    assert set(values) == {"HOST_CPU_UTIL", "HOST_LOAD_1M"}
    assert not set(values) & set(GPU_FIELDS)
    assert 0.0 <= values["HOST_CPU_UTIL"] <= 100.0


def test_unknown_field_is_named() -> None:
    with pytest.raises(ValueError, match="DCGM_FI_DEV_NOPE"):
        metric_source("cpu", ["DCGM_FI_DEV_NOPE"])


class _Counter:
    """A fake source whose value is the number of reads so far (next to the real one above)."""

    names = ("HOST_CPU_UTIL",)

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> dict[str, float]:
        self.reads += 1
        return {"HOST_CPU_UTIL": float(self.reads)}


def test_window_mean_averages_samples_inside_the_window() -> None:
    with TelemetrySampler(_Counter(), interval_s=0.02) as sampler:
        time.sleep(0.1)
        start = time.time_ns()
        time.sleep(0.2)
        end = time.time_ns()
        time.sleep(0.05)
        inside = [s.values["HOST_CPU_UTIL"] for s in sampler._samples if start <= s.time_ns <= end]
        assert len(inside) >= 3
        assert sampler.window_mean(start, end)["HOST_CPU_UTIL"] == pytest.approx(sum(inside) / len(inside))


def test_real_sampler_on_this_machine() -> None:
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        background = sampler.measure_idle_window(0.2)
    assert set(background) == set(HOST_FIELDS) and sampler.errors == []
