"""Set R (issue 11; fixed 2026-11-27 06:30 UTC, after the ``tokens`` probes were measured on the H100 and before any
of these was timed, to judge the probes blind): transformers at widths and sequence lengths no profile and no earlier
set has. Vision: DeiT-S/16 and DeiT-Ti/16 (torchvision's VisionTransformer at 384 and 192 wide, 197 tokens). Text
(``transformer_encoder``, the input its embeddings): a MiniLM-sized encoder (384 wide, 12 layers, 128 tokens),
BERT-base at 256 tokens, BERT-large at 512 tokens (1024 wide, 24 layers) and a small encoder over 1024 tokens (256
wide, 4 layers). None is drawn from a probe space.

Each network is exported at each batch size into OUT as ``NAME_iS_bB.onnx`` (vision, S the image size) or
``NAME_sS_bB.onnx`` (text, S the sequence length): random weights, opset 17, validated by one ORT run.

    .venv/bin/python results/gpu-general/tokens/set_r.py OUT --batch-sizes 1,16,64 [--only deit_s16,minilm] [--ep cuda]

(``--ep cuda`` on a GPU host: the text encoders are traced and validated on the GPU, as the zoo's are there.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hase_dagster.analysis.zoo import ModelVariant, export_variant, trace_to_onnx, validate_onnx
from hase_dagster.core.config import EpName, ZooModel

# name -> (hidden width, heads, MLP width, layers)
VISION = {"deit_s16": (384, 6, 1536, 12), "deit_ti16": (192, 3, 768, 12)}
# name -> (width, heads, feed-forward width, layers, tokens)
TEXT = {
    "minilm": (384, 12, 1536, 12, 128),
    "bert_base": (768, 12, 3072, 12, 256),
    "bert_large": (1024, 16, 4096, 24, 512),
    "long_small": (256, 4, 1024, 4, 1024),
}


def export_vision(name: str, out: Path, batch: int) -> Path:
    """torchvision's VisionTransformer of ``VISION[name]``'s size (patch 16, 224 px) at ``batch``."""
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    hidden, heads, mlp, layers = VISION[name]
    torch.manual_seed(0)
    module = VisionTransformer(224, 16, layers, heads, hidden, mlp).eval()
    path = out / f"{name}_i224_b{batch}.onnx"
    partial = path.with_suffix(".onnx.partial")
    trace_to_onnx(module, torch.randn(batch, 3, 224, 224), partial, 17)
    validate_onnx(partial)
    partial.replace(path)
    return path


def export_text(name: str, out: Path, batch: int, ep: EpName = "cpu") -> Path:
    """A ``transformer_encoder`` of ``TEXT[name]``'s size at ``batch``, as the zoo exports its own."""
    width, heads, feed_forward, layers, tokens = TEXT[name]
    model = ZooModel(
        name=name, kind="transformer_encoder", d_model=width, nhead=heads, dim_feedforward=feed_forward,
        num_layers=layers,
    )  # fmt: skip
    return Path(export_variant(ModelVariant(model, tokens, batch), out, 17, ep).path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--only", default="", help="comma-separated names (default: all)")
    parser.add_argument("--skip", default="", help="NAME_bB,... files not to make (default: none)")
    parser.add_argument("--ep", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in (*VISION, *TEXT) if not args.only or n in args.only.split(",")]
    for name in names:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            if f"{name}_b{batch}" in args.skip.split(","):
                continue
            made = (
                export_vision(name, args.out, batch) if name in VISION else export_text(name, args.out, batch, args.ep)
            )
            print(made.name, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
