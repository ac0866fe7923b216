"""The device profile: the CPU part measured for real, the GPU document's analysis and report on a
recorded-shape document, Hase's Triton kernels run in Triton's interpreter and compiled for Hopper,
the CLI and run.sh without a GPU, and the GPU steps themselves where CUDA runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from hase_dagster.core.errors import HaseError
from hase_dagster.measure import device_profile as dp
from hase_dagster.measure.device_report import explain, occupancy, write_report
from hase_dagster.measure.timeslice import analyse_gaps
from hase_dagster.orchestration.cli import main
from tests.conftest import TEST_PROFILE

REPO = Path(__file__).resolve().parents[1]


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.fixture(scope="module")
def cpu_document() -> dict:
    return dp.profile_device("cpu", quick=True, log=lambda line: None)


def test_cpu_profile_measures_gemm_bandwidth_and_ort_overhead(cpu_document: dict, tmp_path: Path) -> None:
    peaks = cpu_document["peaks"]
    assert peaks["tflops"]["fp32"] >= peaks["tflops"]["fp32@1"] > 1e-4  # at least 0.1 GFLOPS
    assert 0.1 < peaks["bandwidth_gbps"] < 10_000
    gemm = cpu_document["gemm"]
    assert {r["library"] for r in gemm} == {"torch", "numpy"} and {r["threads"] for r in gemm} >= {1}
    assert all(r["ms"] > 0 and r["tflops"] == pytest.approx(2 * r["n"] ** 3 / (r["ms"] * 1e-3) / 1e12) for r in gemm)
    assert {r["kernel"] for r in cpu_document["bandwidth"]} == {"copy", "scale", "triad"}
    ort = cpu_document["overheads"]["ort"]
    assert [r["ep"] for r in ort] == ["cpu", "cpu"] and all(0 < r["median_us"] <= r["p90_us"] for r in ort)

    report = dp.save_profile(cpu_document, tmp_path)
    text = report.read_text()
    assert "## GEMM" in text and "## Memory bandwidth" in text and "## Overheads" in text
    assert (tmp_path / "gemm_tflops.png").stat().st_size > 1000 and (tmp_path / "bandwidth.png").exists()
    peaks_back = dp.load_roofline(tmp_path)
    assert peaks_back.peak_tflops("float32") == peaks["tflops"]["fp32"]
    assert peaks_back.peak_tflops("fp32", single_thread=True) == peaks["tflops"]["fp32@1"]


def _gpu_document() -> dict:
    """A GPU profile's shape with made-up H100-like numbers (for the analysis and the report)."""
    gpu = {"name": "GPU X", "sm_count": 132, "shared_memory_per_sm": 233472, "registers_per_sm": 65536}
    gpu["max_threads_per_sm"] = 2048

    def triton(n: int, m: int, pct: float, kind: str = "square") -> dict:
        flops = 2 * m * n * n
        cublas_ms = flops / 500e12 * 1e3 + 0.004
        return {
            "library": "triton", "dtype": "fp16", "kind": kind, "m": m, "n": n, "k": n, "flops": flops,
            "ms": cublas_ms * 100 / pct, "tflops": flops / (cublas_ms * 100 / pct * 1e-3) / 1e12,
            "cublas_ms": cublas_ms, "cublas_tflops": flops / (cublas_ms * 1e-3) / 1e12, "pct_of_cublas": pct,
            "config": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
            "resources": {"registers": 168, "spills": 0, "shared_bytes": 98304},
        }  # fmt: skip

    gemm = [
        {"library": "cublas", "dtype": d, "kind": "square", "m": n, "n": n, "k": n, "flops": 2 * n**3, "tflops": t}
        for d, n, t in [("fp16", 256, 20.0), ("fp16", 8192, 650.0), ("fp32", 8192, 50.0), ("fp8", 8192, 1200.0)]
    ]
    gemm.append({"library": "cublas", "dtype": "fp8", "kind": "square", "m": 256, "n": 256, "k": 256, "error": "x"})
    return {
        "schema_version": dp.SCHEMA_VERSION,
        "device": "cuda",
        "device_name": "GPU X",
        "gpu": gpu,
        "memory": {"peak_gbps": 3352.3},
        "gemm": gemm,
        "triton": [triton(256, 256, 80.0), triton(8192, 8192, 60.0), triton(4096, 256, 10.0, "skinny")],
        "pipelining": [
            {
                "dtype": "fp16",
                "m": 8192,
                "n": 8192,
                "k": 8192,
                "config": triton(8192, 8192, 1)["config"],
                "ms_stages_1": 3.1,
                "ms_stages_3": 1.9,
            }
        ],  # fmt: skip
        "bandwidth": [{"kernel": "copy", "library": "torch", "bytes": 2**31, "ms": 0.8, "gbps": 2684.0}],
        "timer_check": [{"dtype": "fp16", "m": 256, "event_ms": 0.006, "cupti_kernel_sum_ms": 0.005}],
        "overheads": {"launch": [{"kernel": "triton empty kernel", "host_enqueue_us": 4.0, "device_us": 1.2}]},
        "timeslice": {
            "threshold_us": 5.0,
            "duration_s": 1.0,
            "scenarios": {
                "alone": analyse_gaps(0, 10**9, []),
                "second process spinning": analyse_gaps(
                    0, 10**9, [(i * 4_000_000, i * 4_000_000 + 2_000_000) for i in range(250)]
                ),  # fmt: skip
            },
        },
        "errors": {"ort": "RuntimeError: no CUDA EP"},
    }


