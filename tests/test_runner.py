"""The kernel runner on real kernels in ORT."""

import gc
import weakref
from pathlib import Path

import onnx
import pytest

from hase_dagster.analysis.analyze import analyze_model
from hase_dagster.analysis.kernel_models import write_kernel_model
from hase_dagster.core.config import TimingOptions
from hase_dagster.core.errors import ModelLoadError
from hase_dagster.measure.runner import ModelRunner, summarize, time_model
from hase_dagster.orchestration.cli import main


@pytest.fixture(scope="module")
def relu_like_kernel(resnet18_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("runner")
    analysis = analyze_model(resnet18_onnx, "cpu", tmp / "opt.onnx")
    kernel = next(k for k in analysis.kernels if k.family == "MaxPool")
    return write_kernel_model(onnx.load(str(analysis.optimized.optimized_path)), kernel, tmp, "cpu")


def test_loop_count_is_honoured_and_window_ordered(relu_like_kernel: Path) -> None:
    timing = time_model(relu_like_kernel, "cpu", TimingOptions(warmup=3, min_loops=17, max_loops=17, min_seconds=0))
    assert timing.n == 17 and timing.warmup == 3 and timing.ep == "cpu"
    assert timing.start_ns < timing.end_ns
    assert (timing.end_ns - timing.start_ns) / 1e6 >= timing.mean_ms * timing.n * 0.99
    assert timing.min_ms <= timing.median_ms <= timing.p90_ms
    assert timing.intra_op_num_threads == 1 and timing.cudnn_conv_algo_search is None


def test_the_host_core_is_read_around_the_samples_and_never_between(
    relu_like_kernel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from hase_dagster.measure import runner as runner_module
    from hase_dagster.measure.host_speed import host_loop_reading

    # Each reading's span on the wall clock the window is stamped with: a reading inside the window would add its
    # time to the samples'.
    spans: list[tuple[int, int]] = []

    def recorded_reading(*args: float, **kwargs: float) -> float:
        started = time.time_ns()
        value = host_loop_reading(*args, **kwargs)
        spans.append((started, time.time_ns()))
        return value

    monkeypatch.setattr(runner_module, "host_loop_reading", recorded_reading)
    timing = time_model(relu_like_kernel, "cpu", TimingOptions(warmup=2, min_loops=20, max_loops=20, min_seconds=0))
    reading = host_loop_reading(0.1)
    assert timing.host_loop_ms is not None and 0.25 * reading < timing.host_loop_ms < 4 * reading
    assert len(spans) == 2
    (_, before_end), (after_start, _) = spans
    assert before_end <= timing.start_ns and timing.end_ns <= after_start
    assert timing.warmup == 2


def test_warmup_off_is_recorded(relu_like_kernel: Path) -> None:
    runner = ModelRunner(relu_like_kernel, "cpu")
    cold = runner.time(TimingOptions(warmup=0, min_loops=5, max_loops=5, min_seconds=0))
    assert cold.warmup == 0 and cold.n == 5


def test_warmup_runs_on_for_its_seconds(relu_like_kernel: Path) -> None:
    runner = ModelRunner(relu_like_kernel, "cpu")
    counted = runner.time(TimingOptions(warmup=1, min_loops=2, max_loops=2, min_seconds=0))
    timed = runner.time(TimingOptions(warmup=1, warmup_seconds=0.2, min_loops=2, max_loops=2, min_seconds=0))
    # The recorded count is the runs really made: one when only counted, more once they must last 0.2 s.
    assert counted.warmup == 1
    assert timed.warmup > 1


def test_loop_stops_at_precision_target(relu_like_kernel: Path) -> None:
    loose = time_model(
        relu_like_kernel, "cpu", TimingOptions(warmup=2, min_loops=5, max_loops=500, min_seconds=0, target_rel_ci=0.5)
    )
    assert 5 <= loose.n < 500 and loose.rel_ci <= 0.5


def test_a_deleted_runner_frees_its_session_at_once(relu_like_kernel: Path) -> None:
    # Without a reference cycle the session goes with the last reference, not at the next full
    # garbage collection: a benchmark loop must not time each model beside its predecessors' sessions.
    gc.disable()
    try:
        runner = ModelRunner(relu_like_kernel, "cpu")
        runner.sample()
        session = weakref.ref(runner.session)
        del runner
        assert session() is None
    finally:
        gc.enable()


def test_summary_statistics() -> None:
    stats = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert stats["mean_ms"] == 4.0 and stats["median_ms"] == 3.0 and stats["min_ms"] == 1.0
    assert stats["p90_ms"] == pytest.approx(7.6)
    assert stats["std_ms"] == pytest.approx(3.536, abs=1e-3)


def test_device_clock_is_refused_off_cuda(relu_like_kernel: Path) -> None:
    with pytest.raises(ValueError, match="device clock times CUDA runs"):
        ModelRunner(relu_like_kernel, "cpu", clock="device")
    runner = ModelRunner(relu_like_kernel, "cpu")
    with pytest.raises(ValueError, match="built for the host clock"):
        runner.time(TimingOptions(min_loops=2, max_loops=2, clock="device"))
    assert runner.time(TimingOptions(warmup=0, min_loops=2, max_loops=2, min_seconds=0)).clock == "host"


def test_loop_budget_is_wall_time(relu_like_kernel: Path) -> None:
    timing = time_model(
        relu_like_kernel,
        "cpu",
        TimingOptions(warmup=0, min_loops=1, max_loops=100_000, min_seconds=0.05, max_seconds=0.05, target_rel_ci=1e-9),
    )
    assert 0.05 <= (timing.end_ns - timing.start_ns) / 1e9 < 1.0 and timing.n < 100_000


@pytest.mark.skipif(
    not __import__("hase_dagster.core.ort_runtime", fromlist=["x"]).cuda_is_usable(), reason="needs a CUDA GPU"
)
def test_device_clock_agrees_with_the_host_clock_on_a_gpu(relu_like_kernel: Path) -> None:
    config = dict(warmup=5, min_loops=30, max_loops=30, min_seconds=0)
    device = time_model(relu_like_kernel, "cuda", TimingOptions(**config, clock="device"))
    host = time_model(relu_like_kernel, "cuda", TimingOptions(**config))
    # GPU time excludes the launch and sync that the host clock pays
    assert device.clock == "device" and 0 < device.median_ms < host.median_ms


def test_clock_disagreements_allow_small_kernels_20_us() -> None:
    from hase_dagster.measure.cupti import clock_disagreements

    rows = [
        {"path": "/k/small.onnx", "device_clock_median_ms": 0.036, "device_ms": 0.024},  # 50% but 12 us apart
        {"path": "/k/big.onnx", "device_clock_median_ms": 1.30, "device_ms": 1.00},  # 30% and 300 us apart
        {"path": "/k/ok.onnx", "device_clock_median_ms": 1.05, "device_ms": 1.00},
    ]
    assert [line.split(":")[0] for line in clock_disagreements(rows, 0.15)] == ["big.onnx"]


def test_broken_model_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "kernel_broken.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ModelLoadError, match="kernel_broken.onnx"):
        time_model(bad, "cpu")


def test_run_kernel_cli_json(relu_like_kernel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["run-kernel", "--model", str(relu_like_kernel), "--no-warmup", "--loops", "4", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"mean_ms", "median_ms", "p90_ms", "std_ms", "n", "start_ns", "end_ns", "ep"} <= set(document)
    assert document["n"] == 4 and document["warmup"] == 0 and document["ep"] == "cpu"
