"""Export the benchmark's models with a dynamic batch (random weights, 224 px images, 128-token
sequences) into models/ (git-ignored), skipping those already there.

    .venv/bin/python results/prediction-speed/export_models.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hase_dagster.analysis.serving_models import export_dynamic_batch
from hase_dagster.core.config import ZooModel

OUT = Path(__file__).resolve().parent / "models"
# The H100 bundle's training zoo, then models it never saw (held out in the gpu_general and
# gpu_small_batch profiles).
ZOO = [
    ZooModel(name="resnet18"),
    ZooModel(name="resnet50"),
    ZooModel(name="mobilenet_v2"),
    ZooModel(name="transformer_encoder", kind="transformer_encoder", num_layers=12),
]
NEVER_SEEN = [
    ZooModel(name="resnet34"),
    ZooModel(name="efficientnet_b0"),
    ZooModel(name="densenet121"),
    ZooModel(name="squeezenet1_1"),
    ZooModel(name="convnext_tiny"),
    ZooModel(name="shufflenet_v2_x1_0"),
    ZooModel(name="mobilenet_v3_small"),
    ZooModel(name="nas_s201", kind="random_nas", seed=201),
    ZooModel(name="nas_s202", kind="random_nas", seed=202),
    ZooModel(name="vit_b_16"),
]


def main() -> int:
    for model in ZOO + NEVER_SEEN:
        path = OUT / f"{model.name}.onnx"
        if path.exists():
            continue
        started = time.monotonic()
        size = 128 if model.kind == "transformer_encoder" else 224
        export_dynamic_batch(model, size, path)
        print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