def test_peaks_ignore_failed_rows_and_take_the_best_per_precision() -> None:
    peaks = dp.peaks_of(_gpu_document())
    assert peaks["tflops"] == {"fp16": 650.0, "fp32": 50.0, "fp8": 1200.0}
    assert peaks["bandwidth_gbps"] == 2684.0 and peaks["hbm_peak_gbps"] == 3352.3


def test_roofline_bound_is_the_slower_of_compute_and_memory() -> None:
    roofline = dp.roofline_peaks(_gpu_document())
    # 1 GFLOP at 650 TFLOPS: 1.54 us; 1 GB at 2684 GB/s: 373 us -> memory-bound.
    assert roofline.roofline_ms(1e9, 1e9, "float16") == pytest.approx(1e9 / 2684e9 * 1e3)
    assert roofline.roofline_ms(1e15, 1e3, "fp16") == pytest.approx(1e15 / 650e12 * 1e3)
    assert roofline.peak_tflops("tensor(float)") == 50.0
    features = roofline.features(1e9, 1e9, "fp16")
    assert features["intensity"] == 1.0 and features["ridge"] == pytest.approx(650e12 / 2684e9)
    assert features["roofline_ms"] == features["memory_ms"] > features["compute_ms"]
    with pytest.raises(HaseError, match="no GEMM peak for 'int8'.*fp16, fp32, fp8"):
        roofline.peak_tflops("int8")


def test_triton_rows_are_explained_by_grid_fill_and_memory_bound() -> None:
    document = _gpu_document()
    document["peaks"] = dp.peaks_of(document)
    small, large, skinny = document["triton"]
    assert occupancy(small, document["gpu"])["tiles"] == 4  # 256 / 128 squared
    assert "4 tiles for 132 SMs (3% of SMs busy)" in explain(small, document["gpu"], 650e12 / 2684e9)
    # 8192^2 / 128^2 = 4096 tiles over 132 SMs x 1 program (168 regs x 256 threads): 31.03 waves.
    occ = occupancy(large, document["gpu"])
    assert occ["programs_per_sm"] == 1 and occ["waves"] == pytest.approx(4096 / 132)
    # M = 256 through a 4096-wide layer: 2*256*4096^2 FLOPs over 2*(256*4096*2 + 4096^2) bytes = 227.6 FLOP/B.
    assert "memory-bound (228 FLOP/B < ridge 242)" in explain(skinny, document["gpu"], 650e12 / 2684e9)


