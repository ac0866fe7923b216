"""The GPU part of the device profile: cuBLAS GEMM per precision, Hase's Triton GEMM against it,
the CUDA-event timer checked against CUPTI, HBM bandwidth, launch latency, ORT's per-run overhead
and the time slice a second process gets.

Every step is independent (``STEPS``): one that fails is recorded under ``errors`` and the others
still run. Device times come from CUDA events around a loop of calls queued behind a sleep kernel,
so the GPU never waits for the host between calls (the timer records whether the sleep covered the
host's enqueueing).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from hase_dagster.core.errors import HaseError
from hase_dagster.measure.device_profile import GemmShape, gemm_shapes, ort_overhead

STEPS = ("gemm", "triton", "timer_check", "bandwidth", "launch", "ort", "timeslice")
CUBLAS_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")
TRITON_PRECISIONS = ("fp16", "bf16", "tf32", "fp32")
# IEEE fp32 products run on the FMA units (no tensor cores): tuning them at 8192+ takes seconds per
# config, so Hase's fp32 kernel is compared up to this size.
TRITON_FP32_MAX_SIZE = 4096
MAX_SLEEP_US = 200_000.0


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise HaseError("the GPU device profile needs torch, which is not installed") from None
    if not torch.cuda.is_available():
        raise HaseError("the GPU device profile needs a CUDA GPU that torch can see, and torch sees none")
    return torch


class EventTimer:
    """Device ms per call of a function, by CUDA events around ``iters`` calls queued behind a sleep
    kernel long enough to cover the host's enqueueing (doubled until it does)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        cycles = 1_000_000
        torch.cuda._sleep(cycles)
        self.start.record()
        torch.cuda._sleep(cycles)
        self.end.record()
        self.end.synchronize()
        self.cycles_per_us = cycles / (self.start.elapsed_time(self.end) * 1e3)
        self.sleep_us = 100.0

    def sample(self, fn: Callable[[], Any], iters: int) -> tuple[float, bool]:
        """One sample: (device ms per call, whether the sleep covered the enqueueing)."""
        torch = self.torch
        while True:
            torch.cuda._sleep(int(self.sleep_us * self.cycles_per_us))
            self.start.record()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            enqueue_us = (time.perf_counter() - t0) * 1e6
            self.end.record()
            covered = not self.start.query()
            self.end.synchronize()
            if covered or self.sleep_us >= MAX_SLEEP_US:
                return self.start.elapsed_time(self.end) / iters, covered
            self.sleep_us = min(2 * max(self.sleep_us, enqueue_us) + 50.0, MAX_SLEEP_US)

    def measure(self, fn: Callable[[], Any], target_ms: float = 20.0, repeats: int = 3) -> dict[str, Any]:
        """Median device ms per call over ``repeats`` samples of enough calls for ``target_ms``
        (1 to 200), after two untimed calls (compilation, autotuning, cuBLAS heuristics)."""
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        once_ms = (time.perf_counter() - t0) * 1e3
        iters = max(1, min(200, int(target_ms / max(once_ms, 1e-3))))
        samples = [self.sample(fn, iters) for _ in range(repeats)]
        return {
            "ms": statistics.median(ms for ms, _ in samples),
            "iters": iters,
            "covered": all(covered for _, covered in samples),
        }


def gpu_info(torch: Any) -> dict[str, Any]:
    """The GPU's properties that bound the kernels: SMs, shared memory and registers per SM, L2."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "total_memory_gb": props.total_memory / 1e9,
        "shared_memory_per_sm": getattr(props, "shared_memory_per_multiprocessor", None),
        "shared_memory_per_block_optin": getattr(props, "shared_memory_per_block_optin", None),
        "registers_per_sm": getattr(props, "regs_per_multiprocessor", None) or 65536,
        "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None) or 2048,
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }


def nvml_memory(index: int = 0) -> dict[str, Any]:
    """HBM peak from NVML: max memory clock x bus width x 2 (double data rate), and the clocks."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        sm_max_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        sm_now_mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        driver = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return {
        "memory_clock_mhz": memory_mhz,
        "bus_width_bits": bus_bits,
        "peak_gbps": memory_mhz * 1e6 * bus_bits / 8 * 2 / 1e9,
        "sm_clock_max_mhz": sm_max_mhz,
        "sm_clock_mhz_at_start": sm_now_mhz,
        "driver": driver if isinstance(driver, str) else driver.decode(),
    }


