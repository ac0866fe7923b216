"""Set AG (issue 11): networks written the way people write their own modules, with the operators that come out of
it: attention through ``torch.einsum`` (ONNX ``Einsum``), RMSNorm and LayerNorm by hand (``Pow``, ``ReduceMean``,
``Sqrt``, ``Div``, or ORT's fusions of them), GELU's tanh form, squared and Star-ReLU (``Pow``), SiLU and SwiGLU by
hand, causal masks by ``masked_fill`` (``Where``), a class token written into the sequence by slice assignment
(``ScatterND``) and projections as einsums with a weight. No profile, probe or earlier set has these operators: the
zoo, the probes and timm export the library's own modules.

Each seed draws one network from the space below (input kind, width, depth, heads, MLP ratio, and each operator's
form) and exports it at each batch size into OUT as ``hops_sSEED_iS_bB.onnx`` (S: the image size, or the sequence
length of a token model), random weights, opset 17; ``traits.json`` lists what each seed drew.

    .venv/bin/python results/cpu-general/hand_ops_set.py OUT --seeds 901-912 --batch-sizes 1,4
"""

from __future__ import annotations

import argparse
import json
import math
import random
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn  # noqa: PLR0402 (torch's own idiom)
from checker_nets import seeds_of  # this script's folder: the checker sets' seed ranges

WIDTHS = (128, 192, 256, 384, 512)
HEAD_DIMS = (32, 64)
NORMS = ("rms", "hand_layernorm", "layernorm")
ACTIVATIONS = ("gelu_tanh", "squared_relu", "star_relu", "silu_hand", "swiglu", "gelu")
ATTENTION = ("einsum_heads_first", "einsum_tokens_first", "matmul")


def activation(kind: str, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
    """The hidden layer's activation as hand-written code computes it (``gate``: SwiGLU's second projection)."""
    if kind == "gelu_tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))
    if kind == "squared_relu":
        return torch.relu(x) ** 2
    if kind == "star_relu":
        return 0.8944 * torch.relu(x) ** 2 - 0.4472
    if kind == "silu_hand":
        return x * torch.sigmoid(x)
    if kind == "swiglu":
        assert gate is not None
        return x * torch.sigmoid(x) * gate
    return nn.functional.gelu(x)


class Norm(nn.Module):
    def __init__(self, kind: str, width: int) -> None:
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(width))
        self.bias = nn.Parameter(0.1 * torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "rms":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        if self.kind == "hand_layernorm":
            mean = x.mean(-1, keepdim=True)
            variance = (x - mean).pow(2).mean(-1, keepdim=True)
            return (x - mean) / torch.sqrt(variance + 1e-5) * self.weight + self.bias
        return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias)


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, form: str, causal: bool, einsum_projections: bool) -> None:
        super().__init__()
        self.heads, self.form, self.causal = heads, form, causal
        self.einsum_projections = einsum_projections
        self.qkv = nn.Parameter(torch.randn(width, 3 * width) / math.sqrt(width))
        self.out = nn.Parameter(torch.randn(width, width) / math.sqrt(width))

    def project(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bnd,de->bne", x, weight) if self.einsum_projections else x @ weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        head = width // self.heads
        q, k, v = self.project(x, self.qkv).reshape(batch, tokens, 3, self.heads, head).unbind(2)  # (B, N, H, D)
        if self.form == "einsum_tokens_first":
            scores = torch.einsum("bnhd,bmhd->bhnm", q, k) / math.sqrt(head)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, N, D)
            scores = (
                torch.einsum("bhid,bhjd->bhij", q, k) if self.form == "einsum_heads_first" else q @ k.transpose(-1, -2)
            ) / math.sqrt(head)
        if self.causal:
            mask = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        weights = scores.softmax(-1)
        if self.form == "einsum_tokens_first":
            y = torch.einsum("bhnm,bmhd->bnhd", weights, v).reshape(batch, tokens, width)
        elif self.form == "einsum_heads_first":
            y = torch.einsum("bhij,bhjd->bhid", weights, v).transpose(1, 2).reshape(batch, tokens, width)
        else:
            y = (weights @ v).transpose(1, 2).reshape(batch, tokens, width)
        return self.project(y, self.out)


