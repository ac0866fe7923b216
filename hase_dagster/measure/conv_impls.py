"""One operator, several implementations (issue 14 B): a 2-D convolution computed by

- ``im2col_torch``: ``F.unfold`` (im2col) then one GEMM, written in PyTorch, eager;
- ``im2col_torch_compile``: the same function under ``torch.compile`` (Inductor);
- ``conv_jax``: ``jax.jit`` of ``lax.conv_general_dilated``;
- ``im2col_jax``: ``jax.jit`` of an im2col written with shifted slices, then one ``dot``;
- ``conv2d_torch``: ``torch.nn.functional.conv2d`` (cuDNN on a GPU, oneDNN on a CPU): the reference;
- ``conv_ort``: a one-node ONNX ``Conv`` timed as Hase times every kernel
  (:class:`hase_dagster.measure.runner.ModelRunner`: IO binding, cuDNN EXHAUSTIVE search, 1 CPU thread).

Every implementation gets the same inputs (drawn once per case and precision) and is checked against
``conv2d`` computed in float64 on the same rounded inputs: same shape, and the largest absolute
error over the largest reference magnitude within :data:`TOLERANCE` of its precision.

What is timed, per implementation, case and precision:

- ``first_call_s``: building (tracing, compiling, session creation, cuDNN's algorithm search) plus
  the first call, to its result; ``compile_s`` is that minus one steady call;
- ``device_ms``: GPU time per call by CUDA events behind a sleep kernel
  (:class:`hase_dagster.measure.device_clock.DeviceClock`; JAX runs on its own stream, so there it is
  the profiler's kernel time); on a CPU the wall time;
- ``host_ms``: wall time of one call to its synchronized result;
- ``kernel_ms``: CUPTI kernel time per call (``torch.profiler``, which sees every CUDA kernel of the
  process, XLA's and ORT's included), with the kernels' names: cuDNN's names say which algorithm ran;
- ``peak_mem_mb``: memory beyond the inputs that one call needs (torch's CUDA allocator peak, XLA's
  compiled temp + output buffers, ORT's session by NVML or ``cudaMemGetInfo``); on a CPU torch has no
  allocator counter, so only XLA's plan and ORT's RSS growth are reported there.

The module imports neither JAX nor ONNX Runtime until an implementation needs them, so the torch
implementations run on a GPU host that has only torch.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from hase_dagster.core.errors import HaseError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# Largest |y - ref| over largest |ref| allowed, per precision (ref: float64 conv2d of the same
# rounded inputs). fp32 is strict (TF32's ~1e-3 fails it); tf32 keeps 10 mantissa bits (unit
# roundoff 4.9e-4), fp16 too (output rounding 4.9e-4), bf16 7 bits (3.9e-3), each with room for the
# sum's rounding over up to 12,544 products.
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 5e-3, "bf16": 3e-2}
TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

SIZES = (32, 64, 128)
KERNELS = (3, 5, 7)


@dataclass(frozen=True)
class ChannelConfig:
    """Batch and channel counts of one third of the grid."""

    batch: int
    in_channels: int
    out_channels: int
    why: str


# The grid's third axis (3 sizes x 3 kernels x 3 channel configurations = 27 cases a precision).
CHANNEL_CONFIGS = {
    "tiny": ChannelConfig(2, 4, 8, "batch 2, 4->8 channels: microseconds of work, launch and framework overhead"),
    "realistic": ChannelConfig(16, 64, 64, "batch 16, 64->64 channels: an early ResNet stage at a training batch"),
    "deep": ChannelConfig(1, 256, 256, "batch 1, 256->256 channels: a late stage at inference batch 1"),
}


@dataclass(frozen=True)
class ConvCase:
    """One convolution: stride 1, 'same' zero padding (kernel // 2), no bias, square input and kernel."""

    config: str
    batch: int
    in_channels: int
    out_channels: int
    size: int
    kernel: int

    @property
    def padding(self) -> int:
        return self.kernel // 2

    @property
    def key(self) -> str:
        return f"{self.config}-{self.size}px-k{self.kernel}"

    @property
    def flops(self) -> int:
        """Multiply-adds counted as 2 FLOPs (output is size x size with 'same' padding)."""
        return 2 * self.batch * self.out_channels * self.in_channels * self.kernel**2 * self.size**2

    def im2col_elements(self) -> int:
        """Elements of the im2col matrix (batch x C*k*k x H*W) the im2col implementations materialize."""
        return self.batch * self.in_channels * self.kernel**2 * self.size**2


def make_case(config: str, size: int, kernel: int) -> ConvCase:
    """The case of channel configuration ``config`` at ``size`` px with a ``kernel`` x ``kernel`` filter."""
    if config not in CHANNEL_CONFIGS:
        raise HaseError(f"unknown channel configuration {config!r}; known: {', '.join(CHANNEL_CONFIGS)}")
    if size < 1 or kernel < 1 or kernel % 2 == 0:
        raise HaseError(f"a case needs a positive size and an odd kernel, got {size} px, k{kernel}")
    c = CHANNEL_CONFIGS[config]
    return ConvCase(config, c.batch, c.in_channels, c.out_channels, size, kernel)


def grid(name: str) -> list[ConvCase]:
    """``full``: 27 cases (every size x kernel x channel configuration); ``small``: the CPU default of
    ``make run`` (32 px: tiny k3 and k7, realistic k3: 3 cases); ``tiny``: one case, for tests."""
    if name == "full":
        return [make_case(c, s, k) for c in CHANNEL_CONFIGS for s in SIZES for k in KERNELS]
    if name == "small":
        return [make_case("tiny", 32, 3), make_case("tiny", 32, 7), make_case("realistic", 32, 3)]
    if name == "tiny":
        return [make_case("tiny", 32, 3)]
    raise HaseError(f"unknown grid {name!r}; use full, small or tiny")


@dataclass(frozen=True)
class TimingBudget:
    """Warmup and loop bounds of one steady-state timing (per clock)."""

    warmup: int = 5
    min_loops: int = 10
    max_loops: int = 200
    max_seconds: float = 0.2
    profile_calls: int = 5


CPU_TIMING = TimingBudget(warmup=1, min_loops=3, max_loops=100, max_seconds=0.2, profile_calls=2)
# On a GPU: 486 rows (27 cases x 6 implementations x 3 precisions) in a few minutes.
GPU_TIMING = TimingBudget(warmup=3, min_loops=10, max_loops=200, max_seconds=0.1, profile_calls=3)


# ---------------------------------------------------------------------------------------------
# Implementations. Each builds a callable for one case and precision from torch inputs on the
# device; the callable runs one convolution and returns its output in the framework's own type.


@dataclass
class Built:
    """A ready implementation: ``run`` computes one convolution (asynchronously where the device
    is), ``wait`` blocks until ``value`` (run's result) is done, ``to_torch`` turns it into a torch
    tensor; ``compile_s`` is what an explicit compile step took (JAX), ``peak_bytes`` what the
    implementation's own accounting says one call needs beyond its inputs, where it has one."""

    run: Callable[[], Any]
    wait: Callable[[Any], None]
    to_torch: Callable[[Any], torch.Tensor]
    compile_s: float | None = None
    peak_bytes: int | None = None
    peak_source: str | None = None
    notes: str = ""


class Unsupported(Exception):
    """The implementation has no kernel for this precision or device (a row, not an error)."""


@dataclass(frozen=True)
class Implementation:
    """A named implementation: its framework (how it is timed) and its builder."""

    name: str
    framework: str  # torch | jax | ort
    # None for ORT, which is built and timed by Hase's runner with its own clocks (_measure_ort).
    build: Callable[[ConvCase, str, str, torch.Tensor, torch.Tensor], Built] | None
    description: str
    reference: bool = False


def im2col_conv(x: torch.Tensor, w: torch.Tensor, padding: int) -> torch.Tensor:
    """Convolution (cross-correlation, as conv2d) by im2col and one GEMM: unfold every k x k patch
    into a column (N, C*k*k, H*W), multiply by the filters as a (O, C*k*k) matrix."""
    n, _, h, width = x.shape
    o, _, kh, kw = w.shape
    cols = F.unfold(x, (kh, kw), padding=padding)
    out = w.reshape(o, -1) @ cols
    return out.reshape(n, o, h + 2 * padding - kh + 1, width + 2 * padding - kw + 1)


def _torch_built(fn: Callable[[], torch.Tensor], device: str) -> Built:
    wait = (lambda _: torch.cuda.synchronize()) if device == "cuda" else (lambda _: None)
    return Built(run=fn, wait=wait, to_torch=lambda y: y)


def _build_im2col_torch(case: ConvCase, precision: str, device: str, x: torch.Tensor, w: torch.Tensor) -> Built:
    _torch_supports(precision, device)
    return _torch_built(lambda: im2col_conv(x, w, case.padding), device)


def _cxx_compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++") or shutil.which("clang++")


def _build_im2col_compiled(case: ConvCase, precision: str, device: str, x: torch.Tensor, w: torch.Tensor) -> Built:
    _torch_supports(precision, device)
    if device == "cpu" and _cxx_compiler() is None:
        raise Unsupported("no C++ compiler on PATH: Inductor's CPU backend compiles C++ (install g++)")
    # A fresh Dynamo cache per case: otherwise shapes share one function's cache and, past its
    # recompile limit, Dynamo silently runs the function eagerly.
    torch._dynamo.reset()
    compiled = torch.compile(im2col_conv, dynamic=False, fullgraph=True)
    built = _torch_built(lambda: compiled(x, w, case.padding), device)
    built.notes = "compile happens in the first call; Inductor's on-disk caches are left as a user has them"
    return built


def _build_conv2d(case: ConvCase, precision: str, device: str, x: torch.Tensor, w: torch.Tensor) -> Built:
    _torch_supports(precision, device)
    return _torch_built(lambda: F.conv2d(x, w, padding=case.padding), device)


def _torch_supports(precision: str, device: str) -> None:
    if device == "cpu" and precision in ("fp16", "tf32"):
        raise Unsupported(f"{precision} runs on a GPU here (CPU convolutions in fp16 are slow reference paths)")


def _jax() -> Any:
    # JAX takes 75% of the GPU's memory at start unless told not to: torch and ORT share the GPU.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # One CPU thread, as torch and ORT get here (read when the CPU backend starts, so only when JAX
    # starts in this process).
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax

    return jax


def _jax_device(device: str) -> Any:
    jax = _jax()
    platform = "gpu" if device == "cuda" else "cpu"
    try:
        return jax.devices(platform)[0]
    except RuntimeError as exc:
        raise Unsupported(f"JAX has no {platform} backend here ({exc}); on a GPU it needs jax-cuda13-plugin") from exc


def _jax_inputs(x: torch.Tensor, w: torch.Tensor, precision: str, device: str) -> tuple[Any, Any, Any]:
    jax = _jax()
    import jax.numpy as jnp

    dtype = {"fp32": jnp.float32, "tf32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}[precision]
    target = _jax_device(device)
    # Through float32 numpy: exact for fp16/bf16 values (numpy has no bfloat16).
    xs = jax.device_put(jnp.asarray(x.float().cpu().numpy(), dtype=dtype), target)
    ws = jax.device_put(jnp.asarray(w.float().cpu().numpy(), dtype=dtype), target)
    lax_precision = jax.lax.Precision.HIGHEST if precision == "fp32" else jax.lax.Precision.DEFAULT
    return xs, ws, lax_precision


def _jax_supports(precision: str, device: str) -> None:
    if device == "cpu" and precision in ("fp16", "tf32"):
        raise Unsupported(f"{precision} runs on a GPU here")


def _jax_built(fn: Any, xs: Any, ws: Any) -> Built:
    t0 = time.perf_counter()
    compiled = fn.lower(xs, ws).compile()
    compile_s = time.perf_counter() - t0
    peak = None
    try:
        analysis = compiled.memory_analysis()
        peak = int(analysis.temp_size_in_bytes + analysis.output_size_in_bytes)
    except Exception:  # a backend without memory analysis: no figure
        peak = None

    def to_torch(y: Any) -> torch.Tensor:
        import numpy as np

        return torch.from_numpy(np.array(y.astype("float32")))  # a writable copy

    return Built(
        run=lambda: compiled(xs, ws),
        wait=lambda y: y.block_until_ready(),
        to_torch=to_torch,
        compile_s=compile_s,
        peak_bytes=peak,
        peak_source="xla_memory_analysis" if peak is not None else None,
    )


def _build_conv_jax(case: ConvCase, precision: str, device: str, x: torch.Tensor, w: torch.Tensor) -> Built:
    _jax_supports(precision, device)
    jax = _jax()
    xs, ws, lax_precision = _jax_inputs(x, w, precision, device)
    p = case.padding

    def conv(a: Any, b: Any) -> Any:
        return jax.lax.conv_general_dilated(
            a, b, (1, 1), [(p, p), (p, p)], dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=lax_precision
        )

    return _jax_built(jax.jit(conv), xs, ws)


def _build_im2col_jax(case: ConvCase, precision: str, device: str, x: torch.Tensor, w: torch.Tensor) -> Built:
    _jax_supports(precision, device)
    jax = _jax()
    import jax.numpy as jnp

    xs, ws, lax_precision = _jax_inputs(x, w, precision, device)
    k, p, size = case.kernel, case.padding, case.size

    def im2col(a: Any, b: Any) -> Any:
        n, c = a.shape[0], a.shape[1]
        padded = jnp.pad(a, ((0, 0), (0, 0), (p, p), (p, p)))
        # One shifted view per kernel tap, stacked tap-minor as F.unfold orders them: (N, C, k*k, H, W).
        taps = [padded[:, :, i : i + size, j : j + size] for i in range(k) for j in range(k)]
        cols = jnp.stack(taps, axis=2).reshape(n, c * k * k, size * size)
        out = jnp.einsum("ok,nkl->nol", b.reshape(b.shape[0], -1), cols, precision=lax_precision)
        return out.reshape(n, b.shape[0], size, size)

    return _jax_built(jax.jit(im2col), xs, ws)


def conv_onnx_model(case: ConvCase, precision: str, weights: Any) -> Any:
    """A one-node ONNX ``Conv`` (opset 17) with ``weights`` (numpy, O x C x k x k) as its initializer,
    the shape of a Hase kernel model (:mod:`hase_dagster.analysis.kernel_models`)."""
    import onnx
    from onnx import helper, numpy_helper

    from hase_dagster.core.ort_runtime import MAX_IR_VERSION

    elem = {"fp32": onnx.TensorProto.FLOAT, "tf32": onnx.TensorProto.FLOAT, "fp16": onnx.TensorProto.FLOAT16}
    if precision not in elem:
        raise Unsupported("ORT's Conv kernels are registered for float, double and float16, not bfloat16")
    p = case.padding
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[case.kernel] * 2, pads=[p] * 4)
    graph = helper.make_graph(
        [node],
        f"conv_{case.key}_{precision}",
        [helper.make_tensor_value_info("x", elem[precision], [case.batch, case.in_channels, case.size, case.size])],
        [helper.make_tensor_value_info("y", elem[precision], [case.batch, case.out_channels, case.size, case.size])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="hase")
    model.ir_version = MAX_IR_VERSION
    onnx.checker.check_model(model)
    return model


IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation("im2col_torch", "torch", _build_im2col_torch, "F.unfold (im2col) + one GEMM, PyTorch eager"),
        Implementation(
            "im2col_torch_compile", "torch", _build_im2col_compiled, "the same function under torch.compile (Inductor)"
        ),
        Implementation("conv_jax", "jax", _build_conv_jax, "jax.jit of lax.conv_general_dilated"),
        Implementation("im2col_jax", "jax", _build_im2col_jax, "jax.jit of an im2col by shifted slices + one dot"),
        Implementation(
            "conv2d_torch", "torch", _build_conv2d, "torch.nn.functional.conv2d (cuDNN / oneDNN)", reference=True
        ),
        Implementation("conv_ort", "ort", None, "ORT's Conv as Hase times a kernel (ModelRunner)"),
    )
}
REFERENCE = "conv2d_torch"


