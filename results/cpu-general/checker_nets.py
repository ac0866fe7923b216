"""Random networks from a second, independent generator: families that neither the zoo nor
``hase_dagster.analysis.random_nets`` draws, for checking the CPU predictor on networks it has never seen.

Written apart from ``random_nets`` on purpose (no shared block code): a check drawn from our own
generator would share its blind spots. Traits drawn per seed: input size 128-256 px, a strided or
patchifying stem, and 3-4 stages of blocks among
- MobileNetV3-style inverted residuals (kernel 1, 3, 5 or 7, SE gated by Hardsigmoid or Sigmoid),
- ConvNeXt blocks (7x7 depthwise, LayerNorm over channels, 4x MLP with GELU),
- ResNeXt bottlenecks (grouped 3x3, groups 2-32),
- Inception-style concat blocks (1x1, 3x3, double 3x3, pool projection),
- ShuffleNet-style blocks (channel split, depthwise, channel shuffle),
and, for some seeds, a small transformer encoder over the last feature map's tokens; plus pure
ViT-style encoders (patch embedding, 2-4 layers, width 96-256).

    .venv/bin/python results/cpu-general/checker_nets.py OUT_DIR --seeds 701-712 --batch-sizes 1,4 [--jobs 8]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from torch import nn

from hase_dagster.analysis.zoo import trace_to_onnx

ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU, "hardswish": nn.Hardswish}
BLOCKS = ("mbv3", "convnext", "resnext", "inception", "shuffle")


def _round8(x: float) -> int:
    return max(8, int(round(x / 8)) * 8)


class ConvNormAct(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU):
        layers: list[nn.Module] = [
            nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(c_out),
        ]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class SqueezeGate(nn.Module):
    def __init__(self, channels: int, gate: type) -> None:
        super().__init__()
        squeezed = _round8(channels / 4)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.fc2(torch.relu(self.fc1(s))))


class MBv3(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, rng: np.random.Generator, act: type) -> None:
        super().__init__()
        hidden = _round8(c_in * float(rng.choice([2.5, 3, 4, 6])))
        k = int(rng.choice([1, 3, 5, 7]))
        layers: list[nn.Module] = [
            ConvNormAct(c_in, hidden, 1, act=act),
            ConvNormAct(hidden, hidden, k, stride, hidden, act),
        ]
        if rng.random() < 0.5:
            layers.append(SqueezeGate(hidden, nn.Hardsigmoid if rng.random() < 0.5 else nn.Sigmoid))
        layers.append(ConvNormAct(hidden, c_out, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.skip = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.skip else y


class ConvNeXt(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, rng: np.random.Generator, act: type) -> None:
        super().__init__()
        self.down = ConvNormAct(c_in, c_out, 2, 2, act=None) if stride == 2 or c_in != c_out else nn.Identity()
        if stride == 1 and c_in != c_out:
            self.down = nn.Conv2d(c_in, c_out, 1)
        self.dw = nn.Conv2d(c_out, c_out, 7, 1, 3, groups=c_out)
        self.norm = nn.LayerNorm(c_out)
        self.mlp = nn.Sequential(nn.Linear(c_out, 4 * c_out), nn.GELU(), nn.Linear(4 * c_out, c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.mlp(self.norm(y)).permute(0, 3, 1, 2)
        return x + y


class ResNeXt(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, rng: np.random.Generator, act: type) -> None:
        super().__init__()
        groups = int(rng.choice([2, 4, 8, 16, 32]))
        mid = max(groups * 4, _round8(c_out / 2) // groups * groups)
        self.body = nn.Sequential(
            ConvNormAct(c_in, mid, 1, act=act),
            ConvNormAct(mid, mid, 3, stride, groups, act),
            ConvNormAct(mid, c_out, 1, act=None),
        )
        self.proj = ConvNormAct(c_in, c_out, 1, stride, act=None) if stride != 1 or c_in != c_out else nn.Identity()
        self.act = act()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.proj(x))


class Inception(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, rng: np.random.Generator, act: type) -> None:
        super().__init__()
        share = c_out // 4 // 8 * 8 or 8
        last = c_out - 3 * share
        self.pre = nn.MaxPool2d(3, 2, 1) if stride == 2 else nn.Identity()
        self.b1 = ConvNormAct(c_in, share, 1, act=act)
        self.b3 = nn.Sequential(
            ConvNormAct(c_in, share // 2 or 8, 1, act=act), ConvNormAct(share // 2 or 8, share, 3, act=act)
        )
        self.b5 = nn.Sequential(
            ConvNormAct(c_in, share // 2 or 8, 1, act=act),
            ConvNormAct(share // 2 or 8, share, 3, act=act),
            ConvNormAct(share, share, 3, act=act),
        )
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), ConvNormAct(c_in, last, 1, act=act))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


class Shuffle(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, rng: np.random.Generator, act: type) -> None:
        super().__init__()
        self.stride = stride
        half = c_out // 2
        if stride == 2 or c_in != c_out:
            self.left = nn.Sequential(
                ConvNormAct(c_in, c_in, 3, stride, c_in, None), ConvNormAct(c_in, half, 1, act=act)
            )
            branch_in = c_in
        else:
            self.left = None
            branch_in = half
        self.right = nn.Sequential(
            ConvNormAct(branch_in, half, 1, act=act),
            ConvNormAct(half, half, 3, stride, half, None),
            ConvNormAct(half, half, 1, act=act),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.left is None:
            a, b = x.chunk(2, 1)
            out = torch.cat([a, self.right(b)], 1)
        else:
            out = torch.cat([self.left(x), self.right(x)], 1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


class Tokens(nn.Module):
    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            width, heads, 2 * width, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        return self.encoder(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(n, c, h, w)


class ConvNet(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        act = ACTIVATIONS[str(rng.choice(list(ACTIVATIONS)))]
        width = _round8(rng.integers(16, 49))
        if rng.random() < 0.3:
            stem: nn.Module = ConvNormAct(3, width, 4, 4, act=act)
        else:
            stem = ConvNormAct(3, width, int(rng.choice([3, 5, 7])), 2, act=act)
        modules = [stem]
        kinds = []
        for _stage in range(int(rng.integers(3, 5))):
            kind = str(rng.choice(BLOCKS))
            c_out = min(_round8(width * rng.uniform(1.4, 2.2)), 384)
            if kind == "shuffle":
                c_out = c_out // 16 * 16 or 16
            for index in range(int(rng.integers(1, 4))):
                block = {
                    "mbv3": MBv3,
                    "convnext": ConvNeXt,
                    "resnext": ResNeXt,
                    "inception": Inception,
                    "shuffle": Shuffle,
                }
                modules.append(block[kind](width, c_out, 2 if index == 0 else 1, rng, act))
                width = c_out
            kinds.append(kind)
        if rng.random() < 0.3:
            heads = int(rng.choice([h for h in (2, 4, 8) if width % h == 0]))
            modules.append(Tokens(width, int(rng.integers(1, 3)), heads))
            kinds.append("tokens")
        self.features = nn.Sequential(*modules)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 1000))
        self.traits = {"activation": act.__name__, "stages": kinds, "width": width}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class ViT(nn.Module):
    def __init__(self, seed: int, image: int) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        width = int(rng.choice([96, 128, 192, 256]))
        patch = int(rng.choice([16, 32]) if image >= 192 else 16)
        self.embed = nn.Conv2d(3, width, patch, patch)
        tokens = (image // patch) ** 2
        self.position = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        layer = nn.TransformerEncoderLayer(
            width, width // 32, 4 * width, activation="gelu", batch_first=True, norm_first=True
        )
        layers = int(rng.integers(2, 5))
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 1000)
        self.traits = {"vit": True, "width": width, "patch": patch, "layers": layers}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.encoder(t)).mean(1))


def build(seed: int) -> tuple[nn.Module, int, dict]:
    """The network of ``seed``, its input size (px) and its traits; one seed in four is a ViT."""
    rng = np.random.default_rng(seed + 10_000)
    image = int(rng.choice([128, 160, 192, 224, 256]))
    torch.manual_seed(seed)
    net: nn.Module = ViT(seed, image) if rng.random() < 0.25 else ConvNet(seed)
    return net.eval(), image, {"image": image, **net.traits}


def seeds_of(text: str) -> list[int]:
    """``701-712`` or ``701,705`` as a list of seeds."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def export_seed(seed: int, out: Path, batches: list[int], opset: int) -> dict | None:
    """Write the network of ``seed`` at each batch size into ``out``; its traits, or None (said on stderr) when the
    draw does not build."""
    torch.set_num_threads(1)  # one export per process when --jobs runs several
    written: list[Path] = []
    try:
        net, image, drawn = build(seed)
        for batch in batches:
            written.append(out / f"chk_s{seed}_i{image}_b{batch}.onnx")
            trace_to_onnx(net, torch.randn(batch, 3, image, image), written[-1], opset)
    except RuntimeError as exc:  # a draw with a zero-width layer (seeds 751, 789): no network, say so, go on
        for path in written:
            path.unlink(missing_ok=True)
        print(f"chk_s{seed}: does not build ({str(exc).splitlines()[0]})", file=sys.stderr)
        return None
    print(f"chk_s{seed}: {json.dumps(drawn)}", file=sys.stderr)
    return drawn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", default="701-712")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--jobs", type=int, default=1, help="seeds exported at once, each in its own process")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = seeds_of(args.seeds)
    batches = [int(b) for b in args.batch_sizes.split(",")]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            drawn = list(pool.map(partial(export_seed, out=args.out, batches=batches, opset=args.opset), seeds))
    else:
        drawn = [export_seed(seed, args.out, batches, args.opset) for seed in seeds]
    traits = {f"chk_s{seed}": d for seed, d in zip(seeds, drawn) if d is not None}
    (args.out / "traits.json").write_text(json.dumps(traits, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