class Block(nn.Module):
    def __init__(self, width: int, traits: dict[str, Any]) -> None:
        super().__init__()
        self.norm1, self.norm2 = Norm(traits["norm"], width), Norm(traits["norm"], width)
        self.attention = Attention(
            width, width // traits["head_dim"], traits["attention"], traits["causal"], traits["einsum_projections"]
        )
        hidden = width * traits["mlp_ratio"]
        self.act = traits["activation"]
        self.up = nn.Linear(width, hidden * (2 if self.act == "swiglu" else 1))
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        h = self.up(self.norm2(x))
        if self.act == "swiglu":
            a, b = h.chunk(2, dim=-1)
            h = activation(self.act, a, b)
        else:
            h = activation(self.act, h)
        return x + self.down(h)


class HandNet(nn.Module):
    def __init__(self, traits: dict[str, Any]) -> None:
        super().__init__()
        self.traits = traits
        width = traits["width"]
        if traits["input"] == "tokens":
            self.embed = nn.Embedding(8000, width)
        elif traits["input"] == "conv_stem":
            c = width // 4
            self.stem = nn.Sequential(
                nn.Conv2d(3, c, 3, 2, 1), nn.BatchNorm2d(c), nn.SiLU(),
                nn.Conv2d(c, c, 3, 2, 1, groups=c), nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.SiLU(),
                nn.Conv2d(c, width, traits["patch"] // 4, traits["patch"] // 4),
            )  # fmt: skip
        else:
            self.patch = nn.Conv2d(3, width, traits["patch"], traits["patch"])
        self.position = nn.Parameter(0.02 * torch.randn(1, traits["tokens"], width))
        self.cls = nn.Parameter(0.02 * torch.randn(width))
        self.blocks = nn.Sequential(*[Block(width, traits) for _ in range(traits["depth"])])
        self.norm = Norm(traits["norm"], width)
        self.head = nn.Linear(width, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.traits["input"] == "tokens":
            x = self.embed(x)
        else:
            x = (self.stem(x) if self.traits["input"] == "conv_stem" else self.patch(x)).flatten(2).transpose(1, 2)
        x = x + self.position
        if self.traits["class_token_by_assignment"]:
            x = x.clone()
            x[:, 0] = x[:, 0] + self.cls  # slice assignment: ScatterND
        x = self.norm(self.blocks(x))
        pooled = x[:, 0] if self.traits["class_token_by_assignment"] else x.mean(1)
        return self.head(pooled)


def draw(seed: int) -> dict[str, Any]:
    """One network's traits, drawn from ``seed``."""
    rng = random.Random(seed)
    width = rng.choice(WIDTHS)
    kind = rng.choice(("patches", "conv_stem", "tokens"))
    traits: dict[str, Any] = {
        "seed": seed,
        "input": kind,
        "width": width,
        "head_dim": rng.choice([h for h in HEAD_DIMS if width % h == 0]),
        "depth": rng.randint(2, 8),
        "mlp_ratio": rng.choice((2, 3, 4)),
        "norm": rng.choice(NORMS),
        "activation": rng.choice(ACTIVATIONS),
        "attention": rng.choice(ATTENTION),
        "einsum_projections": rng.random() < 0.3,
        "class_token_by_assignment": rng.random() < 0.3,
    }
    if kind == "tokens":
        traits["size"] = traits["tokens"] = rng.choice((64, 128, 256))
        traits["causal"] = rng.random() < 0.6
    else:
        shapes = ((160, 16), (192, 16), (224, 16), (224, 14), (224, 32), (256, 16), (256, 32))
        # the convolution stem halves twice and then patches by patch / 4, which 14 does not divide
        size, patch = rng.choice([s for s in shapes if kind == "patches" or s[1] % 4 == 0])
        traits.update(size=size, patch=patch, tokens=(size // patch) ** 2, causal=False)
    return traits


def export(traits: dict[str, Any], batch: int, out: Path) -> Path:
    """``traits``' network at ``batch`` as ``hops_sSEED_iS_bB.onnx`` in ``out`` (weights from the seed)."""
    torch.manual_seed(traits["seed"])
    net = HandNet(traits).eval()
    if traits["input"] == "tokens":
        sample = torch.randint(0, 8000, (batch, traits["tokens"]))
    else:
        sample = torch.randn(batch, 3, traits["size"], traits["size"])
    path = out / f"hops_s{traits['seed']}_i{traits['size']}_b{batch}.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, sample, str(path), opset_version=17, dynamo=False, input_names=["input"])
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", default="901-912")
    parser.add_argument("--batch-sizes", default="1,4")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    drawn = [draw(seed) for seed in seeds_of(args.seeds)]
    for traits in drawn:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            print(export(traits, batch, args.out).name, flush=True)
    (args.out / "traits.json").write_text(json.dumps(drawn, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
