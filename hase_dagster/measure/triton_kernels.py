"""Hase's own GPU kernels, in Triton: a tiled GEMM with autotuned tiles, an empty kernel (launch
latency) and a ``%globaltimer`` gap probe (GPU time slices).

Importing this module needs ``triton`` (it ships with torch's CUDA build) but no GPU: the kernels
compile at their first launch. With ``TRITON_INTERPRET=1`` set before the import, the GEMM runs on
the CPU in Triton's interpreter (the tests check its values that way); the gap probe needs a GPU.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer

# Tile shapes tried per (M, N, K, dtype). 16-bit inputs use tensor cores with big tiles and deep
# pipelines (num_stages: how many K-slices are in flight through shared memory); small-M and small
# problems want small tiles so that more programs fill the SMs. fp32 inputs (TF32 or IEEE products)
# take twice the shared memory per tile, so their tiles are smaller and their pipelines shallower.
_HALF_CONFIGS = [
    # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
    (128, 256, 64, 8, 8, 3),
    (128, 128, 64, 8, 4, 4),
    (128, 128, 64, 8, 8, 3),
    (64, 128, 64, 8, 4, 4),
    (64, 64, 64, 8, 4, 4),
    (32, 64, 64, 8, 4, 4),
    (64, 32, 128, 8, 4, 3),
    # Small problems (256-512): many small programs, two warps each, to spread over the SMs.
    (32, 32, 64, 8, 2, 4),
]
_FLOAT_CONFIGS = [
    (128, 128, 32, 8, 8, 3),
    (128, 64, 32, 8, 4, 4),
    (64, 64, 32, 8, 4, 4),
    (32, 64, 32, 8, 4, 3),
]
# TF32 products on Hopper's wgmma (BLOCK_M >= 64) read both operands K-major from shared memory, so
# with a K-major B (see ``gemm``) the tiles load in 16-byte copies and bigger, deeper tiles pay off.
_TF32_CONFIGS = [
    *_FLOAT_CONFIGS,
    (128, 256, 32, 8, 8, 3),
    (128, 128, 64, 8, 8, 3),
    (64, 128, 32, 8, 4, 4),
    (64, 64, 64, 8, 4, 3),
    # Below BLOCK_M 64 Triton uses mma.sync, which reads an N-major B without wgmma's 4-byte copies: the
    # best tiles for a row-major B at 1024^3 on the H100 (results/device/tf32_configs.py: 84% and 79%
    # of cuBLAS, against 67% for 32x64x32).
    (32, 256, 32, 8, 4, 3),
    (32, 128, 64, 8, 4, 3),
]


def _configs(table: list[tuple[int, int, int, int, int, int]]) -> list[triton.Config]:
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": g}, num_warps=w, num_stages=s)
        for m, n, k, g, w, s in table
    ]


def _fast_bench(kernel_call: Any, quantiles: Any) -> Any:
    """The autotuner's timer, shorter than Triton's default (25 ms warm-up, 100 ms of runs per
    config) so that a whole sweep's tuning fits in the GPU run's budget; medians of ~20 ms are
    stable to a few % for these kernels."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


