"""Issue 15 A: why Hase's Triton GEMM fell to 21-62% of cuBLAS in TF32 from 1024^3 up, and what B's
layout does about it. On a CUDA GPU:

    PYTHONPATH=$PWD python3 results/device/tf32_layout.py OUT_DIR

Per GEMM shape of the device profile (square 256..16384, skinny 256 x N x N), TF32 products, times by
the device profile's event timer (gpu_profile.EventTimer, checked against CUPTI in the device run):
  - cublas            torch.mm(a, b), B a row-major (K, N) tensor (as the device profile gives it)
  - triton_n_major    Hase's kernel on that B as it is (the kernel before this study)
  - triton_copy       Hase's kernel with B copied to K-major first (``k_major_b=True``; the copy is
                      a kernel of the call and is timed with it); ``gemm`` now does this by itself
                      from K_MAJOR_COPY_MIN_M rows, where this study found it pays
  - k_major_input     B already K-major (a transposed view of an (N, K) tensor) for both libraries:
                      triton_k_major and cublas_k_major
Writes OUT_DIR/tf32_layout.json (rows with ms, TFLOPS, % of cuBLAS, the tuned tiles) and prints a
markdown table.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from hase_dagster.measure import triton_kernels as tk
from hase_dagster.measure.device_profile import gemm_shapes
from hase_dagster.measure.gpu_profile import EventTimer, gpu_info


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    timer = EventTimer(torch)
    rows = []
    for shape in gemm_shapes(quick=False):
        a = torch.randn(shape.m, shape.k, device="cuda")
        b = torch.randn(shape.k, shape.n, device="cuda")
        b_k_major = b.t().contiguous().t()
        calls = {
            "cublas": lambda: torch.mm(a, b),  # noqa: B023
            "triton_n_major": lambda: tk.gemm(a, b, "tf32", k_major_b=False),  # noqa: B023
            "triton_copy": lambda: tk.gemm(a, b, "tf32", k_major_b=True),  # noqa: B023
            "cublas_k_major": lambda: torch.mm(a, b_k_major),  # noqa: B023
            "triton_k_major": lambda: tk.gemm(a, b_k_major, "tf32"),  # noqa: B023
        }
        row = {"kind": shape.kind, "m": shape.m, "n": shape.n, "k": shape.k}
        reference = torch.mm(a, b)
        for name, call in calls.items():
            t0 = time.perf_counter()
            product = call()
            torch.cuda.synchronize()
            row[f"{name}_first_call_s"] = round(time.perf_counter() - t0, 3)
            if name.startswith("triton"):
                row[f"{name}_config"] = (tk.tuned_config("tf32") or {}).get("best")
            row[f"{name}_max_rel_error"] = float((product - reference).abs().max() / reference.abs().max())
            ms = timer.measure(call, target_ms=20)["ms"]
            row[f"{name}_ms"] = ms
            row[f"{name}_tflops"] = shape.flops / (ms * 1e-3) / 1e12
        for name in ("triton_n_major", "triton_copy"):
            row[f"{name}_pct_of_cublas"] = 100.0 * row["cublas_ms"] / row[f"{name}_ms"]
        row["triton_k_major_pct_of_cublas_k_major"] = 100.0 * row["cublas_k_major_ms"] / row["triton_k_major_ms"]
        rows.append(row)
        print(
            f"{shape.kind} {shape.m}x{shape.n}x{shape.k}: cuBLAS {row['cublas_tflops']:.0f} TFLOPS; Triton N-major "
            f"{row['triton_n_major_pct_of_cublas']:.0f}%, with the copy {row['triton_copy_pct_of_cublas']:.0f}%, "
            f"K-major input {row['triton_k_major_pct_of_cublas_k_major']:.0f}% of cuBLAS on it",
            flush=True,
        )
        (out / "tf32_layout.json").write_text(
            json.dumps({"gpu": gpu_info(torch), "torch": torch.__version__, "rows": rows}, indent=1)
        )
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
