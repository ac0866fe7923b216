"""The device's copy bandwidth and FP32/TF32-off matmul rate by CUDA events (torch), as one JSON line: what a new GPU
offers against the one a bundle was trained on. Each figure is the best of 10 timed repeats after 3 warm-ups.

    python3 results/gpu-general/device-calibration/bandwidth.py > bandwidth.json
"""

from __future__ import annotations

import json

import torch


def best_ms(fn, repeats: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return min(times)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"device": torch.cuda.get_device_name(), "l2_mb": torch.cuda.get_device_properties(0).L2_cache_size / 2**20}
    for mb in (8, 64, 1024, 4096):
        src = torch.empty(mb * 2**20 // 4, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        ms = best_ms(lambda src=src, dst=dst: dst.copy_(src))
        out[f"copy_{mb}mb_gbps"] = round(2 * src.numel() * 4 / ms / 1e6, 1)  # read + write
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    out["fp32_matmul_tflops"] = round(2 * 8192**3 / best_ms(lambda: a @ b) / 1e9, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
