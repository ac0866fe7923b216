"""Where a whole model's wall time goes on the GPU, from `hase cupti` output (one JSON per run):
CUPTI kernel time, the gaps between kernels inside the device span (device clock minus CUPTI),
and the per-run host work outside it (host clock minus device clock).

    python3 results/gpu-grid/decompose.py results/gpu-grid/runs/*/cupti_models.json
"""

import json
import sys
from pathlib import Path

print("| model | host wall ms | device span ms | CUPTI kernels ms | gaps ms | per-run host ms | GPU kernels |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for source in sys.argv[1:]:
    for row in json.loads(Path(source).read_text())["comparisons"]:
        host, span, kernels = row["runner_median_ms"], row["device_clock_median_ms"], row["device_ms"]
        print(
            f"| {Path(row['path']).stem} | {host:.3f} | {span:.3f} | {kernels:.3f} | {span - kernels:.3f} "
            f"| {host - span:.3f} | {row['gpu_kernels_per_run']:.0f} |"
        )
