"""The host core's loop reading and the predictions it scales (``hase predict --host-reading``, issue 11)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hase_dagster.core.errors import HaseError
from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.host_speed import (
    CPU_HOST_ELASTICITY,
    HOST_SHARE_GAIN,
    at_host_reading,
    host_bound_share,
    host_range,
    host_speed_factor,
    loop_reference,
)
from hase_dagster.learn.predict import Composition, ModelPrediction
from hase_dagster.measure.host_speed import host_loop_reading, interpreter, loop_ms
from hase_dagster.orchestration.cli import main


def _prediction(busy: float | None, ms: float = 2.0) -> ModelPrediction:
    return ModelPrediction("m.onnx", "cuda", 1, {}, "idle", ms, 1.5 * ms, ms, ms, {}, gpu_busy_share=busy)


def test_the_loop_reading_grows_with_the_work_it_times() -> None:
    # the fastest of five readings each: a preemption of one reading cannot invert twenty times the work
    short = min(loop_ms(2_000) for _ in range(5))
    long = min(loop_ms(40_000) for _ in range(5))
    assert 0 < short < long
    assert host_loop_reading(0.05) > 0
    assert interpreter().count(".") == 1


def test_the_factor_moves_only_the_host_bound_share() -> None:
    assert host_speed_factor(0.5, 0.665, 0.665) == pytest.approx(1.0)  # the reference state: unchanged
    assert host_speed_factor(1.0, 1.33, 0.665) == pytest.approx(1.0)  # all on the GPU: the host's speed is moot
    # a share of 1 - 0.9 = 0.1 of host time, counted HOST_SHARE_GAIN times: 0.3 of the run moves with the core
    assert host_bound_share(0.9) == pytest.approx(0.1 * HOST_SHARE_GAIN)
    assert host_speed_factor(0.9, 1.33, 0.665) == pytest.approx(1 + 0.1 * HOST_SHARE_GAIN)
    assert host_speed_factor(0.2, 1.33, 0.665) == pytest.approx(2.0)  # host-bound: capped at the whole run
    assert host_speed_factor(0.2, 0.3325, 0.665) == pytest.approx(0.5)  # a faster host: faster runs


def test_a_prediction_at_a_host_reading_scales_its_mean_and_p90_and_says_so() -> None:
    scaled = at_host_reading(_prediction(0.2), 1.33, 0.665, "3.12", "3.12")
    assert scaled.predicted_ms == pytest.approx(4.0) and scaled.p90_ms == pytest.approx(6.0)
    assert scaled.coverage["host_reading"]["factor"] == pytest.approx(2.0)
    assert not scaled.warnings
    other = at_host_reading(_prediction(0.2), 1.33, 0.665, "3.12", "3.11")
    assert any("Python 3.11" in w for w in other.warnings)
    # Under load, the wait for the co-tenant is GPU time: a run predicted 4 ms whose idle twin is 1 ms keeps the
    # idle run's host-bound milliseconds (share 1 at busy 0.2 and gain 3: all of 1 ms) and not four times them.
    loaded = replace(_prediction(0.2, ms=4.0), idle_predicted_ms=1.0)
    assert at_host_reading(loaded, 1.33, 0.665, "3.12", "3.12").predicted_ms == pytest.approx(4.0 + 1.0)
    assert host_bound_share(0.9, idle_share=0.5) == pytest.approx(0.05 * HOST_SHARE_GAIN)
    # A CPU run is the host's through and through: at idle it moves by the elasticity, under load not at all
    # (the reading then measures the co-tenant's contention, which the load terms price).
    cpu_idle = replace(_prediction(None), ep="cpu", load_source="idle (background of the stress 0.00 benchmarks)")
    assert at_host_reading(cpu_idle, 1.33, 0.665, "3.12", "3.12").predicted_ms == pytest.approx(
        2.0 * (1 + CPU_HOST_ELASTICITY)
    )
    cpu_loaded = at_host_reading(replace(cpu_idle, load_source="level=1.0"), 1.33, 0.665, "3.12", "3.12")
    assert cpu_loaded.predicted_ms == pytest.approx(2.0) and any("at idle only" in w for w in cpu_loaded.warnings)
    with pytest.raises(HaseError, match="has none"):
        at_host_reading(replace(_prediction(None), ep="rocm"), 1.0, 0.665, "3.12", "3.12")
    with pytest.raises(HaseError, match="positive"):
        at_host_reading(_prediction(0.5), 0.0, 0.665, "3.12", "3.12")


def test_the_host_range_spans_the_fast_and_slow_states_of_the_host_bound_share() -> None:
    # host-bound (share 1): the whole run moves with the core, from 0.56 / 0.665 to 0.87 / 0.665 of the prediction
    assert host_range(_prediction(0.2), 0.665, (0.56, 0.87)) == pytest.approx([2.0 * 0.56 / 0.665, 2.0 * 0.87 / 0.665])
    assert host_range(_prediction(1.0), 0.665, (0.56, 0.87)) == pytest.approx([2.0, 2.0])  # GPU-bound: its point
    low, high = host_range(_prediction(0.9), 0.665, (0.56, 0.87)) or [0.0, 0.0]
    assert low < 2.0 < high and high - low < 2.0 * (0.87 - 0.56) / 0.665  # part of the run: part of the span
    # under load only the idle run's host-bound milliseconds move: the range is narrower than the idle one's
    loaded = replace(_prediction(0.2, ms=4.0), idle_predicted_ms=1.0)
    assert host_range(loaded, 0.665, (0.56, 0.87)) == pytest.approx([4.0 - 0.105 / 0.665, 4.0 + 0.205 / 0.665])
    assert host_range(_prediction(None), 0.665, (0.56, 0.87)) is None  # another EP without a busy share
    # a CPU run at idle moves by the elasticity, a loaded one not at all (its range is its point)
    cpu_idle = replace(_prediction(None), ep="cpu", load_source="idle (background of the stress 0.00 benchmarks)")
    low, high = host_range(cpu_idle, 0.665, (0.56, 0.87)) or [0.0, 0.0]
    assert low == pytest.approx(2.0 * (1 + CPU_HOST_ELASTICITY * (0.56 / 0.665 - 1)))
    assert high == pytest.approx(2.0 * (1 + CPU_HOST_ELASTICITY * (0.87 / 0.665 - 1)))
    assert host_range(replace(cpu_idle, load_source="level=1.0"), 0.665, (0.56, 0.87)) == pytest.approx([2.0, 2.0])


def test_a_loop_reference_is_the_readings_median_and_their_deciles_within_them() -> None:
    reference, (fast, slow) = loop_reference([0.6, 0.7, 0.8, 0.9, 1.6])
    assert reference == pytest.approx(0.8) and fast == pytest.approx(0.64) and slow == pytest.approx(1.32)
    assert loop_reference([0.7]) == (0.7, (0.7, 0.7))  # one reading: no spread


@pytest.mark.parametrize("bad", [[0.9, 0.5], [0.0, 0.5], [0.5], ["fast", "slow"], 0.5])
def test_a_composition_with_a_bad_host_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="host_loop_range_ms"):
        Composition.from_json({"host_loop_ms": 0.6, "host_loop_range_ms": bad})
    assert Composition.from_json({"host_loop_range_ms": [0.5, 0.9]}).host_loop_range_ms == (0.5, 0.9)
    assert Composition.from_json({}).host_loop_range_ms is None  # a composition recorded before it: no range


def test_host_reference_and_host_reading_through_the_cli(
    resnet18_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped h200 bundle with a reference taken from readings, then predictions at readings around it: the
    reference state leaves a prediction as it was, a slower host makes it slower by the factor it reports."""
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    readings = tmp_path / "readings.json"
    readings.write_text(json.dumps([{"loop_mean_ms": ms} for ms in (0.6, 0.7, 0.8)]))
    out = tmp_path / "h200r"
    argv = ["predictor", "host-reference", "h200", "h200r", "--readings", str(readings), "--python", "3.12"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "host loop reference of 0.7 ms (fast and slow states 0.62-0.78 ms)" in capsys.readouterr().out
    composition = load_bundle(out).predictor.composition
    assert composition.host_loop_ms == pytest.approx(0.7)
    assert composition.host_loop_range_ms == pytest.approx((0.62, 0.78))  # the readings' deciles, within them

    def answer(*extra: str, load: str = "idle") -> dict:
        args = ["predict", str(resnet18_onnx), "--predictor", str(out), "--batch-size", "1", "--load", load, "--json"]
        assert main([*args, "--top", "0", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    idle_b1 = ["--load", "idle", "--batch-size", "1"]
    plain, same, slower = answer(), answer("--host-reading", "0.7"), answer("--host-reading", "1.05")
    assert same["predicted_ms"] == pytest.approx(plain["predicted_ms"])
    # the range holds the prediction at the reference, and a reading moves the point, not the host's range
    low, high = plain["host_range_ms"]
    assert low < plain["predicted_ms"] < high and slower["host_range_ms"] == pytest.approx([low, high])
    assert main(["predict", str(resnet18_onnx), "--predictor", str(out), *idle_b1, "--top", "0"]) == 0
    assert f"on the host's fast and slow states: {low:.3f}-{high:.3f} ms" in capsys.readouterr().out
    assert plain["idle_predicted_ms"] == pytest.approx(plain["predicted_ms"], rel=1e-3)
    factor = slower["coverage"]["host_reading"]["factor"]
    assert factor > 1.0 and slower["predicted_ms"] == pytest.approx(plain["predicted_ms"] * factor, rel=1e-3)
    # Under full load the same reading moves the run by the same host-bound ms at most: a smaller factor.
    loaded_plain, loaded = answer(load="level=1.0"), answer("--host-reading", "1.05", load="level=1.0")
    assert loaded_plain["predicted_ms"] > plain["predicted_ms"]
    added_ms = loaded["predicted_ms"] - loaded_plain["predicted_ms"]
    assert 0 < added_ms <= (slower["predicted_ms"] - plain["predicted_ms"]) * 1.001
    measured = answer("--host-reading", "measure")["coverage"]["host_reading"]
    assert measured["reading_ms"] > 0

    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    for args, message in (
        (["predictor", "host-reference", "h200", "x", "--readings", str(broken), "--python", "3.12"], "cannot read"),
        (["predictor", "host-reference", "h200", "x", "--readings", str(readings), "--python", "3"], "major.minor"),
        (["predict", str(resnet18_onnx), "--predictor", "h100", *idle_b1, "--host-reading", "1"], "no host"),
        (["predict", str(resnet18_onnx), "--predictor", str(out), *idle_b1, "--host-reading", "x"], "in ms"),
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("hase: error: ") and message in err and err.count("\n") == 1, err


def test_a_prometheus_host_reading_that_cannot_be_read_is_refused_in_one_line(
    resnet18_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--host-reading prometheus` reads the exporter's gauge through the configured Prometheus (a real exporter and
    Prometheus: tests/test_prometheus.py); a config pointing at a closed port gets the one-line error."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "hase.yaml"
    config.write_text(
        (Path(__file__).resolve().parents[1] / "hase.yaml")
        .read_text()
        .replace("http://127.0.0.1:9090", f"http://127.0.0.1:{port}")
    )
    monkeypatch.setenv("HASE_CONFIG", str(config))
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    readings = tmp_path / "readings.json"
    readings.write_text(json.dumps([{"loop_mean_ms": 0.7}]))
    out = tmp_path / "h200r"
    argv = ["predictor", "host-reference", "h200", "--readings", str(readings), "--python", "3.12", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    args = ["predict", str(resnet18_onnx), "--predictor", str(out), "--batch-size", "1", "--load", "idle"]
    assert main([*args, "--host-reading", "prometheus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hase: error: Prometheus at http://127.0.0.1:{port} does not answer"), err
    assert err.count("\n") == 1


def test_the_evaluation_counts_a_case_near_its_range_as_a_prediction_near_its_point() -> None:
    """Within 10% of a range means some point of it is within 10% of the measured mean: for a one-point range (a
    loaded CPU run) exactly the point's own test, so a prediction 10.5% slow is out either way."""
    import pandas as pd

    from hase_dagster.learn.evaluation import host_reading_markdown

    measured = pd.Series([1.0, 1.0, 1.0, 1.0])
    predicted = pd.Series([1.105, 1.095, 0.85, 0.85])
    cases = pd.DataFrame(
        {
            "setting": "never_seen",
            "stress_level": [1.0, 1.0, 0.0, 0.0],
            "host_loop_ms": 0.8,
            "measured_mean_ms": measured,
            "predicted_mean_ms": predicted,
            "predicted_at_reading_ms": predicted,
            "error_pct": (predicted / measured - 1) * 100,
            "host_range_low_ms": [1.105, 1.095, 0.80, 0.70],
            "host_range_high_ms": [1.105, 1.095, 0.88, 0.95],  # the last reaches 0.95: within 10% of 1.0
        }
    )
    table = host_reading_markdown(cases)
    idle, loaded = (line for line in table.splitlines() if line.startswith("| never_seen"))  # by stress level
    # loaded: one of two points within 10% (1.095), as predicted and by the range; idle: one of two ranges reaches 0.9
    assert loaded.split("|")[6].strip() == loaded.split("|")[9].strip() == "50"
    assert idle.split("|")[9].strip() == "50"