def test_gpu_report_has_every_section_and_judges_the_bar(tmp_path: Path) -> None:
    document = _gpu_document()
    document["peaks"] = dp.peaks_of(document)
    text = write_report(document, tmp_path).read_text()
    for section in ("## Hase's Triton GEMM", "## The event timer against CUPTI", "## Time slices", "failed"):
        assert section in text
    assert "- fp16 small (<= 1024): worst 80% of cuBLAS (square 256x256x256); the bar is 70%: met" in text
    assert "- fp16 large (> 1024): worst 10% of cuBLAS (skinny 256x4096x4096); the bar is 15%: NOT met" in text
    for plot in ("gemm_tflops.png", "triton_vs_cublas.png", "bandwidth.png", "timeslice.png"):
        assert (tmp_path / plot).stat().st_size > 1000, plot


def test_gaps_give_slices_probe_runs_and_duty_share() -> None:
    # 1 s window; gaps of 2 ms every 4 ms: the co-tenant has half, the probe runs 2 ms between gaps.
    gaps = [(i * 4_000_000 + 1_000_000, i * 4_000_000 + 3_000_000) for i in range(250)]
    result = analyse_gaps(0, 10**9, gaps)
    assert result["probe_duty_share"] == pytest.approx(0.5)
    assert result["gaps"]["median_us"] == pytest.approx(2000.0) and result["gaps"]["count"] == 250
    assert result["probe_runs"]["median_us"] == pytest.approx(2000.0)
    assert result["switches_per_s"] == pytest.approx(250.0)
    alone = analyse_gaps(5, 10**9, [])
    assert alone["probe_duty_share"] == 1.0 and alone["gaps"] is None


def test_merge_joins_steps_and_refuses_other_devices() -> None:
    core = {k: v for k, v in _gpu_document().items() if k not in ("triton", "timeslice")}
    core["errors"] = {}
    triton = {k: _gpu_document()[k] for k in ("schema_version", "device", "device_name", "triton", "seconds")
              if k in _gpu_document()}  # fmt: skip
    triton["errors"] = {"timeslice": "HaseError: x"}
    merged = dp.merge_profiles([core, triton])
    assert len(merged["triton"]) == 3 and merged["gemm"] == core["gemm"]
    assert merged["errors"] == {"timeslice": "HaseError: x"} and merged["peaks"]["tflops"]["fp16"] == 650.0
    with pytest.raises(HaseError, match="different devices"):
        dp.merge_profiles([core, {**triton, "device": "cpu"}])


def test_a_wrong_schema_or_missing_profile_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HaseError, match="no device profile at"):
        dp.load_roofline(tmp_path, "cuda")
    (tmp_path / dp.PROFILE_FILE).write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(HaseError, match="schema 99"):
        dp.load_roofline(tmp_path)


TRITON_IN_INTERPRETER = """
import torch
from hase_dagster.measure import triton_kernels as tk
torch.manual_seed(0)
# (bf16 is left out: Triton 3.8's interpreter computes garbage for bf16 products, even unmasked.)
for precision, dtype, tolerance in (("fp32", torch.float32, 1e-4), ("tf32", torch.float32, 1e-4),
                                    ("fp16", torch.float16, 2e-2)):
    # M, N not multiples of the tile; K not a multiple of BLOCK_K (the masked K loop)
    a = torch.randn(40, 56, dtype=dtype)
    b = torch.randn(56, 24, dtype=dtype)
    product, _ = tk.gemm_with_config(a, b, precision, 16, 16, 32)
    reference = a.float() @ b.float()
    error = ((product.float() - reference).abs().max() / reference.abs().max()).item()
    assert product.dtype == dtype and product.shape == (40, 24), (product.dtype, product.shape)
    assert error < tolerance, (precision, error)
# TF32 with a row-major (N-major) B: gemm copies B to K-major for products of K_MAJOR_COPY_MIN_M rows
# and more (not for fewer, nor for other precisions or a B already K-major); k_major_b forces either way.
a, b = torch.randn(40, 56), torch.randn(56, 24)
big = tk.K_MAJOR_COPY_MIN_M
assert tk.wants_k_major_b(b, "tf32", big) and not tk.wants_k_major_b(b, "tf32", big - 1)
assert not tk.wants_k_major_b(b, "fp32", big) and not tk.wants_k_major_b(b.half(), "fp16", big)
assert not tk.wants_k_major_b(b.t().contiguous().t(), "tf32", big)
assert tk._laid_out(b, "tf32", big, None).stride() == (1, 56) and tk._laid_out(b, "tf32", 40, None).stride() == (24, 1)
for k_major_b in (None, True, False):
    for operand in (b, b.t().contiguous().t()):
        product, _ = tk.gemm_with_config(a, operand, "tf32", 16, 16, 32, k_major_b=k_major_b)
        assert ((product - a @ b).abs().max() / (a @ b).abs().max()).item() < 1e-4, k_major_b
print("ok")
"""


