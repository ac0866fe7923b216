"""The time-slicing wait model (learn.timeslice) and its composition term."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hase_dagster.learn.predict import Composition, Sums, time_slicing_of
from hase_dagster.learn.timeslice import TimeSlicing, fit_time_slicing

SLICING = TimeSlicing(burst_ms=1.0, slice_ms=2.0, period_ms=20.0, saturated_util=100.0)


@pytest.mark.parametrize("gpu_ms", [0.1, 0.9, 1.5, 3.0, 9.0])
def test_a_saturating_co_tenant_costs_a_burst_per_slice_boundary(gpu_ms):
    times = SLICING.run_times(gpu_ms, busy_share=1.0)
    expected = gpu_ms + 1.0 * (1 + math.floor(gpu_ms / 2.0))
    assert np.allclose(times, expected)


def test_no_co_tenant_no_wait_and_more_load_more_wait():
    assert SLICING.expected_wait(2.0, 0.0) == (0.0, 0.0)
    waits = [SLICING.expected_wait(0.3, util)[0] for util in (25, 50, 75, 100)]
    assert all(a < b for a, b in zip(waits, waits[1:]))
    # Short runs in the co-tenant's idle part wait nothing: at half load the mean is well under half
    # of the saturated wait (runs are counted, not time).
    assert waits[1] < 0.5 * waits[3]


def test_busy_share_reads_utilisation_against_a_saturated_reading():
    slicing = TimeSlicing(saturated_util=95.0)
    assert slicing.busy_share(95.0) == 1.0
    assert slicing.busy_share(47.5) == pytest.approx(0.5)
    assert slicing.busy_share(float("nan")) == 0.0


def test_fit_recovers_burst_and_slice():
    idle = np.array([0.1, 0.5, 0.9, 1.7, 3.3, 6.0, 9.8])
    loaded = idle + 0.8 * (1 + np.floor(idle / 1.5))
    fitted = fit_time_slicing(zip(idle, loaded))
    assert fitted.burst_ms == pytest.approx(0.8)
    assert fitted.slice_ms == pytest.approx(1.5)
    with pytest.raises(ValueError):
        fit_time_slicing([])


def test_committed_wait_study_gives_the_default_slicing():
    study = json.loads((Path(__file__).parents[1] / "results/gpu-general/wait_study.json").read_text())
    idle = {c["model"]: c["mean_ms"] for c in study["cells"] if c["level"] == 0}
    saturated = [(idle[c["model"]], c["mean_ms"]) for c in study["cells"] if c["level"] == 1.0]
    fitted = fit_time_slicing(saturated)
    default = TimeSlicing()
    assert abs(fitted.burst_ms - default.burst_ms) <= 0.1
    assert abs(fitted.slice_ms - default.slice_ms) <= 0.5


def test_composition_learns_the_wait_of_small_models_under_load():
    slicing = TimeSlicing()
    points = []
    for idle in (0.1, 0.3, 1.0, 2.5, 6.0, 12.0):
        for util in (0.0, 45.0, 95.0):
            sums = Sums(0, idle, idle, 20, util, idle_mean_ms=idle, time_slicing=slicing)
            truth = idle + slicing.expected_wait(idle, util)[0]
            points.append((sums, truth, truth))
    fitted = Composition.fit(points)
    small = Sums(0, 0.09, 0.09, 10, 95.0, idle_mean_ms=0.09, time_slicing=slicing)
    # A 0.09 ms model pays about a whole burst under full load: 1.07 ms measured on the H100.
    assert fitted.apply(small)[0] == pytest.approx(0.09 + slicing.expected_wait(0.09, 95.0)[0], rel=0.05)
    assert fitted.apply(small)[0] > 0.9


def test_the_cpu_ep_has_no_time_slicing_term():
    assert time_slicing_of("cpu") is None
    values = Sums(0, 1.0, 1.0, 5, 90.0, idle_mean_ms=1.0).values(0.0)
    assert values["timeslice_arrival"] == values["timeslice_crossings"] == values["timeslice_wait"] == 0.0
    assert time_slicing_of("cuda") == TimeSlicing()


def test_composition_charges_the_wait_on_the_gpu_share_the_timings_show():
    # Runs whose in-graph GPU time is 0.7 of their standalone idle sum wait for the slice boundaries of
    # that time: a fit with the share among its candidates finds it and predicts across a boundary.
    slicing = TimeSlicing()
    share = 0.7
    points = []
    for idle in (0.4, 1.2, 2.2, 2.8, 4.0, 5.5, 7.5, 11.0):
        for util in (0.0, 45.0, 95.0):
            sums = Sums(0, idle, idle, 20, util, idle_mean_ms=idle, time_slicing=slicing)
            truth = idle + slicing.expected_wait(share * idle, util)[0]
            points.append((sums, truth, truth))
    fitted = Composition.fit(points)
    assert fitted.wait_gpu_share == share
    # 2.4 ms of kernels is 1.68 ms in the graph: one burst at full load, where the raw sum would cross a slice.
    run = Sums(0, 2.4, 2.4, 20, 95.0, idle_mean_ms=2.4, time_slicing=slicing)
    assert fitted.apply(run)[0] == pytest.approx(2.4 + slicing.expected_wait(share * 2.4, 95.0)[0], rel=0.03)
    assert Composition.from_json(fitted.to_json()).wait_gpu_share == share


def test_a_composition_saved_before_the_wait_share_charges_the_whole_idle_sum():
    saved = Composition.fit([(Sums(0, i, i, 5, 0.0, idle_mean_ms=i), i, i) for i in (1.0, 2.0, 3.0)]).to_json()
    saved.pop("wait_gpu_share")
    assert Composition.from_json(saved).wait_gpu_share == 1.0


def test_host_clocked_compositions_keep_the_whole_idle_sum():
    # The CPU EP has no time slicing: there is no wait to place, so no share is chosen.
    points = [(Sums(0, i, i, 5, u, idle_mean_ms=i), i * (1 + u / 200), i) for i in (1.0, 2.0, 4.0) for u in (0.0, 90.0)]
    assert Composition.fit(points).wait_gpu_share == 1.0
    assert Composition.fit(points, host_floor_ms=0.01).wait_gpu_share == 1.0


@pytest.mark.parametrize("gpu_ms", [0.03, 0.5, 1.6, 3.0, 9.0])
def test_the_wait_splits_into_arrival_and_slice_crossings(gpu_ms):
    sums = Sums(0, gpu_ms, gpu_ms, 20, 95.0, idle_mean_ms=gpu_ms, time_slicing=TimeSlicing())
    values = sums.values(0.0)
    assert values["timeslice_arrival"] + values["timeslice_crossings"] == pytest.approx(values["timeslice_wait"])
    # A run shorter than a slice crosses no boundary; a long one crosses one per slice of its GPU time.
    if gpu_ms < TimeSlicing().slice_ms:
        assert values["timeslice_crossings"] == pytest.approx(0.0, abs=0.02)
    else:
        boundaries = math.floor(gpu_ms / TimeSlicing().slice_ms)
        assert values["timeslice_crossings"] == pytest.approx(boundaries * TimeSlicing().burst_ms, rel=0.1)


def test_composition_fits_arrival_and_crossings_apart():
    # Short runs hide half their arrival wait, long ones pay every crossing: one coefficient on the
    # whole wait cannot serve both, two find each.
    slicing = TimeSlicing()
    points = []
    for idle in (0.2, 0.5, 0.9, 1.4, 2.5, 4.0, 6.0, 9.0, 14.0, 20.0):
        for util in (0.0, 45.0, 95.0):
            sums = Sums(0, idle, idle, 20, util, idle_mean_ms=idle, time_slicing=slicing)
            values = sums.values(0.0)
            truth = idle + 0.5 * values["timeslice_arrival"] + 1.0 * values["timeslice_crossings"]
            points.append((sums, truth, truth))
    fitted = Composition.fit(points)
    assert fitted.wait_gpu_share == 1.0
    assert fitted.mean_coefficients["timeslice_arrival"] == pytest.approx(0.5, abs=0.05)
    assert fitted.mean_coefficients["timeslice_crossings"] == pytest.approx(1.0, abs=0.05)
    long_run = Sums(0, 12.0, 12.0, 20, 95.0, idle_mean_ms=12.0, time_slicing=slicing)
    values = long_run.values(0.0)
    truth = 12.0 + 0.5 * values["timeslice_arrival"] + values["timeslice_crossings"]
    assert fitted.apply(long_run)[0] == pytest.approx(truth, rel=0.02)


def test_a_composition_saved_with_one_wait_coefficient_predicts_as_before():
    slicing = TimeSlicing()
    saved = Composition(
        {"idle_kernels": 1.0, "timeslice_wait": 0.43},
        {"idle_kernels": 1.0, "timeslice_wait": 0.43},
        fitted_on=10,
    )
    loaded = Composition.from_json(json.loads(json.dumps(saved.to_json())))
    run = Sums(0, 6.0, 6.0, 20, 95.0, idle_mean_ms=6.0, time_slicing=slicing)
    assert loaded.apply(run)[0] == pytest.approx(6.0 + 0.43 * slicing.expected_wait(6.0, 95.0)[0])