def _set_fp32_products(torch: Any, precision: str) -> None:
    # "high" lets cuBLAS (and torch) use TF32 tensor cores for fp32 inputs; "highest" keeps IEEE fp32.
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")


def cublas_call(torch: Any, precision: str, shape: GemmShape) -> Callable[[], Any]:
    """A function that runs one cuBLAS GEMM (through torch) of ``shape`` in ``precision`` on fresh
    random inputs."""
    m, n, k = shape.m, shape.n, shape.k
    if precision in ("fp32", "tf32"):
        _set_fp32_products(torch, precision)
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        return lambda: torch.mm(a, b)
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        return lambda: torch.mm(a, b)
    if precision == "int8":
        a8 = torch.randint(-100, 100, (m, k), device="cuda", dtype=torch.int8)
        b8 = torch.randint(-100, 100, (k, n), device="cuda", dtype=torch.int8)
        return lambda: torch._int_mm(a8, b8)
    if precision == "fp8":
        fa = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        # cuBLASLt's FP8 GEMM takes B column-major: the transpose of a row-major (n, k).
        fb = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        scale = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(fa, fb, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}")


def has_fp8(torch: Any) -> bool:
    """FP8 tensor cores: compute capability 8.9 (Ada) and 9.0+ (Hopper)."""
    return bool(torch.cuda.get_device_capability() >= (8, 9)) and hasattr(torch, "_scaled_mm")


