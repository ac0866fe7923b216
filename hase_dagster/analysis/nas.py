"""Random NAS-style image classifiers drawn from a seed, over the design space of NAS, mobile and modern CNNs.

One function draws the architecture as plain data (:func:`draw_network_spec`, numpy only); the torch
builder (:func:`build_random_network`), the trait summary (:func:`describe_random_network`) and the
cost formula (:func:`network_cost`) all consume that spec, so they cannot disagree.

Design space: a stride-2 stem; 3-5 stages that halve the resolution at their start, 1-4 blocks each,
widths 16..320 (multiples of 8) growing by stage; blocks drawn per block from inverted residual
(expansion 1/3/4/6, depthwise 3/5/7, optional squeeze-excitation with a Sigmoid or Hardsigmoid gate),
basic or bottleneck residual (grouped or not, identity or projection shortcut), inception-like concat
(2-4 branches of kernel 1/3/5/7 or pooling), fused-MBConv and 1x1-conv blocks; activations ReLU, ReLU6,
SiLU, GELU or Hardswish per network, sometimes per stage; BatchNorm after every conv; in about a quarter
of the networks a final stage of 1-2 transformer encoder layers over the last feature map's tokens
(total stride at least 32, so 512 px gives at most 256 tokens); an optional 1x1 head conv, global
average pooling and a Linear classifier. Draws outside the budget (0.05-5 GMACs at 224 px, at most
30M parameters) are redrawn from the same generator, so every seed gives one fixed network.

Export with the multi-head-attention fast path off (``torch.backends.mha.set_fastpath_enabled(False)``,
as :func:`hase_dagster.analysis.zoo.export_variant` does): the exporter cannot write its fused op.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BLOCK_TYPES = ("inverted_residual", "residual", "concat", "fused_mbconv", "conv1x1")
BLOCK_WEIGHTS = (0.35, 0.22, 0.15, 0.18, 0.10)
ACTIVATIONS = ("relu", "relu6", "silu", "gelu", "hardswish")
# The budget every drawn network keeps, at this input size.
BUDGET_INPUT_SIZE = 224
MIN_MACS = 50_000_000
MAX_MACS = 5_000_000_000
MAX_PARAMS = 30_000_000
MAX_WIDTH = 320
_MAX_DRAWS = 200


@dataclass(frozen=True)
class BlockSpec:
    """One block, with every channel count the builder and the cost formula use.

    ``hidden`` is the expanded width (inverted residual, fused-MBConv) or the middle width (residual);
    ``se_hidden`` 0 means no squeeze-excitation; a concat block's ``branches`` are
    (kernel, reduce width, output width) with kernel 0 a 3x3 max-pool branch and reduce 0 no 1x1 reduce.
    """

    kind: str
    c_in: int
    width: int
    stride: int
    activation: str
    kernel: int = 1
    hidden: int = 0
    groups: int = 1
    se_hidden: int = 0
    se_gate: str = ""
    bottleneck: bool = False
    identity: bool = False
    projection: bool = False
    branches: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class TransformerSpec:
    """The final token stage: an entry conv (stride 2 when the stride so far is below 32), an optional
    depthwise conv position encoding, and ``layers`` encoder layers of width ``d_model``."""

    layers: int
    heads: int
    d_model: int
    ffn: int
    norm_first: bool
    entry: str  # "downsample" (3x3 stride 2), "project" (1x1) or "" (none)
    cpe: bool


@dataclass(frozen=True)
class NetworkSpec:
    """A whole network: stem, blocks by stage, optional transformer stage and head conv (0: none)."""

    seed: int
    activation: str
    stem: int
    stages: tuple[tuple[BlockSpec, ...], ...]
    transformer: TransformerSpec | None
    head_width: int

    @property
    def blocks(self) -> tuple[BlockSpec, ...]:
        return tuple(b for stage in self.stages for b in stage)

    @property
    def features_width(self) -> int:
        """Channels into the head (before the head conv)."""
        return self.transformer.d_model if self.transformer else self.stages[-1][-1].width


def _round8(value: float) -> int:
    return max(8, int(round(value / 8)) * 8)


def _choice(rng: np.random.Generator, options: tuple[Any, ...] | list[Any], p: list[float] | None = None) -> Any:
    """One of ``options`` (kept as its Python type; ``rng.choice`` would give numpy scalars)."""
    return options[int(rng.choice(len(options), p=p))]


def _grow(rng: np.random.Generator, width: int) -> int:
    """The next stage's width: 1.2x-2x the previous one, a multiple of 8, at most MAX_WIDTH."""
    return min(MAX_WIDTH, max(width + 8, _round8(width * rng.uniform(1.2, 2.0))))