# ---------------------------------------------------------------------------------------------
# Correctness


@dataclass(frozen=True)
class Check:
    """An implementation's output against the float64 reference."""

    shape_ok: bool
    max_abs_err: float
    rel_err: float  # max |y - ref| / max |ref|
    tolerance: float
    passed: bool


def check_output(output: torch.Tensor, reference: torch.Tensor, precision: str) -> Check:
    """Shape equal and max |output - reference| / max |reference| within ``TOLERANCE[precision]``;
    a NaN or infinity anywhere fails."""
    tolerance = TOLERANCE[precision]
    if tuple(output.shape) != tuple(reference.shape):
        return Check(False, math.inf, math.inf, tolerance, False)
    diff = (output.detach().to("cpu", torch.float64) - reference.to("cpu", torch.float64)).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    scale = float(reference.abs().max()) if reference.numel() else 0.0
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    passed = math.isfinite(rel) and rel <= tolerance
    return Check(True, max_abs, rel, tolerance, passed)


def case_inputs(case: ConvCase, precision: str, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and filters of ``case`` in ``precision`` on ``device``, drawn from one seed (uniform in
    [-1, 1], filters scaled by 1/sqrt(C*k*k) so outputs stay O(1) in every precision)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(case.batch, case.in_channels, case.size, case.size, generator=generator) * 2 - 1
    fan_in = case.in_channels * case.kernel**2
    w = (torch.rand(case.out_channels, case.in_channels, case.kernel, case.kernel, generator=generator) * 2 - 1) / (
        fan_in**0.5
    )
    dtype = TORCH_DTYPES[precision]
    return x.to(device=device, dtype=dtype), w.to(device=device, dtype=dtype)


def reference_output(case: ConvCase, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """conv2d in float64 of the (already rounded) inputs, on their device, returned on the CPU."""
    return F.conv2d(x.double(), w.double(), padding=case.padding).cpu()


# ---------------------------------------------------------------------------------------------
# Timing


@contextlib.contextmanager
def precision_mode(precision: str, device: str, threads: int | None) -> Iterator[None]:
    """TF32 on only for ``tf32``, cuDNN's autotuner on (as a user tuning inference would), and
    ``threads`` intra-op threads on a CPU; restores every setting after."""
    saved = (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.benchmark,
        torch.get_num_threads(),
    )
    tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = device == "cuda"
    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = saved[:3]
        torch.set_num_threads(saved[3])


def _loop(sample: Callable[[], float], budget: TimingBudget) -> list[float]:
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < budget.max_loops:
        samples.append(sample())
        if len(samples) >= budget.min_loops and time.perf_counter() - start >= budget.max_seconds:
            break
    return samples


def _host_sample(built: Built) -> Callable[[], float]:
    def sample() -> float:
        t0 = time.perf_counter()
        built.wait(built.run())
        return (time.perf_counter() - t0) * 1e3

    return sample


def _profile_kernels(call: Callable[[], Any], calls: int) -> tuple[float | None, list[dict[str, Any]]]:
    """CUPTI kernel time per call and the kernels by total time (name, ms per call, count per call)."""
    from hase_dagster.measure.cupti import profiled_events

    events = profiled_events(call, calls)
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        return None, []
    by_name: dict[str, list[float]] = {}
    for event in kernels:
        by_name.setdefault(event["name"], []).append(float(event["dur"]))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    top = [{"name": name, "ms": sum(durs) / 1e3 / calls, "per_call": len(durs) / calls} for name, durs in ranked[:4]]
    return sum(e["dur"] for e in kernels) / 1e3 / calls, top


def _cpu_ops(call: Callable[[], Any], calls: int) -> list[dict[str, Any]]:
    """On a CPU: the aten operators under one call by self time (which backend conv2d chose)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            call()
    rows = [
        {"name": e.key, "ms": e.self_cpu_time_total / 1e3 / calls, "per_call": e.count / calls}
        for e in prof.key_averages()
        if e.self_cpu_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["ms"])[:4]


# Substrings of kernel (or op) names, first match wins: which algorithm a library chose.
ALGORITHMS = (
    ("mkldnn", "onednn"),
    # ATen's own fallback (no oneDNN kernel for the type, e.g. bf16 without AVX512-BF16): im2col + GEMM.
    ("slow_conv2d", "aten_slow_im2col"),
    ("winograd", "winograd"),
    ("fft", "fft"),
    ("implicit_convolve_sgemm", "implicit_gemm"),
    ("implicit_gemm", "implicit_gemm"),
    ("fprop", "implicit_gemm"),
    ("conv_kernel", "implicit_gemm"),
    ("precomputed", "implicit_gemm_precomp"),
    ("direct", "direct"),
    ("cudnn_generated", "cudnn_runtime_fusion"),
    ("im2col", "im2col+gemm"),
    ("convolution", "conv"),
    ("triton", "triton"),
    ("gemm", "gemm"),
    ("mm", "gemm"),
)
# Layout and type conversions around the real work: not what names the algorithm.
HELPER_KERNELS = ("nchwtonhwc", "nhwctonchw", "transpose", "convert", "copy", "fill", "aten::empty", "memset")


def algorithm_of(kernels: Sequence[dict[str, Any]]) -> str | None:
    """The algorithm family the most expensive kernel's name says (cuDNN, cuBLAS, Triton, oneDNN)."""
    work = [k for k in kernels if not any(h in k["name"].lower() for h in HELPER_KERNELS)] or list(kernels)
    if not work:
        return None
    name = work[0]["name"].lower()
    for needle, family in ALGORITHMS:
        if needle in name:
            return family
    return "other"


@dataclass
class Row:
    """One implementation on one case in one precision."""

    implementation: str
    framework: str
    case: str
    config: str
    batch: int
    in_channels: int
    out_channels: int
    size: int
    kernel: int
    precision: str
    device: str
    flops: int
    status: str = "ok"  # ok | unsupported | error
    error: str | None = None
    first_call_s: float | None = None
    compile_s: float | None = None
    device_ms: float | None = None
    device_clock: str | None = None
    host_ms: float | None = None
    kernel_ms: float | None = None
    n_device: int = 0
    n_host: int = 0
    tflops: float | None = None
    peak_mem_mb: float | None = None
    mem_source: str | None = None
    im2col_mb: float | None = None
    kernels: list[dict[str, Any]] | None = None
    algorithm: str | None = None
    shape_ok: bool | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    tolerance: float | None = None
    correct: bool | None = None
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _new_row(impl: Implementation, case: ConvCase, precision: str, device: str) -> Row:
    return Row(
        implementation=impl.name,
        framework=impl.framework,
        case=case.key,
        config=case.config,
        batch=case.batch,
        in_channels=case.in_channels,
        out_channels=case.out_channels,
        size=case.size,
        kernel=case.kernel,
        precision=precision,
        device=device,
        flops=case.flops,
        tolerance=TOLERANCE[precision],
    )


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _measure_framework(
    impl: Implementation,
    case: ConvCase,
    precision: str,
    device: str,
    x: torch.Tensor,
    w: torch.Tensor,
    ref: torch.Tensor,
    row: Row,
    budget: TimingBudget,
) -> None:
    """Build, first call, correctness, steady timing, profile and memory of a torch or JAX implementation."""
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    assert impl.build is not None
    t0 = time.perf_counter()
    built = impl.build(case, precision, device, x, w)
    first = built.run()
    built.wait(first)
    row.first_call_s = time.perf_counter() - t0
    check = check_output(built.to_torch(first), ref, precision)
    row.shape_ok, row.max_abs_err, row.rel_err, row.correct = (
        check.shape_ok,
        check.max_abs_err,
        check.rel_err,
        check.passed,
    )
    del first
    for _ in range(budget.warmup):
        built.wait(built.run())
    host = _loop(_host_sample(built), budget)
    row.host_ms, row.n_host = _median(host), len(host)
    if row.host_ms is not None:
        row.compile_s = built.compile_s if built.compile_s is not None else max(row.first_call_s - row.host_ms / 1e3, 0)
    if cuda:
        if impl.framework == "torch":
            from hase_dagster.measure.device_clock import DeviceClock

            clock = DeviceClock()
            stream = torch.cuda.ExternalStream(clock.stream_handle)

            def enqueue() -> None:
                # On the clock's stream, behind its sleep kernel: the events bracket the GPU work only.
                with torch.cuda.stream(stream):
                    built.run()

            device_samples = _loop(lambda: clock.time(enqueue), budget)
            row.device_ms, row.n_device = _median(device_samples), len(device_samples)
            row.device_clock = "cuda_events" + ("+host" if clock.uncovered else "")
        row.kernel_ms, row.kernels = _profile_kernels(lambda: built.wait(built.run()), budget.profile_calls)
        if impl.framework == "jax":
            # JAX runs on its own stream: CUPTI's kernel time is its device time (wall time when the
            # profiler saw none of XLA's kernels).
            if row.kernel_ms is not None:
                row.device_ms, row.device_clock = row.kernel_ms, "cupti_kernels"
            else:
                row.device_ms, row.device_clock = row.host_ms, "host_wall"
        if impl.framework == "torch":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            built.wait(built.run())
            row.peak_mem_mb = (torch.cuda.max_memory_allocated() - base) / 1e6
            row.mem_source = "torch_cuda_allocator_peak"
    else:
        row.device_ms, row.device_clock = row.host_ms, "host_wall"
        if impl.reference:
            row.kernels = _cpu_ops(lambda: built.wait(built.run()), budget.profile_calls)
    if built.peak_bytes is not None:
        row.peak_mem_mb, row.mem_source = built.peak_bytes / 1e6, built.peak_source
    row.algorithm = algorithm_of(row.kernels or [])
    if built.notes:
        row.notes = built.notes


def _measure_ort(
    case: ConvCase,
    precision: str,
    device: str,
    x: torch.Tensor,
    w: torch.Tensor,
    ref: torch.Tensor,
    row: Row,
    budget: TimingBudget,
    work_dir: Path,
) -> None:
    """ORT's Conv as Hase times a kernel: a one-node model, ModelRunner (IO binding, EXHAUSTIVE cuDNN
    search, 1 CPU thread), device clock and host clock on CUDA, host clock on a CPU."""
    if precision == "bf16":
        raise Unsupported("ORT's Conv kernels are registered for float, double and float16, not bfloat16")
    if device == "cpu" and precision != "fp32":
        raise Unsupported("ORT's CPU Conv runs float32 only")
    import onnx

    from hase_dagster.core.config import OrtOptions, TimingOptions
    from hase_dagster.measure.model_memory import MemoryMeter
    from hase_dagster.measure.runner import ModelRunner

    ep = "cuda" if device == "cuda" else "cpu"
    exact = precision != "tf32"
    feeds = {"x": x.cpu().numpy()}
    path = work_dir / f"conv_{case.key}_{precision}.onnx"
    work_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(conv_onnx_model(case, precision, w.cpu().numpy()), str(path))
    timing = dict(
        warmup=budget.warmup,
        min_loops=budget.min_loops,
        max_loops=budget.max_loops,
        min_seconds=0.0,
        max_seconds=budget.max_seconds,
    )
    meter = MemoryMeter(ep)
    before = meter.read()
    t0 = time.perf_counter()
    host_runner = ModelRunner(path, ep, OrtOptions(), level="disable", feeds=feeds, exact=exact)  # type: ignore[arg-type]
    host_runner.sample()
    row.first_call_s = time.perf_counter() - t0
    output = host_runner.session.run(None, feeds)[0]
    check = check_output(torch.from_numpy(output.astype("float32")), ref, precision)
    row.shape_ok, row.max_abs_err, row.rel_err, row.correct = (
        check.shape_ok,
        check.max_abs_err,
        check.rel_err,
        check.passed,
    )
    host = host_runner.time(TimingOptions(**timing))  # type: ignore[arg-type]
    row.host_ms, row.n_host = host.median_ms, host.n
    row.compile_s = max(row.first_call_s - host.median_ms / 1e3, 0.0)
    memory = meter.columns(before, meter.read(), host_runner.session)
    row.peak_mem_mb, row.mem_source = memory["peak_memory_mb"], memory["memory_source"]
    if ep == "cuda":
        row.kernel_ms, row.kernels = _profile_kernels(host_runner.sample, budget.profile_calls)
        del host_runner
        device_runner = ModelRunner(
            path,
            ep,  # type: ignore[arg-type]
            OrtOptions(),
            level="disable",
            feeds=feeds,
            clock="device",
            exact=exact,
        )
        clocked = device_runner.time(TimingOptions(**timing, clock="device"))  # type: ignore[arg-type]
        row.device_ms, row.n_device, row.device_clock = clocked.median_ms, clocked.n, "cuda_events"
        if clocked.clock != "device":
            row.device_clock = "cuda_events+host"
        del device_runner
    else:
        row.device_ms, row.device_clock = row.host_ms, "host_wall"
        del host_runner
    row.algorithm = algorithm_of(row.kernels or [])
    if ep == "cuda":
        row.notes = "cuDNN EXHAUSTIVE search (in first_call_s); " + ("TF32 on" if not exact else "TF32 off")
    else:
        row.notes = "ORT CPU EP, 1 intra-op thread (MLAS)"


def measure_one(
    impl: Implementation,
    case: ConvCase,
    precision: str,
    device: str,
    inputs: tuple[torch.Tensor, torch.Tensor],
    ref: torch.Tensor,
    budget: TimingBudget,
    work_dir: Path,
    threads: int | None = 1,
) -> Row:
    """One row: ``impl`` on ``case`` in ``precision``; a missing kernel gives an ``unsupported`` row and
    a failure an ``error`` row (with the message), never an exception."""
    row = _new_row(impl, case, precision, device)
    if impl.name.startswith("im2col"):
        row.im2col_mb = case.im2col_elements() * TORCH_DTYPES[precision].itemsize / 1e6
    x, w = inputs
    try:
        with precision_mode(precision, device, threads):
            if impl.framework == "ort":
                _measure_ort(case, precision, device, x, w, ref, row, budget, work_dir)
            else:
                _measure_framework(impl, case, precision, device, x, w, ref, row, budget)
    except Unsupported as exc:
        row.status, row.error = "unsupported", str(exc)
    except Exception as exc:  # one implementation failing must not lose the grid's other rows
        row.status, row.error = "error", f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    finally:
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    if row.status == "ok" and row.device_ms:
        row.tflops = case.flops / (row.device_ms / 1e3) / 1e12
    return row


def row_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row["implementation"], row["case"], row["precision"])


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows a (possibly interrupted) run appended to ``path``, one JSON object a line."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill: measured again
                continue
    return rows


def run_grid(
    cases: Sequence[ConvCase],
    precisions: Sequence[str],
    device: str,
    out: Path,
    implementations: Sequence[str] | None = None,
    budget: TimingBudget | None = None,
    deadline_s: float | None = None,
    log: Callable[[str], None] = print,
    threads: int | None = 1,
) -> tuple[list[dict[str, Any]], bool]:
    """Measure every implementation on every case and precision; rows are appended to
    ``out/rows.jsonl`` as they finish, and rows already there are kept (a second call resumes).

    Returns every row and whether the grid is complete (False when ``deadline_s`` seconds passed first).
    """
    names = list(implementations or IMPLEMENTATIONS)
    unknown = [n for n in names if n not in IMPLEMENTATIONS]
    if unknown:
        raise HaseError(f"unknown implementation(s) {', '.join(unknown)}; known: {', '.join(IMPLEMENTATIONS)}")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise HaseError(f"unknown precision(s) {', '.join(bad)}; known: {', '.join(PRECISIONS)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise HaseError("--device cuda: torch sees no CUDA GPU here; use --device cpu")
    if device not in ("cpu", "cuda"):
        raise HaseError(f"unknown device {device!r}; use cpu or cuda")
    budget = budget or (GPU_TIMING if device == "cuda" else CPU_TIMING)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows = read_rows(rows_path)
    done = {row_key(r) for r in rows}
    complete = True
    work_dir = Path(tempfile.mkdtemp(prefix="hase-conv-onnx-"))  # ORT's one-node models, rebuilt per run
    try:
        _measure_all(
            cases, precisions, device, names, budget, deadline_s, log, threads, rows, done, rows_path, work_dir
        )
    except _OutOfTime:
        complete = False
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return rows, complete


class _OutOfTime(Exception):
    pass


def _measure_all(
    cases: Sequence[ConvCase],
    precisions: Sequence[str],
    device: str,
    names: list[str],
    budget: TimingBudget,
    deadline_s: float | None,
    log: Callable[[str], None],
    threads: int | None,
    rows: list[dict[str, Any]],
    done: set[tuple[str, str, str]],
    rows_path: Path,
    work_dir: Path,
) -> None:
    started = time.monotonic()
    if rows_path.exists() and rows_path.stat().st_size and not rows_path.read_bytes().endswith(b"\n"):
        with rows_path.open("a") as sink:  # a line a kill cut short: the next row starts on its own line
            sink.write("\n")
    with rows_path.open("a") as sink:
        for precision in precisions:
            for case in cases:
                todo = [n for n in names if (n, case.key, precision) not in done]
                if not todo:
                    continue
                if deadline_s is not None and time.monotonic() - started > deadline_s:
                    raise _OutOfTime
                inputs = case_inputs(case, precision, device)
                ref = reference_output(case, *inputs)
                for name in todo:
                    row = measure_one(
                        IMPLEMENTATIONS[name], case, precision, device, inputs, ref, budget, work_dir, threads
                    )
                    data = row.to_dict()
                    rows.append(data)
                    sink.write(json.dumps(data) + "\n")
                    sink.flush()
                    log(_row_line(data))
                del inputs, ref


def _row_line(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['precision']} {row['case']} {row['implementation']}: {row['status']} ({row['error']})"
    ok = "ok" if row["correct"] else f"WRONG (rel {row['rel_err']:.2e} > {row['tolerance']:.0e})"
    return (
        f"{row['precision']} {row['case']} {row['implementation']}: device {row['device_ms']:.4f} ms, "
        f"host {row['host_ms']:.4f} ms, first call {row['first_call_s']:.3f} s, {ok}"
    )


def environment(device: str) -> dict[str, Any]:
    """Library versions and the device, for the report's header."""
    info: dict[str, Any] = {"device": device, "torch": torch.__version__, "cxx": _cxx_compiler()}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cudnn"] = torch.backends.cudnn.version()
    else:
        import platform

        info["cpu"] = platform.processor() or platform.machine()
        info["cores"] = os.cpu_count()
    for module in ("jax", "jaxlib", "onnxruntime"):
        try:
            info[module] = __import__(module).__version__
        except Exception:  # not installed here: its implementations report unsupported or error
            info[module] = None
    return info