def step_gemm(torch: Any, timer: EventTimer, quick: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """cuBLAS TFLOPS for every precision and shape (a row with ``error`` where one fails)."""
    rows = []
    for precision in CUBLAS_PRECISIONS:
        for shape in gemm_shapes(quick):
            row: dict[str, Any] = {"library": "cublas", "dtype": precision, **_shape_dict(shape)}
            if precision == "fp8" and not has_fp8(torch):
                row["error"] = "no FP8 tensor cores (compute capability < 8.9)"
            else:
                try:
                    timed = timer.measure(cublas_call(torch, precision, shape), target_ms=10 if quick else 20)
                    row.update(timed, tflops=shape.flops / (timed["ms"] * 1e-3) / 1e12)
                except (RuntimeError, ValueError) as exc:  # a precision or shape this torch/cuBLAS refuses
                    row["error"] = _one_line(exc)
            rows.append(row)
            torch.cuda.empty_cache()
        done = [r for r in rows if r["dtype"] == precision and "tflops" in r]
        best = max((r["tflops"] for r in done), default=float("nan"))
        log(f"cuBLAS {precision}: {len(done)} shapes, best {best:.1f} TFLOPS")
    _set_fp32_products(torch, "fp32")
    return rows


def _shape_dict(shape: GemmShape) -> dict[str, Any]:
    return {"kind": shape.kind, "m": shape.m, "n": shape.n, "k": shape.k, "flops": shape.flops}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _inputs(torch: Any, precision: str, shape: GemmShape) -> tuple[Any, Any]:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    a = torch.randn(shape.m, shape.k, device="cuda", dtype=dtype)
    b = torch.randn(shape.k, shape.n, device="cuda", dtype=dtype)
    return a, b


def step_triton(torch: Any, timer: EventTimer, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Hase's Triton GEMM (autotuned) against cuBLAS on the same inputs, per precision and shape,
    with the chosen tiles, every tried config's time, the kernel's registers and shared memory, and
    a pipelining check (the best tiles with ``num_stages=1``) at the largest square size."""
    from hase_dagster.measure import triton_kernels as tk

    rows: list[dict[str, Any]] = []
    pipelining: list[dict[str, Any]] = []
    for precision in TRITON_PRECISIONS:
        _set_fp32_products(torch, precision)
        shapes = [s for s in gemm_shapes(quick) if precision != "fp32" or max(s.m, s.n, s.k) <= TRITON_FP32_MAX_SIZE]
        for shape in shapes:
            row: dict[str, Any] = {"library": "triton", "dtype": precision, **_shape_dict(shape)}
            try:
                a, b = _inputs(torch, precision, shape)
                row["b_copied_k_major"] = tk.wants_k_major_b(b, precision, shape.m)
                t0 = time.perf_counter()
                ours = tk.gemm(a, b, precision)
                torch.cuda.synchronize()
                row["tune_s"] = time.perf_counter() - t0
                tuned = tk.tuned_config(precision)
                reference = torch.mm(a, b)
                row["max_rel_error"] = float(
                    (ours.float() - reference.float()).abs().max() / reference.float().abs().max()
                )
                theirs = timer.measure(lambda: torch.mm(a, b), target_ms=10 if quick else 20)  # noqa: B023
                mine = timer.measure(lambda: tk.gemm(a, b, precision), target_ms=10 if quick else 20)  # noqa: B023
                row.update(
                    ms=mine["ms"],
                    covered=mine["covered"],
                    tflops=shape.flops / (mine["ms"] * 1e-3) / 1e12,
                    cublas_ms=theirs["ms"],
                    cublas_tflops=shape.flops / (theirs["ms"] * 1e-3) / 1e12,
                    pct_of_cublas=100.0 * theirs["ms"] / mine["ms"],
                )
                if tuned is not None:
                    best = tuned["best"]
                    row["config"] = best
                    row["tried"] = tuned["tried"]
                    _, kernel = tk.gemm_with_config(
                        a, b, precision, best["BLOCK_M"], best["BLOCK_N"], best["BLOCK_K"],
                        best["num_warps"], best["num_stages"],
                    )  # fmt: skip
                    row["resources"] = tk.kernel_resources(kernel)
            except Exception as exc:  # compile and resource errors come as many types; the row keeps it
                row["error"] = _one_line(exc)
            rows.append(row)
            torch.cuda.empty_cache()
        largest = max(
            (r for r in rows if r["dtype"] == precision and r["kind"] == "square" and "config" in r),
            key=lambda r: r["n"],
            default=None,
        )
        if largest is not None:
            pipelining.append(_pipelining(torch, timer, tk, precision, largest, quick))
        done = [r for r in rows if r["dtype"] == precision and "pct_of_cublas" in r]
        if done:
            log(
                f"Triton {precision}: {len(done)} shapes, "
                f"{min(r['pct_of_cublas'] for r in done):.0f}-{max(r['pct_of_cublas'] for r in done):.0f}% of cuBLAS"
            )
    _set_fp32_products(torch, "fp32")
    return {"rows": rows, "pipelining": pipelining}


def _pipelining(torch: Any, timer: EventTimer, tk: Any, precision: str, row: dict[str, Any], quick: bool) -> dict:
    """The best config of ``row`` timed again with its own num_stages and with 1 (no prefetch of
    the next K-slice into shared memory while the tensor cores work)."""
    shape = GemmShape(row["kind"], row["m"], row["n"], row["k"])
    a, b = _inputs(torch, precision, shape)
    config = row["config"]
    result: dict[str, Any] = {"dtype": precision, "m": shape.m, "n": shape.n, "k": shape.k, "config": config}
    for stages in sorted({config["num_stages"], 1}):
        call = lambda s=stages: tk.gemm_with_config(  # noqa: E731
            a, b, precision, config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_warps"], s
        )
        try:
            result[f"ms_stages_{stages}"] = timer.measure(call, target_ms=10 if quick else 20)["ms"]
        except Exception as exc:  # a config that does not fit with these stages
            result[f"error_stages_{stages}"] = _one_line(exc)
    return result


def cupti_kernel_time(torch: Any, fn: Callable[[], Any], iters: int) -> dict[str, float]:
    """CUPTI's view (torch.profiler) of ``iters`` calls queued behind a sleep: the sum of the
    calls' kernel durations and the span from the first kernel's start to the last one's end, in ms
    per call (the sleep kernel excluded)."""
    from hase_dagster.measure.cupti import profiled_events

    # The sleep (tens of ms) outlasts enqueueing the calls.
    events = profiled_events(fn, iters, before=lambda: torch.cuda._sleep(50_000_000))
    # torch's sleep kernel is ``at::cuda::(anonymous)::spin_kernel`` (from Sleep.cu).
    kernels = [e for e in events if e.get("cat") == "kernel" and not _is_sleep_kernel(e.get("name", ""))]
    if not kernels:
        raise HaseError("CUPTI recorded no kernel: torch.profiler sees no CUDA activity here")
    total_us = sum(float(e["dur"]) for e in kernels)
    span_us = max(float(e["ts"]) + float(e["dur"]) for e in kernels) - min(float(e["ts"]) for e in kernels)
    return {"kernel_sum_ms": total_us / 1e3 / iters, "span_ms": span_us / 1e3 / iters, "kernels": len(kernels)}


def _is_sleep_kernel(name: str) -> bool:
    return "spin_kernel" in name or "sleep" in name.lower()


def step_timer_check(torch: Any, timer: EventTimer, quick: bool, log: Callable[[str], None]) -> list[dict]:
    """The event timer against CUPTI on a few GEMMs, from launch-bound to compute-bound."""
    cases = [("fp16", 256), ("fp16", 1024), ("fp32", 1024), ("fp16", 4096), ("bf16", 8192 if not quick else 4096)]
    rows = []
    for precision, size in cases:
        shape = GemmShape("square", size, size, size)
        call = cublas_call(torch, precision, shape)
        timed = timer.measure(call, target_ms=10)
        row: dict[str, Any] = {"dtype": precision, "m": size, "n": size, "k": size, "event_ms": timed["ms"]}
        try:
            cupti = cupti_kernel_time(torch, call, timed["iters"])
            row.update(
                cupti_kernel_sum_ms=cupti["kernel_sum_ms"],
                cupti_span_ms=cupti["span_ms"],
                kernels_per_call=cupti["kernels"] / timed["iters"],
                event_vs_kernel_sum_pct=100.0 * (timed["ms"] / cupti["kernel_sum_ms"] - 1),
                event_vs_span_pct=100.0 * (timed["ms"] / cupti["span_ms"] - 1),
            )
        except Exception as exc:  # the profiler can be unavailable (CUPTI missing)
            row["error"] = _one_line(exc)
        rows.append(row)
    _set_fp32_products(torch, "fp32")
    worst = max((abs(r.get("event_vs_span_pct", float("nan"))) for r in rows), default=float("nan"))
    log(f"event timer vs CUPTI span: worst {worst:.1f}% over {len(rows)} shapes")
    return rows


def step_bandwidth(torch: Any, timer: EventTimer, quick: bool, peak_gbps: float | None) -> list[dict[str, Any]]:
    """HBM bandwidth of copy, scale and triad on fp32 arrays far larger than L2 (STREAM bytes)."""
    elements = 2**26 if quick else 2**28
    a = torch.rand(elements, device="cuda")
    b = torch.rand(elements, device="cuda")
    c = torch.rand(elements, device="cuda")
    kernels: list[tuple[str, int, Callable[[], Any]]] = [
        ("copy", 2, lambda: b.copy_(a)),
        ("scale", 2, lambda: torch.mul(a, 3.0, out=b)),
        ("triad", 3, lambda: torch.add(b, c, alpha=3.0, out=a)),
    ]
    rows = []
    for name, arrays, fn in kernels:
        timed = timer.measure(fn, target_ms=20)
        moved = arrays * elements * 4
        gbps = moved / (timed["ms"] * 1e-3) / 1e9
        rows.append(
            {
                "kernel": name,
                "library": "torch",
                "bytes": moved,
                "ms": timed["ms"],
                "gbps": gbps,
                "pct_of_peak": 100.0 * gbps / peak_gbps if peak_gbps else None,
            }
        )
    return rows


def step_launch(torch: Any, timer: EventTimer) -> list[dict[str, Any]]:
    """Launch latency of an empty kernel (Triton's) and of torch's sleep kernel with 0 cycles: host
    µs to enqueue one, device µs per kernel back to back, and µs for launch plus synchronize."""
    x = torch.empty(1, device="cuda")

    def triton_empty() -> None:
        from hase_dagster.measure import triton_kernels as tk

        tk.launch_empty(x)

    launches: list[tuple[str, Callable[[], Any]]] = [
        ("torch.cuda._sleep(0)", lambda: torch.cuda._sleep(0)),
        ("triton empty kernel", triton_empty),
    ]
    rows = []
    for name, launch in launches:
        try:
            rows.append(_launch_row(torch, timer, name, launch))
        except Exception as exc:  # Triton needs a C compiler for its launcher: one kernel's failure is a row
            rows.append({"kernel": name, "error": _one_line(exc)})
    return rows


def _launch_row(torch: Any, timer: EventTimer, name: str, launch: Callable[[], Any]) -> dict[str, Any]:
    """Host µs to enqueue one launch, device µs per launch back to back, µs for launch plus synchronize."""
    for _ in range(100):
        launch()
    torch.cuda.synchronize()
    count = 2000
    t0 = time.perf_counter()
    for _ in range(count):
        launch()
    host_us = (time.perf_counter() - t0) / count * 1e6
    torch.cuda.synchronize()
    round_trips = []
    for _ in range(500):
        t0 = time.perf_counter()
        launch()
        torch.cuda.synchronize()
        round_trips.append(time.perf_counter() - t0)
    device = timer.measure(launch, target_ms=2)
    return {
        "kernel": name,
        "host_enqueue_us": host_us,
        "device_us": device["ms"] * 1e3,
        "covered": device["covered"],
        "round_trip_us": statistics.median(round_trips) * 1e6,
    }


def profile_gpu(quick: bool, steps: Sequence[str] | None, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the GPU steps (default all) and return their results; a failed step is recorded under
    ``errors`` and the rest still run.

    Raises:
        HaseError: an unknown step, or no CUDA GPU.
    """
    wanted = list(steps or STEPS)
    unknown = [s for s in wanted if s not in STEPS]
    if unknown:
        raise HaseError(f"unknown GPU steps {unknown}; the steps are {', '.join(STEPS)}")
    torch = _torch_cuda()
    info = gpu_info(torch)
    document: dict[str, Any] = {"device_name": info["name"], "gpu": info, "steps": wanted, "errors": {}}
    try:
        document["memory"] = nvml_memory(torch.cuda.current_device())
    except Exception as exc:  # NVML missing or refusing: bandwidth then has no % of peak
        document["errors"]["nvml"] = _one_line(exc)
    timer = EventTimer(torch)
    peak = document.get("memory", {}).get("peak_gbps")
    runners: dict[str, Callable[[], Any]] = {
        "gemm": lambda: {"gemm": step_gemm(torch, timer, quick, log)},
        "triton": lambda: _triton_document(step_triton(torch, timer, quick, log)),
        "timer_check": lambda: {"timer_check": step_timer_check(torch, timer, quick, log)},
        "bandwidth": lambda: {"bandwidth": step_bandwidth(torch, timer, quick, peak)},
        "launch": lambda: {"overheads": {"launch": step_launch(torch, timer)}},
        "ort": lambda: {"overheads": {"ort": ort_overhead("cuda", runs=500 if quick else 2000)}},
        "timeslice": lambda: {"timeslice": _timeslice(quick)},
    }
    for step in wanted:
        t0 = time.monotonic()
        try:
            for key, value in runners[step]().items():
                if isinstance(value, dict) and isinstance(document.get(key), dict):
                    document[key].update(value)
                else:
                    document[key] = value
            log(f"step {step}: {time.monotonic() - t0:.1f} s")
        except Exception as exc:  # one step's failure must not lose the others' results
            document["errors"][step] = _one_line(exc)
            log(f"step {step} FAILED after {time.monotonic() - t0:.1f} s: {document['errors'][step]}")
        torch.cuda.empty_cache()
    return document


def _triton_document(result: dict[str, Any]) -> dict[str, Any]:
    return {"triton": result["rows"], "pipelining": result["pipelining"]}


def _timeslice(quick: bool) -> dict[str, Any]:
    from hase_dagster.measure.timeslice import measure_time_slices

    return measure_time_slices(duration_s=0.5 if quick else 1.5)
