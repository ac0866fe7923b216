"""Issue 15 A: which tiles bring Hase's TF32 Triton GEMM to 70% of cuBLAS at 1024^3 on a row-major B.
On a CUDA GPU (needs only torch with Triton: no payload):

    PYTHONPATH=$PWD python3 results/device/tf32_configs.py OUT_DIR

At 1024^3 and for each B layout (row-major as given; K-major, the layout a copy makes), times the
kernel with fixed tiles (``gemm_with_config``, no autotuning) under every tile config of a grid (BLOCK_M
32/64/128, BLOCK_N 64/128/256, BLOCK_K 32/64, 4 or 8 warps, 3 or 4 stages, within 200 KiB of shared
memory) by the device profile's event timer, against ``torch.mm`` on the same operands. Writes
OUT_DIR/tf32_configs.json and prints the five best configs per case.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import triton

from hase_dagster.measure import triton_kernels as tk
from hase_dagster.measure.gpu_profile import EventTimer, gpu_info

SMEM_LIMIT_BYTES = 200 * 1024
SIZES = (1024,)


def grid() -> list[tuple[int, int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) within the shared-memory limit."""
    configs = []
    for bm, bn, bk, warps, stages in itertools.product((32, 64, 128), (64, 128, 256), (32, 64), (4, 8), (3, 4)):
        smem = stages * (bm * bk + bk * bn) * 4
        if smem <= SMEM_LIMIT_BYTES and bm * bn // (warps * 32) <= 128:
            configs.append((bm, bn, bk, warps, stages))
    return configs


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    timer = EventTimer(torch)
    rows = []
    started = time.perf_counter()
    for size in SIZES:
        a = torch.randn(size, size, device="cuda")
        b_row_major = torch.randn(size, size, device="cuda")
        # What ``gemm``'s copy of an N-major B to K-major costs at this size (one transpose kernel).
        copy_ms = timer.measure(lambda: b_row_major.t().contiguous(), target_ms=10)["ms"]  # noqa: B023
        print(f"{size}^3: copying B to K-major {copy_ms * 1e3:.1f} us", flush=True)
        for layout, b in (("row_major", b_row_major), ("k_major", b_row_major.t().contiguous().t())):
            reference = torch.mm(a, b)
            cublas_ms = timer.measure(lambda: torch.mm(a, b), target_ms=20)["ms"]  # noqa: B023
            results = []
            for config in grid():
                # B as given: no copy to K-major (the K-major case is laid out so already).
                run = functools.partial(tk.gemm_with_config, a, b, "tf32", *config, k_major_b=False)
                try:
                    c, _ = run()
                    torch.cuda.synchronize()
                except Exception as failure:  # out of resources on this device: the config cannot run here
                    results.append({"config": config, "error": str(failure).splitlines()[0][:200]})
                    continue
                error = float((c - reference).abs().max() / reference.abs().max())
                ms = timer.measure(run, target_ms=10)["ms"]
                results.append(
                    {"config": config, "ms": ms, "pct_of_cublas": 100 * cublas_ms / ms, "max_rel_error": error}
                )
            ok = sorted((r for r in results if "ms" in r), key=lambda r: r["ms"])
            rows.append(
                {"size": size, "layout": layout, "cublas_ms": cublas_ms, "copy_ms": copy_ms, "results": results}
            )
            print(f"{size}^3 {layout}: cuBLAS {cublas_ms * 1e3:.1f} us; best of {len(ok)} (of {len(results)}):")
            for r in ok[:5]:
                us, pct, error = r["ms"] * 1e3, r["pct_of_cublas"], r["max_rel_error"]
                print(f"  {r['config']}: {us:.1f} us, {pct:.0f}% (rel. error {error:.1e})")
            print(f"  ({time.perf_counter() - started:.0f} s so far)", flush=True)
            (out / "tf32_configs.json").write_text(
                json.dumps(
                    {"gpu": gpu_info(torch), "torch": torch.__version__, "triton": triton.__version__, "rows": rows}
                )
            )
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