@triton.jit
def _gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    PRECISION: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C = A @ B, one BLOCK_M x BLOCK_N tile of C per program, accumulated in fp32.

    Programs are grouped GROUP_M tiles down a column of C before moving right, so that
    neighbouring programs share rows of A and columns of B in L2.
    """
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_rows = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_rows)
    pid_n = (pid % in_group) // group_rows

    # Rows and columns wrap around (modulo) at the edges, so loads need no M/N masks; the store masks them.
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_tile)
            b = tl.load(b_tile)
        else:
            left = K - k * BLOCK_K
            a = tl.load(a_tile, mask=ks[None, :] < left, other=0.0)
            b = tl.load(b_tile, mask=ks[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    out_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_tile = c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


def _even_k(args: dict[str, Any]) -> bool:
    return bool(args["K"] % args["BLOCK_K"] == 0)


# One autotuned kernel per product precision (the autotuner's cache key is (M, N, K), B's strides
# (its layout changes the best tiles) and the inputs' dtypes, which do not tell TF32 from IEEE fp32).
def _autotuned(table: list[tuple[int, int, int, int, int, int]]) -> Any:
    key = ["M", "N", "K", "stride_bk", "stride_bn"]
    return triton.autotune(configs=_configs(table), key=key, do_bench=_fast_bench)(
        triton.heuristics({"EVEN_K": _even_k})(_gemm_kernel)
    )


_half_gemm = _autotuned(_HALF_CONFIGS)
_KERNELS = {
    "fp16": _half_gemm,
    "bf16": _half_gemm,
    "tf32": _autotuned(_TF32_CONFIGS),
    "fp32": _autotuned(_FLOAT_CONFIGS),
}

# Triton's name of the product precision for each of Hase's GEMM precisions (16-bit inputs ignore it).
PRECISIONS = {"fp16": "tf32", "bf16": "tf32", "tf32": "tf32", "fp32": "ieee"}


def _check(a: Any, b: Any, precision: str) -> tuple[int, int, int]:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; one of {sorted(PRECISIONS)}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    return int(a.shape[0]), int(b.shape[1]), int(a.shape[1])


# Rows of A from which copying an N-major B to K-major pays for itself in TF32: the copy costs K x N
# element moves, the product M x N x K multiply-adds. On the H100 (results/device/tf32_layout.py) it
# made the call 1.9-3.5x faster from M = 2048 up, no faster at 1024, and slower below and for 256-row
# (skinny) products.
K_MAJOR_COPY_MIN_M = 2048


def wants_k_major_b(b: Any, precision: str, m: int) -> bool:
    """Whether ``gemm`` copies ``b`` to K-major before a product with ``m`` rows: for TF32 when B is
    N-major (rows contiguous, as torch makes a (K, N) tensor) and ``m >= K_MAJOR_COPY_MIN_M``.

    Hopper's wgmma reads TF32 operands K-major from shared memory, so Triton loads an N-major B tile
    element by element (4-byte instead of 16-byte asynchronous copies; ``tests/test_device_profile.py``
    checks the compiled PTX): on the H100 the kernel ran at 22-28% of cuBLAS from 2048^3 up on an
    N-major B and at 84-90% on a K-major one (the layout of ``x @ W.T``, a Linear layer's product).
    16-bit inputs are transposed in shared memory at no such cost.
    """
    return precision == "tf32" and b.stride(1) == 1 and b.shape[1] > 1 and m >= K_MAJOR_COPY_MIN_M


def _laid_out(b: Any, precision: str, m: int, k_major_b: bool | None) -> Any:
    if (wants_k_major_b(b, precision, m) if k_major_b is None else k_major_b) and b.stride(0) != 1:
        return b.t().contiguous().t()
    return b


def gemm(a: Any, b: Any, precision: str, k_major_b: bool | None = None) -> Any:
    """``a @ b`` (torch tensors on one device) by the autotuned Triton kernel.

    Args:
        a: (M, K) tensor; fp16 or bf16 for those precisions, fp32 for ``tf32`` and ``fp32``.
        b: (K, N) tensor of a's dtype, any strides.
        precision: ``fp16``, ``bf16``, ``tf32`` (fp32 inputs, TF32 tensor-core products) or ``fp32``
            (IEEE fp32 products).
        k_major_b: copy an N-major ``b`` to K-major first (one transpose kernel, part of the call);
            None: where ``wants_k_major_b`` says so.

    Returns:
        The (M, N) product in a's dtype.
    """
    import torch

    m, n, k = _check(a, b, precision)
    b = _laid_out(b, precision, m, k_major_b)
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    kernel = _KERNELS[precision]
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    kernel[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), PRECISION=PRECISIONS[precision])
    return c


def gemm_with_config(
    a: Any,
    b: Any,
    precision: str,
    block_m: int,
    block_n: int,
    block_k: int,
    num_warps: int = 4,
    num_stages: int = 2,
    k_major_b: bool | None = None,
) -> tuple[Any, Any]:
    """``a @ b`` by the same kernel with fixed tiles (no autotuning), B laid out as ``gemm`` lays it
    out: for tests (it runs in Triton's interpreter) and for explaining a config's cost.

    Returns:
        The product and the launched kernel (on a GPU, Triton's ``CompiledKernel``: its registers,
        spills and shared memory).
    """
    import torch

    m, n, k = _check(a, b, precision)
    b = _laid_out(b, precision, m, k_major_b)
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    kernel = _gemm_kernel[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        *a.stride(),
        *b.stride(),
        *c.stride(),
        PRECISION=PRECISIONS[precision],
        EVEN_K=k % block_k == 0,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=8,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return c, kernel


def kernel_resources(kernel: Any) -> dict[str, Any]:
    """Registers per thread, spilled registers and shared memory bytes per program of a launched
    Triton kernel (None where this Triton does not say)."""
    init = getattr(kernel, "_init_handles", None)
    if callable(init):
        init()
    metadata = getattr(kernel, "metadata", None)
    return {
        "registers": getattr(kernel, "n_regs", None),
        "spills": getattr(kernel, "n_spills", None),
        "shared_bytes": getattr(metadata, "shared", None),
    }


def tuned_config(precision: str) -> dict[str, Any] | None:
    """The config the autotuner chose for the last shape it tuned in ``precision``, with every
    config's median ms, or None before any tuning."""
    timings = getattr(_KERNELS[precision], "configs_timings", None)
    if not timings:
        return None
    best = min(timings, key=lambda config: _median(timings[config]))
    return {
        "best": _config_dict(best),
        "tried": [{**_config_dict(config), "ms": _median(ms)} for config, ms in timings.items()],
    }


def _median(timing: Any) -> float:
    return float(timing[0] if isinstance(timing, list | tuple) else timing)


def _config_dict(config: triton.Config) -> dict[str, Any]:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


@triton.jit
def _empty_kernel(x_ptr):
    """Does nothing: its cost is the launch alone."""
    pass


def launch_empty(x: Any) -> None:
    """Launch one empty kernel (one program) on ``x``'s device."""
    _empty_kernel[(1,)](x)


@triton.jit
def _gap_probe_kernel(out_ptr, capacity):
    """Spin for ``out[0]`` ns of ``%globaltimer`` time, reading the timer back to back; every jump
    of more than ``out[1]`` ns between two reads is a time this program did not run (the GPU ran
    another context): record its (start, end) pairs after a header that becomes [first, last, count].

    The duration and threshold come in the buffer, not as arguments, so that one compiled kernel
    serves every duration (Triton types an int argument i32 or i64 by its value).
    """
    duration_ns = tl.load(out_ptr)
    threshold_ns = tl.load(out_ptr + 1)
    first = globaltimer()
    previous = first
    count = 0
    while previous - first < duration_ns:
        now = globaltimer()
        is_gap = (now - previous) > threshold_ns
        keep = is_gap & (count < capacity)
        tl.store(out_ptr + 3 + 2 * count, previous, mask=keep)
        tl.store(out_ptr + 4 + 2 * count, now, mask=keep)
        count += is_gap.to(tl.int32)
        previous = now
    tl.store(out_ptr, first)
    tl.store(out_ptr + 1, previous)
    tl.store(out_ptr + 2, count)


def gap_probe(duration_s: float, threshold_us: float = 5.0, capacity: int = 100_000) -> dict[str, Any]:
    """Run the gap probe on GPU 0 for ``duration_s`` seconds (one program, one warp).

    Returns:
        ``first_ns`` and ``last_ns`` (globaltimer), ``gaps`` (a list of (start_ns, end_ns)) and
        ``gaps_dropped`` (gaps beyond ``capacity``).
    """
    import torch

    out = torch.zeros(3 + 2 * capacity, dtype=torch.int64, device="cuda")
    out[0], out[1] = int(duration_s * 1e9), int(threshold_us * 1e3)
    _gap_probe_kernel[(1,)](out, capacity, num_warps=1)
    values = out.cpu().tolist()
    count = int(values[2])
    kept = min(count, capacity)
    pairs = [(values[3 + 2 * i], values[4 + 2 * i]) for i in range(kept)]
    return {"first_ns": values[0], "last_ns": values[1], "gaps": pairs, "gaps_dropped": count - kept}