def test_triton_gemm_computes_the_product_in_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", TRITON_IN_INTERPRETER], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_triton_kernels_compile_for_hopper() -> None:
    """The GEMM (tensor-core MMA and asynchronous, multi-stage shared-memory loads) and the gap
    probe compile to sm_90 code here, without a GPU, with the specialization Triton's launcher
    gives aligned torch tensors (pointers and sizes divisible by 16, unit strides constant)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from hase_dagster.measure import triton_kernels as tk

    if not shutil.which("ptxas") and not list(Path(triton.__file__).parent.glob("backends/nvidia/bin/ptxas")):
        pytest.skip("this triton has no ptxas to compile with")
    target = GPUTarget("cuda", 90, 32)
    names = tk._gemm_kernel.arg_names

    def compiled(element: str, unit_b: str, block_k: int) -> Any:
        """The GEMM for sm_90 with ``element`` pointers and ``unit_b`` B's unit stride (K- or N-major)."""
        unit = ("stride_ak", unit_b, "stride_cn")
        signature = {n: element if n.endswith("_ptr") else "constexpr" if n in unit else "i32" for n in names[:12]}
        signature.update({n: "constexpr" for n in names[12:]})
        aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names[:12] if n not in unit}
        constants = {**dict.fromkeys(unit, 1), "PRECISION": "tf32", "EVEN_K": True, "GROUP_M": 8}
        constants.update(BLOCK_M=128, BLOCK_N=128, BLOCK_K=block_k)
        source = ASTSource(fn=tk._gemm_kernel, signature=signature, constexprs=constants, attrs=aligned)
        return triton.compile(source, target=target, options={"num_warps": 8, "num_stages": 3})

    gemm = compiled("*fp16", "stride_bn", 64)
    ptx = gemm.asm["ptx"]
    assert "wgmma" in ptx and "cp.async" in ptx
    assert gemm.metadata.shared == 3 * (128 * 64 + 64 * 128) * 2  # three K-slices of A and B in flight

    # TF32 (fp32 inputs): B's tile goes to shared memory K-major for wgmma, so a K-major B loads in
    # 16-byte asynchronous copies and an N-major one element by element (why gemm may copy B first).
    def tf32_copies(unit_b: str) -> dict[str, int]:
        ptx = compiled("*fp32", unit_b, 32).asm["ptx"]
        assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ptx
        return {
            "vector": len(re.findall(r"cp\.async\.cg\.shared\.global[^;]*0x10\b", ptx)),
            "scalar": len(re.findall(r"cp\.async\.ca\.shared\.global[^;]*0x4\b", ptx)),
        }

    k_major, n_major = tf32_copies("stride_bk"), tf32_copies("stride_bn")
    assert k_major["scalar"] == 0 and k_major["vector"] > 0, k_major
    assert n_major["scalar"] > n_major["vector"] > 0, n_major
    probe_signature = {"out_ptr": "*i64", "capacity": "i32"}
    probe = triton.compile(ASTSource(fn=tk._gap_probe_kernel, signature=probe_signature), target=target)
    assert "%globaltimer" in probe.asm["ptx"]