def _draw_block(rng: np.random.Generator, c_in: int, width: int, stride: int, activation: str) -> BlockSpec:
    weights = list(BLOCK_WEIGHTS)
    if stride > 1:  # a 1x1 conv does not downsample
        weights[BLOCK_TYPES.index("conv1x1")] = 0.0
    kind = _choice(rng, BLOCK_TYPES, [w / sum(weights) for w in weights])
    same_shape = stride == 1 and c_in == width
    base = {"kind": kind, "c_in": c_in, "width": width, "stride": stride, "activation": activation}
    if kind == "inverted_residual":
        hidden = c_in * _choice(rng, (1, 3, 4, 6), [0.15, 0.2, 0.25, 0.4])
        se = rng.random() < 0.4
        return BlockSpec(
            **base,
            kernel=_choice(rng, (3, 5, 7), [0.5, 0.3, 0.2]),
            hidden=hidden,
            se_hidden=_round8(hidden / _choice(rng, (4, 8, 16))) if se else 0,
            se_gate=_choice(rng, ("sigmoid", "hardsigmoid")) if se else "",
            identity=same_shape,
        )
    if kind == "fused_mbconv":
        return BlockSpec(
            **base,
            kernel=_choice(rng, (3, 5), [0.8, 0.2]),
            hidden=c_in * _choice(rng, (1, 3, 4, 6), [0.3, 0.2, 0.4, 0.1]),
            identity=same_shape,
        )
    if kind == "residual":
        bottleneck = rng.random() < 0.5
        hidden = _round8(width * _choice(rng, (0.25, 0.5, 1.0))) if bottleneck else width
        groups = [g for g in (4, 8, 32) if hidden % g == 0 and hidden // g >= 4]
        se = rng.random() < 0.2
        return BlockSpec(
            **base,
            kernel=3,
            hidden=hidden,
            groups=_choice(rng, groups) if groups and rng.random() < 0.4 else 1,
            se_hidden=_round8(width / 16) if se else 0,
            se_gate="sigmoid" if se else "",
            bottleneck=bottleneck,
            identity=same_shape,
            projection=not same_shape,
        )
    if kind == "concat":
        kernels = rng.choice([0, 1, 3, 5, 7], size=min(int(rng.integers(2, 5)), width // 8), replace=False)
        shares = [max(8, width // len(kernels) // 8 * 8) for _ in kernels]
        shares[0] += width - sum(shares)
        branches = []
        for k, share in zip(kernels.tolist(), shares):
            reduce = _round8(min(c_in, share) / 2) if k >= 3 and rng.random() < 0.6 else 0
            branches.append((int(k), reduce, share))
        return BlockSpec(**base, kernel=0, branches=tuple(branches))
    return BlockSpec(**base, kernel=1, hidden=width)  # conv1x1


def _draw_once(rng: np.random.Generator, seed: int) -> NetworkSpec:
    activation = _choice(rng, ACTIVATIONS)
    stem = int(rng.integers(2, 7)) * 8  # 16..48
    width = c_in = stem
    stages = []
    for _ in range(int(rng.integers(3, 6))):
        stage_activation = activation if rng.random() >= 0.3 else _choice(rng, ACTIVATIONS)
        width = _grow(rng, width)
        blocks = []
        for index in range(int(rng.integers(1, 5))):
            blocks.append(_draw_block(rng, c_in, width, 2 if index == 0 else 1, stage_activation))
            c_in = width
        stages.append(tuple(blocks))
    transformer = None
    if rng.random() < 0.25:
        heads = _choice(rng, (2, 4, 8))
        d_model = max(heads, int(round(_grow(rng, width) / heads)) * heads)
        entry = "downsample" if len(stages) < 4 else ("project" if d_model != width else "")
        transformer = TransformerSpec(
            layers=int(rng.integers(1, 3)),
            heads=heads,
            d_model=d_model,
            ffn=d_model * _choice(rng, (2, 4)),
            norm_first=bool(rng.random() < 0.5),
            entry=entry,
            cpe=bool(rng.random() < 0.5),
        )
        width = d_model
    head_width = _choice(rng, (640, 960, 1280)) if rng.random() < 0.4 else 0
    return NetworkSpec(seed, activation, stem, tuple(stages), transformer, head_width if head_width > width else 0)


def draw_network_spec(seed: int) -> NetworkSpec:
    """The architecture of ``seed``, drawn with ``numpy.random.default_rng(seed)``.

    Args:
        seed: any non-negative integer; equal seeds give equal specs.

    Returns:
        The first draw from that generator whose cost at 224 px is within the budget
        (MIN_MACS..MAX_MACS multiply-accumulates, at most MAX_PARAMS parameters).
    """
    rng = np.random.default_rng(seed)
    for _ in range(_MAX_DRAWS):
        spec = _draw_once(rng, seed)
        macs, params = _spec_cost(spec, BUDGET_INPUT_SIZE)
        if MIN_MACS <= macs <= MAX_MACS and params <= MAX_PARAMS:
            return spec
    raise RuntimeError(f"seed {seed}: no network within the budget in {_MAX_DRAWS} draws")


# --- cost (multiply-accumulates of convs, linears and attention; parameters) --------------------------


def _out(size: int, stride: int) -> int:
    return (size - 1) // stride + 1  # odd kernels padded k // 2 (and 3x3 max pool padded 1)


def _conv(c_in: int, c_out: int, k: int, size_out: int, groups: int = 1, bn: bool = True) -> tuple[int, int]:
    weights = k * k * (c_in // groups) * c_out
    return weights * size_out * size_out, weights + (2 * c_out if bn else c_out)  # BN scale+shift, or bias


def _se(channels: int, hidden: int) -> tuple[int, int]:
    return channels * hidden * 2, channels * hidden * 2 + hidden + channels  # two 1x1 convs with bias


def _block_cost(b: BlockSpec, size: int) -> tuple[int, int, int]:
    """(MACs, parameters, output size) of one block at input ``size``."""
    out = _out(size, b.stride)
    parts: list[tuple[int, int]] = []
    if b.kind == "inverted_residual":
        if b.hidden != b.c_in:
            parts.append(_conv(b.c_in, b.hidden, 1, size))
        parts.append(_conv(b.hidden, b.hidden, b.kernel, out, b.hidden))
        parts += [_se(b.hidden, b.se_hidden)] if b.se_hidden else []
        parts.append(_conv(b.hidden, b.width, 1, out))
    elif b.kind == "fused_mbconv":
        if b.hidden == b.c_in:
            parts.append(_conv(b.c_in, b.width, b.kernel, out))
        else:
            parts += [_conv(b.c_in, b.hidden, b.kernel, out), _conv(b.hidden, b.width, 1, out)]
    elif b.kind == "residual":
        if b.bottleneck:
            parts += [_conv(b.c_in, b.hidden, 1, size), _conv(b.hidden, b.hidden, 3, out, b.groups)]
            parts.append(_conv(b.hidden, b.width, 1, out))
        else:
            parts += [_conv(b.c_in, b.width, 3, out), _conv(b.width, b.width, 3, out, b.groups)]
        parts += [_se(b.width, b.se_hidden)] if b.se_hidden else []
        parts += [_conv(b.c_in, b.width, 1, out)] if b.projection else []
    elif b.kind == "concat":
        for k, reduce, share in b.branches:
            if k == 0:
                parts.append(_conv(b.c_in, share, 1, out))
            elif reduce:
                parts += [_conv(b.c_in, reduce, 1, size), _conv(reduce, share, k, out)]
            else:
                parts.append(_conv(b.c_in, share, k, out))
    else:
        parts.append(_conv(b.c_in, b.width, 1, out))
    return sum(p[0] for p in parts), sum(p[1] for p in parts), out


def _spec_cost(spec: NetworkSpec, input_size: int, channels_in: int = 3, num_classes: int = 1000) -> tuple[int, int]:
    size = _out(input_size, 2)
    macs, params = _conv(channels_in, spec.stem, 3, size)
    width = spec.stem
    for b in spec.blocks:
        block_macs, block_params, size = _block_cost(b, size)
        macs, params, width = macs + block_macs, params + block_params, b.width
    if spec.transformer:
        t = spec.transformer
        if t.entry:
            size = _out(size, 2 if t.entry == "downsample" else 1)
            m, p = _conv(width, t.d_model, 3 if t.entry == "downsample" else 1, size)
            macs, params = macs + m, params + p
        if t.cpe:
            m, p = _conv(t.d_model, t.d_model, 3, size, t.d_model, bn=False)
            macs, params = macs + m, params + p
        d, tokens = t.d_model, size * size
        macs += t.layers * (tokens * (4 * d * d + 2 * d * t.ffn) + 2 * tokens * tokens * d)
        params += t.layers * (4 * d * d + 4 * d + 2 * d * t.ffn + t.ffn + d + 4 * d) + (2 * d if t.norm_first else 0)
        width = d
    if spec.head_width:
        m, p = _conv(width, spec.head_width, 1, size)
        macs, params, width = macs + m, params + p, spec.head_width
    return macs + width * num_classes, params + width * num_classes + num_classes


def network_cost(seed: int, input_size: int = 224, channels_in: int = 3, num_classes: int = 1000) -> tuple[int, int]:
    """Multiply-accumulates and parameters of the network of ``seed`` for one image.

    Args:
        seed: the network's seed.
        input_size: the image's height and width in pixels.
        channels_in: image channels.
        num_classes: classifier outputs.

    Returns:
        (MACs of convs, linears and attention matmuls for one image; parameter count, BatchNorm included).
    """
    return _spec_cost(draw_network_spec(seed), input_size, channels_in, num_classes)


def describe_random_network(seed: int) -> dict[str, Any]:
    """The drawn traits of the network of ``seed``, without building it (no torch).

    Args:
        seed: the network's seed.

    Returns:
        ``block_types`` and ``kernel_sizes`` (per block, in order; a concat block's kernel is its
        branches' largest), ``depthwise_kernels``, ``activations`` (distinct), ``has_se``,
        ``has_concat``, ``has_grouped``, ``has_transformer``, ``depth`` (blocks plus transformer
        layers), ``num_stages``, ``widths`` (stem, then each stage's), ``macs_224``, ``params`` and
        the whole ``spec`` as plain data.
    """
    spec = draw_network_spec(seed)
    blocks = spec.blocks
    macs, params = _spec_cost(spec, BUDGET_INPUT_SIZE)
    return {
        "seed": seed,
        "block_types": [b.kind for b in blocks],
        "kernel_sizes": [max(k for k, _, _ in b.branches) if b.kind == "concat" else b.kernel for b in blocks],
        "depthwise_kernels": sorted({b.kernel for b in blocks if b.kind == "inverted_residual"}),
        "activations": sorted({spec.activation, *(b.activation for b in blocks)}),
        "se_gates": sorted({b.se_gate for b in blocks if b.se_hidden}),
        "has_se": any(b.se_hidden for b in blocks),
        "has_concat": any(b.kind == "concat" for b in blocks),
        "has_grouped": any(b.groups > 1 for b in blocks),
        "has_transformer": spec.transformer is not None,
        "depth": len(blocks) + (spec.transformer.layers if spec.transformer else 0),
        "num_stages": len(spec.stages),
        "widths": [spec.stem, *(stage[-1].width for stage in spec.stages)],
        "macs_224": macs,
        "params": params,
        "spec": asdict(spec),
    }


# --- torch modules ---------------------------------------------------------------------------------


def build_random_network(seed: int, channels_in: int = 3, num_classes: int = 1000) -> Any:  # -> torch.nn.Module
    """The eval-mode classifier of ``seed`` for (batch, channels_in, H, W) images, H and W 128..512.

    Args:
        seed: the network's seed (:func:`draw_network_spec`).
        channels_in: image channels.
        num_classes: classifier outputs.

    Returns:
        A ``torch.nn.Module`` in eval mode with weights from torch's current random state.
    """
    return _build(draw_network_spec(seed), channels_in, num_classes)


def _build(spec: NetworkSpec, channels_in: int, num_classes: int) -> Any:
    import torch
    from torch import nn

    activations = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "gelu": nn.GELU, "hardswish": nn.Hardswish}

    def conv(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: str = "") -> nn.Sequential:
        layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False)]
        layers.append(nn.BatchNorm2d(c_out))
        return nn.Sequential(*layers, *([activations[act]()] if act else []))

    class SqueezeExcite(nn.Module):
        def __init__(self, channels: int, hidden: int, gate: str, act: str) -> None:
            super().__init__()
            self.gate = nn.Sequential(
                nn.AdaptiveAvgPool2d(1),
                nn.Conv2d(channels, hidden, 1),
                nn.ReLU() if gate == "hardsigmoid" else activations[act](),  # MobileNetV3 / EfficientNet
                nn.Conv2d(hidden, channels, 1),
                nn.Hardsigmoid() if gate == "hardsigmoid" else nn.Sigmoid(),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.gate(x)

    class Block(nn.Module):
        def __init__(self, b: BlockSpec) -> None:
            super().__init__()
            self.kind, self.identity = b.kind, b.identity
            act, body = b.activation, list[nn.Module]()
            self.shortcut: nn.Module | None = conv(b.c_in, b.width, 1, b.stride) if b.projection else None
            self.post: nn.Module = activations[act]() if b.kind == "residual" else nn.Identity()
            self.branches = nn.ModuleList()
            if b.kind == "inverted_residual":
                body += [conv(b.c_in, b.hidden, 1, act=act)] if b.hidden != b.c_in else []
                body.append(conv(b.hidden, b.hidden, b.kernel, b.stride, b.hidden, act))
                body += [SqueezeExcite(b.hidden, b.se_hidden, b.se_gate, act)] if b.se_hidden else []
                body.append(conv(b.hidden, b.width, 1))
            elif b.kind == "fused_mbconv":
                if b.hidden == b.c_in:
                    body.append(conv(b.c_in, b.width, b.kernel, b.stride, act=act))
                else:
                    body += [conv(b.c_in, b.hidden, b.kernel, b.stride, act=act), conv(b.hidden, b.width, 1)]
            elif b.kind == "residual":
                if b.bottleneck:
                    body += [conv(b.c_in, b.hidden, 1, act=act), conv(b.hidden, b.hidden, 3, b.stride, b.groups, act)]
                    body.append(conv(b.hidden, b.width, 1))
                else:
                    body += [conv(b.c_in, b.width, 3, b.stride, act=act), conv(b.width, b.width, 3, 1, b.groups)]
                body += [SqueezeExcite(b.width, b.se_hidden, b.se_gate, act)] if b.se_hidden else []
            elif b.kind == "concat":
                for k, reduce, share in b.branches:
                    if k == 0:
                        branch = nn.Sequential(nn.MaxPool2d(3, b.stride, 1), conv(b.c_in, share, 1, act=act))
                    elif reduce:
                        reducer = conv(b.c_in, reduce, 1, act=act)
                        branch = nn.Sequential(reducer, conv(reduce, share, k, b.stride, act=act))
                    else:
                        branch = conv(b.c_in, share, k, b.stride, act=act)
                    self.branches.append(branch)
            else:
                body.append(conv(b.c_in, b.width, 1, act=act))
            self.body = nn.Sequential(*body)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.kind == "concat":
                return torch.cat([branch(x) for branch in self.branches], dim=1)
            y = self.body(x)
            if self.identity:
                y = y + x
            elif self.shortcut is not None:
                y = y + self.shortcut(x)
            return self.post(y)

    class TokenStage(nn.Module):
        def __init__(self, c_in: int, t: TransformerSpec, act: str) -> None:
            super().__init__()
            self.entry: nn.Module = nn.Identity()
            if t.entry:  # 3x3 stride 2 to reach a total stride of 32, or 1x1 to the model width
                down = t.entry == "downsample"
                self.entry = conv(c_in, t.d_model, 3 if down else 1, 2 if down else 1, act=act)
            self.cpe = nn.Conv2d(t.d_model, t.d_model, 3, 1, 1, groups=t.d_model) if t.cpe else None
            layer = nn.TransformerEncoderLayer(
                t.d_model, t.heads, t.ffn, dropout=0.0, activation="gelu", batch_first=True, norm_first=t.norm_first
            )
            norm = nn.LayerNorm(t.d_model) if t.norm_first else None
            self.encoder = nn.TransformerEncoder(layer, t.layers, norm=norm, enable_nested_tensor=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.entry(x)
            if self.cpe is not None:
                x = x + self.cpe(x)
            n, c, h, w = x.shape
            tokens = self.encoder(x.flatten(2).transpose(1, 2))  # (n, h*w, c)
            return tokens.transpose(1, 2).reshape(n, c, h, w)

    class Network(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            modules: list[nn.Module] = [conv(channels_in, spec.stem, 3, 2, act=spec.activation)]
            modules += [Block(b) for b in spec.blocks]
            width = spec.stages[-1][-1].width
            if spec.transformer:
                modules.append(TokenStage(width, spec.transformer, spec.activation))
            width = spec.features_width
            if spec.head_width:
                modules.append(conv(width, spec.head_width, 1, act=spec.activation))
                width = spec.head_width
            self.features = nn.Sequential(*modules)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x))

    return Network().eval()
