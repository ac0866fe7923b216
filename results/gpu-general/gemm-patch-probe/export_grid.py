"""Export the probe grid of this folder: one-layer ONNX files with a static batch, each one kernel family Hase's GPU
tables hardly cover (results/gpu-general/user-kernels-ah/matmul-weight.md):

- ``lin_*``: ``nn.Linear(D, R*D)`` on ``[B, T, D]`` tokens, with and without bias (``x @ W`` exports as MatMul with a
  weight operand; with bias ORT's CUDA EP runs a Gemm over reshapes);
- ``patch_*``: ``nn.Conv2d(C, 2C or 768, k, stride=k)`` patch embeddings on ``[B, C, P, P]``.

    python3 export_grid.py OUT_DIR [BATCHES]    # BATCHES comma-separated, default 16,64

``BATCHES=1`` writes the batch-1 files the profile ``gpu_projection_probes`` fingerprints its kernels with.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BATCHES = (16, 64)
LINEAR = [(d, r, t) for d in (256, 512, 768, 1024, 1536, 2048) for r in (1, 4) for t in (49, 197, 577)]
PATCH = [(k, c, p) for k in (4, 8, 16, 32) for c in (3, 96, 256) for p in (224, 256)]


def patch_out_channels(c: int) -> int:
    """A ViT-style embedding of RGB, else a downsampling stage that doubles the channels."""
    return 768 if c == 3 else 2 * c


def flops(name: str) -> float:
    """A grid file's multiply-adds x 2, from its name."""
    b = int(re.search(r"_b(\d+)\.onnx", name).group(1))
    if name.startswith("lin_"):
        d, r, t = (int(x) for x in re.search(r"_d(\d+)_r(\d+)_t(\d+)_", name).groups())
        return 2.0 * b * t * d * r * d
    k, c, p = (int(x) for x in re.search(r"_k(\d+)_c(\d+)_p(\d+)_", name).groups())
    return 2.0 * b * (p // k) ** 2 * patch_out_channels(c) * c * k * k


def main() -> int:
    import torch  # here: compare.py reads the grid's shapes on a machine without the export's needs

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for b in [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else BATCHES:
        for d, r, t in LINEAR:
            for bias in (True, False):
                path = out / f"lin_d{d}_r{r}_t{t}_{'bias' if bias else 'nobias'}_b{b}.onnx"
                if not path.exists():
                    torch.onnx.export(torch.nn.Linear(d, r * d, bias=bias), (torch.randn(b, t, d),), path, dynamo=False)
        for k, c, p in PATCH:
            if p % k:
                continue
            path = out / f"patch_k{k}_c{c}_p{p}_b{b}.onnx"
            if not path.exists():
                conv = torch.nn.Conv2d(c, patch_out_channels(c), k, stride=k)
                torch.onnx.export(conv, (torch.randn(b, c, p, p),), path, dynamo=False)
    print(len(list(out.glob("*.onnx"))), "files in", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