def test_cli_writes_and_merges_profiles(cpu_document: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dp.save_profile(cpu_document, tmp_path / "a")
    assert main(["device-profile", "--merge", str(tmp_path / "a"), "--out", str(tmp_path / "b")]) == 0
    assert "peak TFLOPS fp32" in capsys.readouterr().out
    merged = json.loads((tmp_path / "b" / dp.PROFILE_FILE).read_text())
    assert merged["gemm"] == cpu_document["gemm"] and (tmp_path / "b" / "report.md").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "cpu", "--steps", "gemm"], "the CPU profile has none to choose"),
        (["--device", "cuda", "--steps", "gemm,nope"], "unknown GPU steps ['nope']"),
        (["--merge", "/nonexistent/profile"], "no device profile at /nonexistent/profile"),
    ],
)
def test_cli_refuses_bad_requests_in_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["device-profile", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hase: error: ") and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(_cuda(), reason="checks the refusal where no CUDA GPU is seen")
def test_cli_refuses_cuda_without_a_gpu(capsys: pytest.CaptureFixture) -> None:
    assert main(["device-profile", "--device", "cuda"]) == 2
    assert "needs a CUDA GPU that torch can see" in capsys.readouterr().err


def test_asset_profiles_the_profile_device_and_refuses_another(tmp_path: Path) -> None:
    from assets.device import device_profile
    from resources.hase import HaseResource

    (tmp_path / "hase.yaml").write_text(yaml.safe_dump(TEST_PROFILE))
    hase = HaseResource(config_path=str(tmp_path / "hase.yaml"), data_directory=str(tmp_path / "data"))
    instance = dg.DagsterInstance.ephemeral()
    done = dg.materialize([device_profile], partition_key="cpu", resources={"hase": hase}, instance=instance)
    assert done.success and all(check.passed for check in done.get_asset_check_evaluations())
    assert dp.load_roofline(tmp_path / "data", "cpu").peak_tflops("fp32") > 0
    refused = dg.materialize(
        [device_profile], partition_key="cuda", resources={"hase": hase}, instance=instance, raise_on_error=False
    )
    assert not refused.success


@pytest.mark.skipif(_cuda(), reason="checks the GPU-less path of the run script")
def test_run_script_runs_the_cpu_part_and_says_why_the_gpu_part_is_skipped(tmp_path: Path) -> None:
    env = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "out"), "STATE": str(tmp_path / "state")}
    command = ["bash", "results/device/run.sh", "120"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "cpu: done in" in done.stdout and "no CUDA GPU here" in done.stdout
    assert json.loads((tmp_path / "out/device/cpu/device_profile.json").read_text())["device"] == "cpu"
    assert (tmp_path / "out/device-profile.tar.gz").exists()
    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert "cpu: done before" in again.stdout  # resumes: a finished step is not run again
    bad = subprocess.run(["bash", "results/device/run.sh", "soon"], cwd=REPO, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "positive whole number of seconds" in bad.stderr


@pytest.mark.skipif(_cuda(), reason="checks the GPU-less path of the run script")
def test_run_script_runs_only_the_steps_named_in_STEPS(tmp_path: Path) -> None:
    env = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "out"), "STATE": str(tmp_path / "state")}
    command = ["bash", "results/device/run.sh", "120"]
    done = subprocess.run(command, cwd=REPO, env={**env, "STEPS": "precision arena"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "cpu: not in STEPS" in done.stdout and "steps done: 0" in done.stdout
    assert not (tmp_path / "out/device/cpu").exists()  # the cpu step did not run
    assert "cpu: not in STEPS" in (tmp_path / "out/device/run.log").read_text()  # the script's own lines come back
    bad = subprocess.run(command, cwd=REPO, env={**env, "STEPS": "precision,arean"}, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown step 'arean'" in bad.stderr


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_gpu_steps_measure_on_a_real_gpu() -> None:
    document = dp.profile_device("cuda", quick=True, steps=["gemm", "bandwidth", "launch"], log=lambda line: None)
    assert not document["errors"], document["errors"]
    assert document["peaks"]["tflops"]["fp16"] > document["peaks"]["tflops"]["fp32"] > 0
    assert all(row["covered"] for row in document["gemm"] if "ms" in row)


class _HostEvent:
    """A CUDA event on the host clock; pending until synchronized, as a GPU event behind a sleep."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        import time

        self.at = time.perf_counter()

    def query(self) -> bool:
        return False

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.at - self.at) * 1e3


class _CudaOnCpu:
    """torch whose "cuda" tensors are made on the CPU and whose torch.cuda timing calls use the host
    clock: the GPU steps' own code (shapes, precisions, timing loop, rows) runs here, where no GPU is.
    The real thing is ``test_gpu_steps_measure_on_a_real_gpu`` (skipped without CUDA)."""

    def __init__(self) -> None:
        import types

        import torch

        self._torch = torch
        self.cuda = types.SimpleNamespace(
            Event=_HostEvent,
            _sleep=lambda cycles: None,
            synchronize=lambda: None,
            empty_cache=lambda: None,
            get_device_capability=lambda: (9, 0),
            current_device=lambda: 0,
        )

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self._torch, name)
        if name in ("randn", "rand", "randint", "empty", "tensor"):
            return lambda *args, device=None, **kwargs: attribute(*args, **kwargs)
        return attribute


def test_gpu_steps_run_their_own_code_on_a_cpu_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from hase_dagster.measure import gpu_profile as gp

    shapes = [dp.GemmShape("square", 64, 64, 64), dp.GemmShape("skinny", 32, 64, 64)]
    monkeypatch.setattr(gp, "gemm_shapes", lambda quick: shapes)
    torch = _CudaOnCpu()
    timer = gp.EventTimer(torch)
    rows = gp.step_gemm(torch, timer, quick=True, log=lambda line: None)
    assert [(r["dtype"], r["kind"]) for r in rows] == [
        (p, k) for p in gp.CUBLAS_PRECISIONS for k in ("square", "skinny")
    ]
    assert all("error" not in r and r["tflops"] > 0 and r["covered"] for r in rows), [r.get("error") for r in rows]
    bandwidth = gp.step_bandwidth(torch, timer, quick=True, peak_gbps=1000.0)
    assert [r["kernel"] for r in bandwidth] == ["copy", "scale", "triad"]
    assert all(r["pct_of_peak"] == pytest.approx(100 * r["gbps"] / 1000.0) for r in bandwidth)
    [sleep_row, triton_row] = gp.step_launch(torch, timer)
    assert sleep_row["kernel"] == "torch.cuda._sleep(0)" and sleep_row["round_trip_us"] > 0
    assert triton_row["kernel"] == "triton empty kernel" and "error" in triton_row  # no GPU for Triton here
    document = {"schema_version": dp.SCHEMA_VERSION, "device": "cuda", "gemm": rows, "bandwidth": bandwidth}
    assert set(dp.peaks_of(document)["tflops"]) == set(gp.CUBLAS_PRECISIONS)


def test_gpu_profile_keeps_every_step_when_some_fail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from hase_dagster.measure import gpu_profile as gp

    monkeypatch.setattr(gp, "gemm_shapes", lambda quick: [dp.GemmShape("square", 64, 64, 64)])
    monkeypatch.setattr(gp, "_torch_cuda", _CudaOnCpu)
    monkeypatch.setattr(gp, "gpu_info", lambda torch: {"name": "stand-in", "sm_count": 132})

    def no_nvml(index: int = 0) -> dict:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(gp, "nvml_memory", no_nvml)
    lines: list[str] = []
    document = gp.profile_gpu(True, ["gemm", "bandwidth", "launch", "ort"], lines.append)
    # The ORT step needs the CUDA EP, which does not run here: recorded, and the others kept.
    assert set(document["errors"]) == {"nvml", "ort"} and "CUDAExecutionProvider" in document["errors"]["ort"]
    assert len(document["gemm"]) == len(gp.CUBLAS_PRECISIONS) and len(document["bandwidth"]) == 3
    assert [r["kernel"] for r in document["overheads"]["launch"]] == ["torch.cuda._sleep(0)", "triton empty kernel"]
    assert any(line.startswith("step ort FAILED") for line in lines)
    document.update(schema_version=dp.SCHEMA_VERSION, device="cuda")
    document["peaks"] = dp.peaks_of(document)
    text = dp.save_profile(document, tmp_path).read_text()
    assert "## Steps that failed" in text and "- ort: " in text and "## Memory bandwidth" in text
