"""Random NAS-style image classifiers, drawn from a seed: a model-level training and test set that
covers the design space users' networks come from, not only the zoo's architectures.

The spec (:func:`draw_spec`) is plain data drawn with numpy from the seed; :func:`build_random_network`
builds torch modules from it, so the same seed always gives the same network. Traits drawn:
inverted residual blocks (expansion 1-6, depthwise 3/5/7, optional squeeze-excitation), plain and
grouped residual blocks, inception-style concat blocks, fused-MBConv blocks, five activations, and
sometimes a small transformer encoder stage over the last feature map's tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hase_dagster.analysis.torch_blocks import conv_bn, squeeze_excite

BLOCK_TYPES = ("inverted_residual", "residual", "concat", "fused_mbconv")
ACTIVATIONS = ("relu", "relu6", "silu", "gelu", "hardswish")


@dataclass(frozen=True)
class BlockSpec:
    """One block: its type, output width, stride, kernel size and options."""

    kind: str
    width: int
    stride: int
    kernel: int
    expand: int = 1
    se: bool = False
    groups: int = 1
    branches: tuple[int, ...] = ()


@dataclass(frozen=True)
class NetworkSpec:
    """A whole network: stem width, blocks, activation, transformer stage (0 layers: none)."""

    seed: int
    stem: int
    activation: str
    blocks: tuple[BlockSpec, ...]
    transformer_layers: int = 0
    transformer_heads: int = 0
    traits: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _width(rng: np.random.Generator, low: int, high: int) -> int:
    return int(rng.integers(low // 8, high // 8 + 1)) * 8


def draw_spec(seed: int) -> NetworkSpec:
    """The network of ``seed``: 3-5 stages that halve the resolution, 1-4 blocks each.

    Args:
        seed: any integer; equal seeds give equal specs.

    Returns:
        The spec, with a ``traits`` summary (block types, kernel sizes, SE, concat, transformer).
    """
    rng = np.random.default_rng(seed)
    activation = str(rng.choice(ACTIVATIONS))
    stem = _width(rng, 16, 48)
    stages = int(rng.integers(3, 6))
    width = stem
    blocks: list[BlockSpec] = []
    for _ in range(stages):
        width = min(_width(rng, int(width * 1.2) + 8, int(width * 2.2) + 8), 320)
        for index in range(int(rng.integers(1, 5))):
            stride = 2 if index == 0 else 1
            kind = str(rng.choice(BLOCK_TYPES, p=[0.4, 0.25, 0.15, 0.2]))
            kernel = int(rng.choice([3, 5, 7])) if kind == "inverted_residual" else int(rng.choice([1, 3, 3, 5]))
            groups = int(rng.choice([g for g in (1, 1, 4, 8, 16) if width % g == 0])) if kind == "residual" else 1
            blocks.append(
                BlockSpec(
                    kind=kind,
                    width=width,
                    stride=stride,
                    kernel=kernel,
                    expand=int(rng.choice([1, 3, 4, 6])) if kind in ("inverted_residual", "fused_mbconv") else 1,
                    se=bool(rng.random() < 0.4) and kind in ("inverted_residual", "residual"),
                    groups=groups,
                    branches=tuple(
                        int(k) for k in rng.choice([0, 1, 3, 5, 7], size=int(rng.integers(2, 5)), replace=False)
                    )
                    if kind == "concat"
                    else (),
                )
            )
    layers = int(rng.integers(1, 3)) if rng.random() < 0.25 else 0
    heads = int(rng.choice([h for h in (2, 4, 8) if width % h == 0])) if layers else 0
    traits = {
        "block_types": sorted({b.kind for b in blocks}),
        "depthwise_kernels": sorted({b.kernel for b in blocks if b.kind == "inverted_residual"}),
        "se": any(b.se for b in blocks),
        "concat": any(b.kind == "concat" for b in blocks),
        "grouped": any(b.groups > 1 for b in blocks),
        "transformer": layers > 0,
        "blocks": len(blocks),
        "widths": [stem, *[b.width for b in blocks]],
    }
    return NetworkSpec(seed, stem, activation, tuple(blocks), layers, heads, traits)


def build_random_network(seed: int, num_classes: int = 1000) -> Any:  # -> torch.nn.Module
    """The eval-mode torch module of :func:`draw_spec` ``(seed)`` for (batch, 3, H, W) images."""
    import torch
    from torch import nn

    spec = draw_spec(seed)

    def act() -> nn.Module:
        return {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "gelu": nn.GELU, "hardswish": nn.Hardswish}[
            spec.activation
        ]()

    def conv(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, activation: bool = True) -> nn.Module:
        return conv_bn(c_in, c_out, k, stride, groups, act if activation else None)

    def SqueezeExcite(channels: int) -> nn.Module:  # noqa: N802 (reads as the module it builds)
        return squeeze_excite(channels, nn.ReLU)

    class Block(nn.Module):
        def __init__(self, c_in: int, b: BlockSpec) -> None:
            super().__init__()
            self.residual = b.stride == 1 and c_in == b.width and b.kind != "concat"
            layers: list[nn.Module]
            if b.kind == "inverted_residual":
                hidden = c_in * b.expand
                layers = [conv(c_in, hidden, 1)] if b.expand > 1 else []
                layers.append(conv(hidden, hidden, b.kernel, b.stride, hidden))
                layers += ([SqueezeExcite(hidden)] if b.se else []) + [conv(hidden, b.width, 1, activation=False)]
            elif b.kind == "fused_mbconv":
                hidden = c_in * b.expand
                layers = [conv(c_in, hidden, 3, b.stride), conv(hidden, b.width, 1, activation=False)]
            elif b.kind == "residual":
                layers = [
                    conv(c_in, b.width, 3, b.stride, b.groups if c_in % b.groups == 0 else 1),
                    conv(b.width, b.width, b.kernel, 1, b.groups, activation=False),
                ]
                layers += [SqueezeExcite(b.width)] if b.se else []
            else:  # concat: parallel branches (0 = max pool + 1x1), widths summing to b.width
                share = [b.width // len(b.branches) // 8 * 8 or 8 for _ in b.branches]
                share[0] += b.width - sum(share)
                self.branches = nn.ModuleList(
                    nn.Sequential(nn.MaxPool2d(3, b.stride, 1), conv(c_in, w, 1))
                    if k == 0
                    else conv(c_in, w, k, b.stride)
                    for k, w in zip(b.branches, share)
                )
                layers = []
            self.body = nn.Sequential(*layers)
            self.kind = b.kind

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.kind == "concat":
                return torch.cat([branch(x) for branch in self.branches], dim=1)
            y = self.body(x)
            return x + y if self.residual else y

    class Tokens(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(
                width, spec.transformer_heads, 2 * width, activation="gelu", batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, spec.transformer_layers, enable_nested_tensor=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, c, h, w = x.shape
            tokens = self.encoder(x.flatten(2).transpose(1, 2))
            return tokens.transpose(1, 2).reshape(n, c, h, w)

    class Network(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            modules: list[nn.Module] = [conv(3, spec.stem, 3, 2)]
            width = spec.stem
            for b in spec.blocks:
                modules.append(Block(width, b))
                width = b.width
            if spec.transformer_layers:
                modules.append(Tokens(width))
            self.features = nn.Sequential(*modules)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x))

    return Network().eval()
