"""Design-space probes: small networks of one sampled cell, drawn from a seed, whose kernels cover
the shapes real networks use rather than the zoo's (issue 11, item 1: adaptive kernel sampling).

A probe is a patchify stem that brings the image to the cell's resolution, one to two copies of a
cell with sampled channels, kernel size, stride, groups, activation and options, and a pooled linear
head. Cells: plain convolutions (dense, grouped, depthwise; kernel 1-7), inverted residuals with
optional squeeze-excitation, concat branches, ConvNeXt blocks (LayerNorm), transformer encoder
layers and MLPs over the feature map's tokens, and pooling. Widths are log-uniform between 16 and
1024, resolutions 7-112 px, under caps on a cell's FLOPs and activation size so batch 128 fits.

Two probe spaces: ``cells`` draws a cell type and its options as above; ``grouped_conv`` draws only
grouped convolution cells, parameterised as RegNet and ResNeXt are, by the channels per group (4-64)
and a width of 32-1024, so up to 128 narrow groups (``cells`` draws the number of groups, 2-32, and
rarely makes groups of 8 channels at widths of a few hundred, which RegNet has); ``depthwise`` draws
depthwise convolutions as MobileNet- and EfficientNet-style networks and random NAS cells use them:
inverted residuals (expand 1x1, depthwise 3/5/7, optional squeeze-excitation, project) and plain
depthwise or channel-changing grouped convolutions, at 14-112 px (a family held out ran its depthwise
kernels of 5 and 7 at 56 px 15-40% faster than predicted: the cells space draws few of them);
``movement`` draws the data movement of windowed attention (Swin): a pad of the spatial dims, a roll
(ORT: Slice and Concat), a crop back (Slice), an L2 normalisation over channels (ReduceL2, Clip, Expand,
Div) and a 2x2 patch merge (four strided Slices and a Concat), in channels-first or channels-last layout,
at 14-112 px: no earlier space makes them, and swin_v2_t ran its Pads 22x and its ReduceL2s 6.5x slower on
the H100 than the regressor guessed for a family it was never trained on (results/gpu-general/README.md);
``highres`` draws dense convolutions (kernel 1, 3 or 5, 16-256 channels) on 112 and 224 px maps, as VGG's
first layers and 320-512 px inputs run them: every 224 px convolution in the tables is a 3-channel stem, and
VGG at batch 64 was 7-16% too fast on three sets (results/cpu-general/README.md, set I); ``windows`` draws
Swin's window partition as Swin builds it: a LayerNorm over the channels of a channels-last map, the pad of its
spatial dims to a multiple of the window (0 when it divides, as in Swin v1 at 224 px), an optional
cyclic shift, the window partition and its reverse (Reshape and Transpose), an optional L2 normalisation per
head and the crop back. The LayerNorm keeps ORT's layout optimizer from moving the pad back to channels-first,
where a ``movement`` probe's pad ends up: there ORT runs its NCHW pad (1.3-1.7 TB/s on the H100), while a
channels-last pad takes ORT's generic ``_PadKernel`` at 53-61 GB/s (and a pad of nothing is a copy at ~2.9 TB/s).
``operators`` draws the operators that decoders, generators, audio, video, recurrent and style networks run and no
earlier space makes: transposed convolutions, nearest and bilinear resizes and pixel shuffles (each upsampling
2x), group and instance normalisation, dilated convolutions (DeepLab's atrous rates), 1-D convolutions over a
sequence, 3-D convolutions over frames, LSTM and GRU layers over tokens, reflection and replication pads, and
CBAM's channel-wise mean and max; with the activations those networks use (LeakyReLU, PReLU, ELU, Tanh, Softplus,
Mish, Hardtanh). A model made of them was predicted from trees that had never seen the operator (static
detection names such kernels ``fallback``): a 3-D ResNet's convolutions read as 2-D ones, a transposed one as
whatever its bytes resembled.
``recurrent`` draws LSTM and GRU layers alone, over the range recurrent networks use (9-1024 steps, 64-1024
units, 1-3 layers, one or two directions): the operators space drew four, at 49-784 steps.
``image_io`` draws the two ends of image-to-image networks (super-resolution, style transfer, denoisers, U-Nets,
GAN generators, depth and segmentation heads), which classifiers never have: a stride-1 stem from 3 channels
(kernel 3-9) at 56-224 px, an activation on the full-resolution map, an optional 2x upsample (pixel shuffle,
nearest, bilinear, or a transposed convolution that is itself the output layer) and an output convolution to 1-21
channels (kernel 1-9) with an optional Tanh or Sigmoid. No table had a convolution of 4 or fewer output channels
above 28 px: SRResNet's 9x9 output convolution at 256 px ran 63 ms on the CPU, predicted 11 ms, and its PReLUs and
pixel shuffles at 128-256 px 3-4x their prediction (results/cpu-general/README.md, set P).
``tokens`` draws transformer encoder layers over a sequence, as vision transformers (a patch grid of 49-1024 tokens,
often with a class token: 50, 197, 257, 577...) and text encoders (16-1024 tokens) run them, 192-1280 wide with heads
of 32 or 64 channels, an MLP of 2-4x and one or two layers: the ``cells`` space's attention runs only over square
maps of 49, 196 or 784 tokens, and the tables' large matrix products came from two sequence lengths (128 and 384)
of one width, so the trees had nothing between batch x tokens of 8,192 and 24,576 rows (ViT-B/16 at batch 64,
12,608 rows, ran its MLP's matrix products 20-36% faster on the H100 than predicted).
``branches`` draws branches summed over their own axis and weighed by a Softmax over it (ResNeSt's split attention,
SKNet's selective kernels, MobileViTv2's linear attention): no table had a ReduceSum, and ResNeSt-14d's radix sums,
a quarter of its GPU time, were predicted at a sixth of it. ``reductions`` draws ReduceSum/Mean/L2/Max over any axes
of channels-first and channels-last maps, and ConvNeXtV2's global response norm: ORT's CUDA EP reduces anything but
the last axes in cuDNN's generic kernel. ``narrow_convnext`` draws ConvNeXt blocks 16-96 channels wide, whose
LayerNorms run over rows shorter than any transformer's (results/gpu-general/README.md, "Branch sums" and
"Reductions over any axes").

Probes are training samples, not architectures a user runs: their family (``design_space``) is
always trained on and never a test case (``learn.evaluation``). :func:`draw_probe` is plain data
drawn with numpy; :func:`build_probe_network` builds the torch module, so a seed always gives the
same network.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, get_args

import numpy as np

from hase_dagster.analysis.torch_blocks import conv_bn, squeeze_excite
from hase_dagster.core.config import ProbeSpace

DESIGN_SPACE_FAMILY = "design_space"
CELL_TYPES = ("conv", "inverted_residual", "concat", "convnext", "attention", "mlp", "pool")
# Drawn more often where ORT runs more distinct kernels per cell (convolutions) and where the zoo
# lacks shapes (depthwise, attention).
CELL_WEIGHTS = (0.3, 0.2, 0.1, 0.1, 0.15, 0.07, 0.08)
ACTIVATIONS = ("none", "relu", "relu6", "silu", "gelu", "hardswish", "sigmoid")
RESOLUTIONS = (7, 14, 28, 56, 112)
# The image size the stem's patch is chosen for; another input size scales the cell's resolution.
REFERENCE_INPUT = 224
# The ``norms`` space: normalisations and gates that stay kernels of their own in ORT's graph (a BatchNorm after
# an activation or after a token-wise Linear, PoolFormer's pool-minus-input mixer, a hard-sigmoid gate).
NORM_CELLS = ("bn_tokens", "bn_post", "pool_sub", "hard_gate")
NORM_CELL_WEIGHTS = (0.35, 0.35, 0.15, 0.15)
NORM_RESOLUTIONS = (7, 14, 16, 28, 56)
# The ``resize`` space: one Resize between a stem and a 1x1 convolution, bicubic more often than not (no other
# space draws it), from 7-224 px maps to 0.5-4x their side; at 224 px mostly 3 channels, an image resized whole.
RESIZE_MODES = ("bicubic", "bicubic", "bilinear", "nearest")
RESIZE_RESOLUTIONS = (7, 14, 28, 56, 112, 224)
RESIZE_SCALES = (0.5, 0.75, 0.93, 1.07, 1.5, 2.0, 4.0)
# Per-sample caps: a cell's multiply-adds (resnet50 has 4.1 G in all) and its widest activation.
# The ``heads`` space: attention maps over the heads axis, as CaiT's talking heads mix them (the maps permuted so the
# 2-16 heads are innermost, a Linear over them, permuted back) or as CoaT's factorized attention normalises keys
# (a Softmax over the token axis, not the last one, then k^T v): layouts no other space draws.
HEADS_MODES = ("talking", "axis_softmax")
HEADS_COUNTS = (2, 4, 4, 6, 8, 12, 16)
HEADS_DIMS = (16, 32, 48, 64)
HEADS_RESOLUTIONS = (7, 14, 16, 28)
# The ``branches`` space: branches summed over their own axis (ONNX ReduceSum), as ResNeSt's split attention (a
# radix-2-4 grouped convolution seen as (batch, radix, channels, H, W), summed over the radix and weighted by a
# Softmax over it), SKNet's selective kernels (two dilated paths stacked, then the same) and MobileViTv2's linear
# attention (keys weighted by a Softmax over the tokens, summed over them) run them. On the H100 ResNeSt-14d's
# radix sums read 280 GB/s (cuDNN's generic reduction), a sixth of a copy's bandwidth.
BRANCH_MODES = ("split_attention", "split_attention", "selective_kernel", "linear_attention")
BRANCH_RADIXES = (2, 2, 2, 3, 4)
BRANCH_RESOLUTIONS = (7, 14, 28, 56)
# The ``reductions`` space: a reduction (ReduceSum/Mean/L2/Max) over any axes of a channels-first or channels-last map,
# its result gating the map, or ConvNeXtV2's global response norm (an L2 norm over the spatial axes of a channels-last
# map, divided by its mean over the channels). ORT's CUDA EP runs reductions over the last axes in its own kernels and
# any other axes in cuDNN's generic one, several times slower per byte (ResNeSt's radix sum: 280 GB/s on the H100).
REDUCTION_OPS = ("sum", "mean", "l2", "max")
# (layout, reduced axes of the 4-D map in that layout): CBAM's channel pool, global pools, a row or a column
REDUCTION_AXES = (
    ("first", (1,)), ("first", (2, 3)), ("first", (2,)), ("first", (3,)), ("first", (1, 2, 3)),
    ("last", (1, 2)), ("last", (3,)), ("last", (1,)), ("last", (2,)),
)  # fmt: skip
REDUCTION_RESOLUTIONS = (7, 14, 28, 56)
# The ``reduce_grid`` space: every (op, layout and axes) pair of REDUCTION_OPS x REDUCTION_AXES, so that none is left to
# chance as in ``reductions`` (24 random draws left ReduceL2 over a channels-first map's spatial axes out, and
# ConvNeXtV2's global response norm in timm is that reduction: on the H100 it ran at 240 GB/s, where the tables'
# ReduceL2 over other axes ran 290-410, and was predicted 37% fast). The 36 pairs in an order fixed once
# (REDUCE_GRID_ORDER_SEED), two to a probe: seed s takes pair s mod 18, so 18 consecutive seeds cover all of them.
REDUCE_GRID_ORDER_SEED = 20261128
REDUCE_GRID_PER_PROBE = 2
# The ``reduce_grid_wide`` space: the same pairs in the same order, each on a map as wide as real networks make it at
# that resolution (a stage's width times 1-8, as MLP expansions and attention widen it: 64-512 channels at 56 px,
# 512-2048 at 7 px). ``reduce_grid``'s widths are 32-768 at any resolution, and its one ReduceL2 over a channels-first
# map's spatial axes was 48 channels at 56 px where ConvNeXtV2's GRN reduces 160 at 56 px to 1280 at 7 px.
REDUCE_GRID_WIDE_BASE = 64 * 56  # channels x side of a stage (ResNet's 64 at 56 px, 512 at 7 px)
REDUCE_GRID_WIDE_MAX = 2048
# The ``grouped_expand`` space: convolutions of 2-4 wide groups whose output per group is 1/4-6 times the input per
# group (CPUBone's grouped pointwise and stride-2 layers). Every other grouped space keeps a group's input and output
# widths equal; on the H100 a 1x1 of 2 groups, 128 -> 512 channels a group at 7 px, ran 0.294 ms where a dense
# 256 -> 1024 one of the same map ran 0.050 ms, and the bundle predicted 0.068 (results/gpu-general/user-kernels-b).
GROUPED_EXPAND_GROUPS = (2, 2, 3, 4)
GROUPED_EXPAND_RATIOS = (0.25, 0.5, 2.0, 3.0, 4.0, 6.0)
GROUPED_EXPAND_GROUP_WIDTHS = (16, 256)
# The ``narrow_convnext`` space: ConvNeXt blocks 16-96 channels wide (ConvNeXt-atto/femto/pico, EdgeNeXt's first
# stages), whose channels-last LayerNorm runs over rows shorter than any transformer's: on the H100 ConvNeXtV2-atto's
# 17 LayerNorms over 40-320 channels took 1.02 ms at batch 64 where the bundle, with no row under 64 channels,
# predicted 0.36 ms.
NARROW_CONVNEXT_WIDTHS = (16, 96)
NARROW_CONVNEXT_RESOLUTIONS = (14, 28, 56, 56)
# The ``prenorm`` space: convolutions with no bias, as pre-norm blocks have them (VisFormer's, PoolFormer's and
# pre-activation ResNets': the norm comes before the convolution, so nothing folds into it, and a convolution right
# after another's activation has none either), and 16-channel grouped convolutions at stride 1 and 2 (RegNetZ's).
# ORT's CUDA Conv adds a bias with a second cuDNN call, a pass over the output; on the H100 VisFormer-tiny's
# bias-free 1x1 convolutions ran at 42-96 TFLOPS and the bundle, whose tables held 35 bias-free Conv rows of
# 13,562, predicted them 1.6-2.8x too slow; RegNetZ-B16's 16-channel grouped 3x3 +24..+99%
# (results/gpu-general/user-kernels).
PRENORM_MODES = ("mlp", "mlp", "grouped", "dense", "grouped16")
PRENORM_RESOLUTIONS = (7, 14, 14, 28, 28, 56, 112)
PRENORM_GROUP_WIDTHS = (8, 16, 24, 32, 48)
MAX_CELL_MACS = 3.0e9
MAX_ACTIVATION_ELEMENTS = 2.0e6
MAX_TOKENS = 784
PROBE_SPACES: tuple[str, ...] = get_args(ProbeSpace)
# Channels per group of the grouped_conv space: ResNeXt's 4-32 (32x4d) and RegNet's 8-64.
GROUP_WIDTHS = (4, 8, 16, 24, 32, 48, 64)
# Channels per group of the wide_grouped space, log-uniform: the large RegNets' 112-264 (x_8gf 120, x_16gf
# 128, x_32gf 168, y_16gf 112, y_32gf 232, y_128gf 264) and a margin either side.
WIDE_GROUP_WIDTH_RANGE = (72, 320)
# The widths a stage of those RegNets has at each map size (px -> channels, log-uniform): 224-336 at 56 px up
# to 2048-3712 at 7 px.
WIDE_GROUP_STAGE_WIDTHS = {56: (192, 448), 28: (384, 1024), 14: (768, 2048), 7: (1536, 4096)}
# The wide_grouped_strided space: a RegNet stage's first block, whose grouped 3x3 convolution halves the map
# (112 -> 56 px in x_16gf's first stage, 256 channels: 3.2 M elements a sample, past MAX_ACTIVATION_ELEMENTS).
# Drawn at the input map size, with the width of the stage it opens; held to the highres space's cap.
WIDE_GROUP_STRIDED_RESOLUTIONS = {2 * out: widths for out, widths in WIDE_GROUP_STAGE_WIDTHS.items()}
# Resolutions of the depthwise space and how often each is drawn: the large maps where depthwise
# kernels of 5 and 7 cost most.
DEPTHWISE_RESOLUTIONS = (14, 28, 56, 112)
DEPTHWISE_RESOLUTION_WEIGHTS = (0.2, 0.3, 0.3, 0.2)
MOVEMENT_RESOLUTIONS = (14, 28, 56, 112)
# Swin's window sizes (7 in v1, 8 in v2 at 256 px, 12 and 16 at 384 px).
WINDOW_SIZES = (7, 8, 12, 16)
HIGHRES_RESOLUTIONS = (112, 224)
# A 224 px map of 64 channels (VGG's first block) is 3.2 M elements a sample: past MAX_ACTIVATION_ELEMENTS,
# and still 1.6 GB at batch 128.
HIGHRES_MAX_ACTIVATION_ELEMENTS = 6.5e6
# The operators space: its cells, how often each is drawn, and the activations it draws.
OPERATOR_CELLS = ("upsample", "norm", "dilated", "conv1d", "conv3d", "recurrent", "pad", "reduce")
OPERATOR_CELL_WEIGHTS = (0.22, 0.12, 0.1, 0.12, 0.12, 0.1, 0.1, 0.12)
OPERATOR_ACTIVATIONS = ("relu", "leaky_relu", "prelu", "elu", "tanh", "softplus", "mish", "hardtanh", "silu", "gelu")
UPSAMPLE_MODES = ("transpose", "nearest", "bilinear", "pixel_shuffle")
# The recurrent space: sequence lengths as the side of the token map (9-1024 steps, log-spaced), up to three
# stacked layers. Language models, taggers, speech and time-series networks run 16-1024 steps of 64-1024 units;
# on the CUDA EP each step is a small GEMM chain, so a layer's time grows with the steps more than its FLOPs.
RECURRENT_SIDES = (3, 4, 6, 8, 11, 16, 23, 32)
# DeepLab's atrous rates (output stride 8 and 16) and WaveNet-style doublings.
DILATIONS = (2, 4, 6, 8, 12, 18)
# The image_io space: the stem's resolutions (the 224 px image average-pooled down to them first), image channels
# out (grey, flow, RGB, RGBA, a few and Pascal VOC's 21 classes), the output convolution's kernels, the upsample
# before it, and the output's activation.
IMAGE_IO_RESOLUTIONS = (56, 112, 224)
IMAGE_IO_OUT_CHANNELS = (1, 1, 2, 3, 3, 3, 4, 8, 21)
IMAGE_IO_KERNELS = (1, 3, 3, 5, 7, 9, 9)
IMAGE_IO_UPSAMPLES = ("none", "none", "pixel_shuffle", "nearest", "bilinear", "transpose")
IMAGE_IO_ACTIVATIONS = ("prelu", "prelu", "relu", "leaky_relu", "tanh", "silu", "elu")
# The tokens space: the sides of the patch grid its stem makes (224 px over a patch of 32, 28, 16, 14, 8 or 7 px),
# the text sequence lengths it draws besides 16-1024 log-uniform, its widths and how many channels a head has.
TOKENS_SIDES = (7, 8, 14, 16, 28, 32)
TOKENS_TEXT_LENGTHS = (32, 64, 128, 128, 256, 384, 512)
TOKENS_WIDTHS = (192, 256, 320, 384, 512, 640, 768, 768, 1024, 1280)
TOKENS_HEAD_WIDTHS = (32, 64, 64)
# A tokens cell's caps per sample: its multiply-adds (a BERT-large layer over 512 tokens has 6.4 G) and its widest
# tensor (the heads' score matrices: 16 heads over 1024 tokens are 16.8 M elements, 8.6 GB at batch 128).
TOKENS_MAX_CELL_MACS = 8.0e9
TOKENS_MAX_ACTIVATION_ELEMENTS = 1.2e7
# Per-sample caps (a cell's multiply-adds, its widest tensor) of the spaces whose caps are not
# (MAX_CELL_MACS, MAX_ACTIVATION_ELEMENTS).
SPACE_CAPS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(
        ("highres", "wide_grouped_strided", "image_io", "resize"), (MAX_CELL_MACS, HIGHRES_MAX_ACTIVATION_ELEMENTS)
    ),
    **dict.fromkeys(("tokens", "heads"), (TOKENS_MAX_CELL_MACS, TOKENS_MAX_ACTIVATION_ELEMENTS)),
}


@dataclass(frozen=True)
class ProbeSpec:
    """One probe: the cell type, its resolution and widths, and the cell's options.

    A ``movement`` cell reads the options so: ``kernel`` is the pad added after each spatial dim,
    ``groups`` the roll's shift (0: no roll), ``se`` an L2 normalisation over channels, ``residual`` the
    channels-last layout, ``stride`` 2 a 2x2 patch merge into 4x the channels and a 1x1 convolution to
    ``out_width`` (1: the moved tensor is added to the input). A ``windows`` cell: ``kernel`` is the window
    size, ``groups`` the cyclic shift (0: none), ``heads`` the heads of the L2 normalisation (``se``).
    The ``operators`` space's cells name their variant in ``mode`` (``upsample``: transpose, nearest, bilinear or
    pixel_shuffle; ``norm``: group or instance; ``recurrent``: lstm or gru; ``pad``: reflect or replicate;
    ``reduce``: spatial or channel); ``dilation`` is a convolution's dilation, ``groups`` a group norm's groups,
    ``expand`` a ``conv3d`` cell's frames and ``heads`` a ``recurrent`` cell's layers (``se``: bidirectional).
    An ``image_io`` cell: ``stem_kernel`` is its stem's kernel, ``width`` the stem's channels, ``mode`` the
    upsample (none, pixel_shuffle, nearest, bilinear or transpose), ``out_width`` and ``kernel`` the output
    convolution's channels and kernel (transpose: a 4x4 stride-2 transposed convolution is the output layer) and
    ``out_activation`` its activation (tanh, sigmoid or none).
    A ``tokens`` cell: ``resolution`` is the side of the stem's patch grid, ``tokens`` the sequence length its
    encoder runs over (the grid's first tokens, or all of them), ``se`` a class token put before them (one more),
    ``mode`` vision (the whole grid) or text (a drawn length), ``expand`` the MLP's ratio, ``residual`` norm first
    and ``depth`` the layers.
    A ``branches`` cell: ``mode`` split_attention (a 3x3 convolution in ``heads`` (the radix) x ``groups`` groups to
    ``heads`` x ``width`` channels, summed over the radix, a squeeze MLP whose Softmax over the radix weighs the
    branches' sum), selective_kernel (``heads`` 3x3 paths of dilation 1, 2, .. stacked and weighed the same way) or
    linear_attention (MobileViTv2's: a Softmax over the tokens of a 1x1 convolution's one channel weighs the keys,
    summed over the tokens, gating the values).
    A ``reductions`` cell: ``mode`` ``grn`` (ConvNeXtV2's block: a 7x7 depthwise convolution, channels last, a Linear
    to ``expand`` x the width, GELU, the global response norm, a Linear back) or ``OP/LAYOUT/AXES`` (a ReduceOP over
    AXES of the map in LAYOUT, first (N, C, H, W) or last (N, H, W, C), kept as dims, its sigmoid gating the map;
    several joined by ``+`` gate it in turn).
    A ``heads`` cell: ``heads`` attention heads over the ``resolution``-squared tokens of a ``width``-wide map, ``mode``
    talking (the maps' heads mixed by a Linear with the heads innermost, before and after the Softmax) or
    axis_softmax (keys normalised over the token axis, then k^T v and q (k^T v)).
    A ``prenorm`` cell: ``mode`` mlp, grouped or dense (a BatchNorm, then a ``kernel`` convolution of ``groups``
    groups from ``width`` to ``expand`` x ``width`` channels at ``stride``, the activation and a 1x1 convolution to
    ``out_width``, neither convolution with a bias: nothing folds into them) or grouped16 (the same with a
    BatchNorm after each convolution, folded into it as a bias: RegNetZ's 16-channel groups).
    """

    seed: int
    cell: str
    resolution: int
    width: int
    out_width: int
    kernel: int = 1
    stride: int = 1
    groups: int = 1
    expand: int = 1
    se: bool = False
    activation: str = "relu"
    residual: bool = False
    branches: tuple[int, ...] = ()
    heads: int = 1
    depth: int = 1
    mode: str = ""
    dilation: int = 1
    stem_kernel: int = 0
    out_activation: str = ""
    tokens: int = 0

    @property
    def sequence_length(self) -> int:
        """The tokens an encoder layer runs over: the drawn ones, with the class token (``tokens`` cells)."""
        return self.tokens + int(self.se)

    @property
    def patch(self) -> int:
        """The stem's kernel size and stride: the image at REFERENCE_INPUT px to ``resolution``."""
        return REFERENCE_INPUT // self.resolution

    def cell_macs(self) -> float:
        """Multiply-adds of one cell per sample (the main convolutions or matrix products)."""
        r2 = self.resolution**2
        out_r2 = (self.resolution // self.stride) ** 2
        if self.cell == "conv":
            return out_r2 * self.out_width * self.width // self.groups * self.kernel**2
        if self.cell == "inverted_residual":
            hidden = self.width * self.expand
            return r2 * self.width * hidden * (self.expand > 1) + out_r2 * hidden * (self.kernel**2 + self.out_width)
        if self.cell == "concat":
            share = self.out_width / max(1, len(self.branches))
            return sum(out_r2 * share * self.width * max(1, k) ** 2 for k in self.branches)
        if self.cell == "convnext":
            return r2 * self.width * (self.kernel**2 + 8 * self.width)
        if self.cell == "attention":
            return r2 * self.width * (4 * self.width + 2 * self.expand * self.width) + 2 * r2 * r2 * self.width
        if self.cell == "tokens":
            t = self.sequence_length
            return self.depth * (t * self.width * (4 + 2 * self.expand) * self.width + 2 * t * t * self.width)
        if self.cell == "mlp":
            return 2 * r2 * self.width * self.width * self.expand
        if self.cell == "heads":  # q/k/v projections, then q k^T and a v (or k^T v and q (k^T v))
            products = 2 * r2 * r2 * self.width if self.mode == "talking" else 2 * r2 * self.width * self.width
            return self.depth * (3 * r2 * self.width * self.width + products + 2 * r2 * r2 * self.heads**2)
        if self.cell == "movement":
            return out_r2 * 4 * self.width * self.out_width if self.stride == 2 else 0.0
        if self.cell == "reductions":  # the grn block's Linears and depthwise convolution; a plain reduction none
            return self.depth * r2 * self.width * (2 * self.expand * self.width + 49) if self.mode == "grn" else 0.0
        if self.cell == "branches":  # the radix convolutions (selective kernel: one dense 3x3 a path), or qkv and out
            if self.mode == "linear_attention":
                return self.depth * r2 * self.width * 4 * self.width
            per_group = self.width // (self.groups if self.mode == "split_attention" else 1)
            return self.depth * self.heads * r2 * self.width * per_group * 9
        if self.cell == "prenorm":  # the grouped or dense convolution, then the 1x1 one
            hidden = self.width * self.expand
            return out_r2 * hidden * (self.width // self.groups * self.kernel**2 + self.out_width)
        if self.cell == "upsample":  # the convolution after the 2x upsample (before it: pixel_shuffle's)
            return 4 * r2 * self.width * self.out_width * self.kernel**2
        if self.cell in ("bn_tokens", "hard_gate", "bn_post"):
            per_pixel = self.kernel**2 * self.width // self.groups
            return r2 * self.out_width * per_pixel + (r2 * self.out_width * 9 * self.width if self.se else 0)
        if self.cell == "resize":  # the 1x1 convolution after it, at the resized side (``kernel``)
            return self.kernel**2 * self.width * self.out_width
        if self.cell == "pool_sub":  # its MLP's two 1x1 convolutions
            return 2 * r2 * self.width * self.width * self.expand
        if self.cell in ("norm", "dilated", "pad"):
            return out_r2 * self.width * self.out_width // self.groups_of_conv * self.kernel**2
        if self.cell == "conv1d":
            return out_r2 * self.width * self.out_width * self.kernel
        if self.cell == "conv3d":
            return self.expand * out_r2 * self.width * self.out_width * 9 * (3 if self.kernel == 3 else 1)
        if self.cell == "image_io":
            up = 4 if self.mode != "none" else 1
            shuffle = r2 * self.width * 4 * self.width * 9 if self.mode == "pixel_shuffle" else 0
            tail = up * r2 * self.width * self.out_width * (4 if self.mode == "transpose" else self.kernel**2)
            return r2 * 3 * self.width * self.stem_kernel**2 + shuffle + tail
        if self.cell == "recurrent":
            gates = 4 if self.mode == "lstm" else 3
            return r2 * gates * (self.width + self.out_width) * self.out_width * self.heads * (2 if self.se else 1)
        return out_r2 * self.width * self.out_width

    def widest_activation(self) -> float:
        """Elements of the largest tensor a cell makes per sample (attention: its score matrix)."""
        hidden = self.width * max(1, self.expand)
        largest = self.resolution**2 * max(hidden, self.out_width, self.width)
        if self.cell == "attention":
            largest = max(largest, self.heads * self.resolution**4)
        if self.cell == "tokens":
            t = self.sequence_length
            largest = max(t * self.width * self.expand, self.heads * t * t)
        if self.cell == "heads":
            largest = max(3 * self.resolution**2 * self.width, self.heads * self.resolution**4)
        if self.cell == "reductions" and self.mode == "grn":
            largest = self.resolution**2 * self.width * self.expand
        if self.cell == "branches":
            largest = self.resolution**2 * self.width * (2 if self.mode == "linear_attention" else self.heads)
        if self.cell == "movement":
            largest = max(largest, (self.resolution + self.kernel) ** 2 * self.width)
        if self.cell == "windows":
            largest = max(largest, self.padded_resolution**2 * self.width)
        if self.cell == "upsample":
            largest = (
                4 * self.resolution**2 * max(self.width, self.out_width) * (4 if self.mode == "pixel_shuffle" else 1)
            )
        if self.cell == "conv3d":
            largest = self.expand * self.resolution**2 * max(self.width, self.out_width)
        if self.cell == "recurrent":
            largest = self.resolution**2 * max(self.width, self.out_width * (2 if self.se else 1))
        if self.cell == "image_io":
            largest = (4 if self.mode != "none" else 1) * self.resolution**2 * max(self.width, self.out_width)
        if self.cell == "resize":
            largest = max(self.resolution, self.kernel) ** 2 * max(self.width, self.out_width)
        return float(largest)

    @property
    def groups_of_conv(self) -> int:
        """The groups of a cell's main convolution (a ``norm`` cell's ``groups`` are its norm's)."""
        return 1 if self.cell == "norm" else self.groups

    @property
    def padded_resolution(self) -> int:
        """A ``windows`` cell's map after its pad: ``resolution`` up to a multiple of the window (``kernel``)."""
        return -(-self.resolution // self.kernel) * self.kernel

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _log_width(rng: np.random.Generator, low: int, high: int) -> int:
    """A width log-uniform in [low, high], a multiple of 8."""
    return max(8, int(round(math.exp(rng.uniform(math.log(low), math.log(high))) / 8)) * 8)


def _draw_once(rng: np.random.Generator, seed: int) -> ProbeSpec:
    cell = str(rng.choice(CELL_TYPES, p=CELL_WEIGHTS))
    activation = str(rng.choice(ACTIVATIONS))
    depth = int(rng.choice([1, 1, 2]))
    if cell in ("attention", "mlp"):
        resolution = int(rng.choice([7, 14, 28]))
        width = _log_width(rng, 64, 1024)
        heads = int(rng.choice([h for h in (1, 2, 4, 8, 12, 16) if width % h == 0 and width // h >= 16] or [1]))
        return ProbeSpec(
            seed, cell, resolution, width, width, expand=int(rng.choice([2, 3, 4])), heads=heads,
            activation=str(rng.choice(["gelu", "relu"])), depth=depth,
        )  # fmt: skip
    resolution = int(rng.choice(RESOLUTIONS))
    width = _log_width(rng, 16, 1024)
    out_width = width if rng.random() < 0.5 else _log_width(rng, 16, 1024)
    stride = 2 if rng.random() < 0.25 and resolution >= 14 else 1
    if cell == "conv":
        kernel = int(rng.choice([1, 1, 3, 3, 5, 7]))
        mode = rng.choice(["dense", "dense", "grouped", "depthwise"])
        if mode == "depthwise":
            out_width, groups = width, width
        elif mode == "grouped":
            groups = int(rng.choice([g for g in (2, 4, 8, 16, 32) if width % g == 0 and out_width % g == 0] or [1]))
        else:
            groups = 1
        return ProbeSpec(
            seed, cell, resolution, width, out_width, kernel, stride, groups, activation=activation,
            residual=stride == 1 and out_width == width and rng.random() < 0.5, depth=depth,
        )  # fmt: skip
    if cell == "inverted_residual":
        return ProbeSpec(
            seed, cell, resolution, width, out_width, int(rng.choice([3, 5, 7])), stride,
            expand=int(rng.choice([1, 3, 4, 6])), se=bool(rng.random() < 0.5), activation=activation,
            residual=stride == 1 and out_width == width, depth=depth,
        )  # fmt: skip
    if cell == "concat":
        branches = tuple(int(k) for k in rng.choice([0, 1, 3, 5, 7], size=int(rng.integers(2, 5)), replace=False))
        return ProbeSpec(
            seed, cell, resolution, width, max(out_width, 8 * len(branches)), stride=stride,
            branches=branches, activation=activation, depth=depth,
        )  # fmt: skip
    if cell == "convnext":
        return ProbeSpec(seed, cell, resolution, width, width, kernel=int(rng.choice([3, 7])), depth=depth)
    # pool: max or average (kernel 0 / 1) pooling, then a 1x1 convolution to out_width
    return ProbeSpec(seed, "pool", resolution, width, out_width, kernel=int(rng.integers(0, 2)), stride=2)


def _grouped_conv(
    rng: np.random.Generator, seed: int, resolution: int, groups: int, group_width: int, kernels: list[int]
) -> ProbeSpec:
    """A grouped convolution cell of ``groups`` x ``group_width`` channels at ``resolution``; stride, kernel (one
    of ``kernels``), activation, residual and depth drawn here, in that order (a probe's seed fixes them)."""
    stride = 2 if rng.random() < 0.25 and resolution >= 14 else 1
    width = groups * group_width
    return ProbeSpec(
        seed, "conv", resolution, width, width, int(rng.choice(kernels)), stride, groups,
        activation=str(rng.choice(["relu", "relu", "silu", "none"])),
        residual=stride == 1 and rng.random() < 0.5, depth=int(rng.choice([1, 1, 2])),
    )  # fmt: skip


def _draw_grouped(rng: np.random.Generator, seed: int) -> ProbeSpec:
    group_width = int(rng.choice(GROUP_WIDTHS))
    groups = max(2, round(_log_width(rng, 32, 1024) / group_width))
    resolution = int(rng.choice(RESOLUTIONS[:4]))
    return _grouped_conv(rng, seed, resolution, groups, group_width, [3, 3, 3, 1, 5])


def _wide_groups(rng: np.random.Generator, stage_widths: dict[int, tuple[int, int]]) -> tuple[int, int, int]:
    """(resolution, groups, channels a group) of few wide groups: a map size of ``stage_widths``, a group width in
    WIDE_GROUP_WIDTH_RANGE and as many groups as make about a stage's width there, drawn in that order."""
    resolution = int(rng.choice(list(stage_widths)))
    group_width = _log_width(rng, *WIDE_GROUP_WIDTH_RANGE)
    return resolution, max(2, round(_log_width(rng, *stage_widths[resolution]) / group_width)), group_width


def _draw_wide_grouped(rng: np.random.Generator, seed: int) -> ProbeSpec:
    """Grouped 3x3 (sometimes 1x1) convolutions of few wide groups, at the 7-56 px maps of RegNet's stages."""
    resolution, groups, group_width = _wide_groups(rng, WIDE_GROUP_STAGE_WIDTHS)
    return _grouped_conv(rng, seed, resolution, groups, group_width, [3, 3, 3, 1])


def _draw_wide_grouped_strided(rng: np.random.Generator, seed: int) -> ProbeSpec:
    """Stride-2 grouped 3x3 convolutions of few wide groups: the first block of a RegNet stage, at 14-112 px in."""
    resolution, groups, group_width = _wide_groups(rng, WIDE_GROUP_STRIDED_RESOLUTIONS)
    width = groups * group_width
    return ProbeSpec(
        seed, "conv", resolution, width, width, 3, 2, groups,
        activation=str(rng.choice(["relu", "relu", "silu", "none"])), depth=int(rng.choice([1, 1, 2])),
    )  # fmt: skip


def _draw_depthwise(rng: np.random.Generator, seed: int) -> ProbeSpec:
    mode = str(rng.choice(["inverted_residual", "inverted_residual", "depthwise", "grouped_change"]))
    resolution = int(rng.choice(DEPTHWISE_RESOLUTIONS, p=DEPTHWISE_RESOLUTION_WEIGHTS))
    kernel = int(rng.choice([3, 5, 7]))
    stride = 2 if rng.random() < 0.3 else 1
    activation = str(rng.choice(["relu", "relu6", "silu", "hardswish"]))
    depth = int(rng.choice([1, 1, 2]))
    if mode == "inverted_residual":
        width = _log_width(rng, 16, 256)
        out_width = width if rng.random() < 0.5 else _log_width(rng, 16, 320)
        return ProbeSpec(
            seed, "inverted_residual", resolution, width, out_width, kernel, stride,
            expand=int(rng.choice([3, 4, 6])), se=bool(rng.random() < 0.5), activation=activation,
            residual=stride == 1 and out_width == width, depth=depth,
        )  # fmt: skip
    if mode == "depthwise":
        width = _log_width(rng, 16, 1024)
        return ProbeSpec(
            seed, "conv", resolution, width, width, kernel, stride, width, activation=activation,
            residual=stride == 1 and rng.random() < 0.5, depth=depth,
        )  # fmt: skip
    # a grouped convolution that changes the width (random NAS cells: 40 -> 96 channels in 4 groups)
    groups = int(rng.choice([2, 4, 8]))
    width = max(groups, _log_width(rng, 16, 256) // groups * groups)
    out_width = max(groups, _log_width(rng, 32, 512) // groups * groups)
    return ProbeSpec(
        seed, "conv", resolution, width, out_width, int(rng.choice([1, 3, 5])), stride, groups,
        activation=activation, depth=1,
    )  # fmt: skip


def _draw_movement(rng: np.random.Generator, seed: int) -> ProbeSpec:
    resolution = int(rng.choice(MOVEMENT_RESOLUTIONS))
    width = _log_width(rng, 16, 768)
    merge = rng.random() < 0.35
    return ProbeSpec(
        seed, "movement", resolution, width, _log_width(rng, 16, 768) if merge else width,
        kernel=int(rng.integers(1, 8)), stride=2 if merge else 1, groups=int(rng.choice([0, 1, 2, 3])),
        se=bool(rng.random() < 0.6), residual=bool(rng.random() < 0.6), depth=int(rng.choice([1, 1, 2])),
    )  # fmt: skip


def _draw_windows(rng: np.random.Generator, seed: int) -> ProbeSpec:
    width = 32 * int(rng.integers(2, 25))  # 64-768: heads of 32, 64 or 128 channels (Swin's are 32)
    window = int(rng.choice(WINDOW_SIZES))
    resolution = int(rng.choice(MOVEMENT_RESOLUTIONS))
    shift = int(rng.choice([0, window // 2]))
    heads = width // 32 // math.gcd(width // 32, int(rng.choice([1, 2, 4])))
    return ProbeSpec(
        seed, "windows", resolution, width, width, kernel=window, groups=shift, heads=heads,
        se=bool(rng.random() < 0.6), depth=int(rng.choice([1, 1, 2])),
    )  # fmt: skip


def _draw_highres(rng: np.random.Generator, seed: int) -> ProbeSpec:
    resolution = int(rng.choice(HIGHRES_RESOLUTIONS))
    width = _log_width(rng, 16, 256)
    out_width = width if rng.random() < 0.5 else _log_width(rng, 16, 256)
    stride = 2 if rng.random() < 0.25 else 1
    return ProbeSpec(
        seed, "conv", resolution, width, out_width, int(rng.choice([1, 3, 3, 3, 5])), stride,
        activation=str(rng.choice(["relu", "relu", "silu", "none"])),
        residual=stride == 1 and out_width == width and rng.random() < 0.5, depth=int(rng.choice([1, 1, 2])),
    )  # fmt: skip


def _draw_operators(rng: np.random.Generator, seed: int) -> ProbeSpec:
    cell = str(rng.choice(OPERATOR_CELLS, p=OPERATOR_CELL_WEIGHTS))
    activation = str(rng.choice(OPERATOR_ACTIVATIONS))
    depth = int(rng.choice([1, 1, 2]))
    width = _log_width(rng, 16, 512)
    out_width = width if rng.random() < 0.5 else _log_width(rng, 16, 512)
    if cell == "upsample":
        mode = str(rng.choice(UPSAMPLE_MODES))
        return ProbeSpec(
            seed, cell, int(rng.choice([7, 14, 28, 56])), width, out_width,
            kernel=int(rng.choice([2, 3, 4])) if mode == "transpose" else int(rng.choice([1, 3, 3])),
            activation=activation, mode=mode,
        )  # fmt: skip
    if cell == "norm":
        mode = str(rng.choice(["group", "group", "instance"]))
        groups = int(rng.choice([g for g in (1, 8, 16, 32) if out_width % g == 0])) if mode == "group" else 1
        return ProbeSpec(
            seed, cell, int(rng.choice([14, 28, 56, 112])), width, out_width, int(rng.choice([1, 3, 3])),
            groups=groups, activation=activation, residual=out_width == width and rng.random() < 0.5,
            depth=depth, mode=mode,
        )  # fmt: skip
    if cell == "dilated":
        width = _log_width(rng, 64, 1024)
        depthwise = rng.random() < 0.25
        return ProbeSpec(
            seed, cell, int(rng.choice([14, 28, 56])), width, width if depthwise else _log_width(rng, 64, 512),
            3, groups=width if depthwise else 1, activation=activation, depth=depth,
            dilation=int(rng.choice(DILATIONS)),
        )  # fmt: skip
    if cell == "conv1d":  # the map's h x w as one sequence: 196 to 12,544 steps
        return ProbeSpec(
            seed, cell, int(rng.choice([14, 28, 56, 112])), width, out_width,
            int(rng.choice([1, 3, 3, 5, 7, 9, 11])), stride=2 if rng.random() < 0.3 else 1,
            groups=width if rng.random() < 0.2 and out_width == width else 1, activation=activation, depth=depth,
            dilation=int(rng.choice([1, 1, 1, 2, 4])),
        )  # fmt: skip
    if cell == "conv3d":
        kernel = int(rng.choice([1, 3, 3]))  # 1: (1, 3, 3) spatial only; 3: (3, 3, 3)
        return ProbeSpec(
            seed, cell, int(rng.choice([14, 28, 56])), _log_width(rng, 16, 256), _log_width(rng, 16, 256), kernel,
            stride=2 if rng.random() < 0.3 else 1, expand=int(rng.choice([4, 8, 16])), activation="relu", depth=depth,
        )  # fmt: skip
    if cell == "recurrent":  # tokens of the map, as a sequence
        return _recurrent_cell(rng, seed, (7, 14, 28), (32, 512), (32, 512), (1, 1, 2), 0.3)
    if cell == "pad":
        return ProbeSpec(
            seed, cell, int(rng.choice([28, 56, 112])), width, out_width, int(rng.choice([3, 3, 5, 7, 9])),
            activation=activation, residual=out_width == width and rng.random() < 0.5, depth=depth,
            mode=str(rng.choice(["reflect", "reflect", "replicate"])),
        )  # fmt: skip
    # reduce: CBAM's spatial attention (mean and max over channels, a 7x7 convolution, a sigmoid gate) or its
    # channel attention (spatial mean and max, a shared MLP)
    return ProbeSpec(
        seed, cell, int(rng.choice([14, 28, 56])), width, width, 7, activation=activation, depth=depth,
        mode=str(rng.choice(["spatial", "channel"])),
    )  # fmt: skip


def _recurrent_cell(
    rng: np.random.Generator,
    seed: int,
    sides: tuple[int, ...],
    widths: tuple[int, int],
    out_widths: tuple[int, int],
    layers: tuple[int, ...],
    bidirectional_share: float,
) -> ProbeSpec:
    """An LSTM or GRU cell over ``side``^2 tokens, its widths log-uniform in the ranges; ``layers`` drawn from as
    listed (repeats weigh), two directions with probability ``bidirectional_share``."""
    return ProbeSpec(
        seed, "recurrent", int(rng.choice(sides)), _log_width(rng, *widths), _log_width(rng, *out_widths),
        heads=int(rng.choice(layers)), se=bool(rng.random() < bidirectional_share),
        mode=str(rng.choice(["lstm", "gru"])),
    )  # fmt: skip


def _draw_recurrent(rng: np.random.Generator, seed: int) -> ProbeSpec:
    return _recurrent_cell(rng, seed, RECURRENT_SIDES, (32, 1024), (64, 1024), (1, 1, 2, 3), 0.4)


def _draw_image_io(rng: np.random.Generator, seed: int) -> ProbeSpec:
    mode = str(rng.choice(IMAGE_IO_UPSAMPLES))
    return ProbeSpec(
        seed, "image_io", int(rng.choice(IMAGE_IO_RESOLUTIONS, p=(0.25, 0.4, 0.35))), _log_width(rng, 16, 256),
        int(rng.choice(IMAGE_IO_OUT_CHANNELS)), kernel=4 if mode == "transpose" else int(rng.choice(IMAGE_IO_KERNELS)),
        activation=str(rng.choice(IMAGE_IO_ACTIVATIONS)), mode=mode, stem_kernel=int(rng.choice([3, 5, 7, 9, 9])),
        out_activation=str(rng.choice(["tanh", "sigmoid", "none", "none"])),
    )  # fmt: skip


def _draw_tokens(rng: np.random.Generator, seed: int) -> ProbeSpec:
    width = int(rng.choice(TOKENS_WIDTHS))
    heads = width // int(rng.choice([h for h in TOKENS_HEAD_WIDTHS if width % h == 0]))
    if rng.random() < 0.5:
        mode, side = "vision", int(rng.choice(TOKENS_SIDES))
        tokens, class_token = side * side, bool(rng.random() < 0.7)
    else:
        tokens = (
            int(rng.choice(TOKENS_TEXT_LENGTHS))
            if rng.random() < 0.5
            else int(round(math.exp(rng.uniform(math.log(16), math.log(1024)))))
        )
        mode, side, class_token = "text", next(s for s in TOKENS_SIDES if s * s >= tokens), bool(rng.random() < 0.3)
    return ProbeSpec(
        seed, "tokens", side, width, width, expand=int(rng.choice([2, 3, 4, 4])), se=class_token, heads=heads,
        activation=str(rng.choice(["gelu", "gelu", "relu"])), residual=bool(rng.random() < 0.7),
        depth=int(rng.choice([1, 1, 2])), mode=mode, tokens=tokens,
    )  # fmt: skip


def _draw_norms(rng: np.random.Generator, seed: int) -> ProbeSpec:
    cell = str(rng.choice(NORM_CELLS, p=NORM_CELL_WEIGHTS))
    resolution = int(rng.choice(NORM_RESOLUTIONS))
    width = _log_width(rng, 32, 768)
    activation = str(rng.choice(["gelu", "relu", "silu", "hardswish", "none"]))
    depth = int(rng.choice([1, 1, 2]))
    if cell == "bn_tokens":  # a token-wise Linear, then BatchNorm1d over (batch x tokens, channels): LeViT's
        out_width = width if rng.random() < 0.5 else _log_width(rng, 32, 1024)
        return ProbeSpec(
            seed, cell, resolution, width, out_width, activation=activation, depth=depth,
            residual=out_width == width and rng.random() < 0.5,
        )  # fmt: skip
    if cell == "bn_post":  # a convolution, its activation, then BatchNorm2d (nothing to fold it into): ConvMixer's
        depthwise = rng.random() < 0.5
        kernel = int(rng.choice([3, 5, 7, 9])) if depthwise else int(rng.choice([1, 1, 3]))
        out_width = width if depthwise else _log_width(rng, 32, 768)
        return ProbeSpec(
            seed, cell, resolution, width, out_width, kernel, groups=width if depthwise else 1,
            activation=activation if activation != "none" else "gelu", depth=depth, residual=depthwise,
        )  # fmt: skip
    if cell == "pool_sub":  # GroupNorm(1), AvgPool(3) minus its input, then a 1x1 MLP: PoolFormer's block
        return ProbeSpec(
            seed, cell, resolution, width, width, activation="gelu", depth=depth, expand=int(rng.choice([2, 4])),
            residual=True,
        )  # fmt: skip
    # hard_gate: a 3x3 convolution and a squeeze-excitation gated by HardSigmoid (MobileNetV3, GhostNet, LCNet)
    return ProbeSpec(
        seed, cell, resolution, width, _log_width(rng, 32, 768), 3, activation=activation, depth=depth,
    )  # fmt: skip


def _draw_resize(rng: np.random.Generator, seed: int) -> ProbeSpec:
    resolution = int(rng.choice(RESIZE_RESOLUTIONS))
    image = resolution == 224 and rng.random() < 0.7
    width = 3 if image else _log_width(rng, 8, 512)
    side = max(2, int(round(resolution * float(rng.choice(RESIZE_SCALES)))))
    return ProbeSpec(
        seed, "resize", resolution, width, _log_width(rng, 16, 256), side, mode=str(rng.choice(RESIZE_MODES)),
        se=bool(rng.random() < 0.3),
    )  # fmt: skip


def _draw_heads(rng: np.random.Generator, seed: int) -> ProbeSpec:
    heads = int(rng.choice(HEADS_COUNTS))
    width = heads * int(rng.choice(HEADS_DIMS))
    return ProbeSpec(
        seed, "heads", int(rng.choice(HEADS_RESOLUTIONS)), width, width, heads=heads, mode=str(rng.choice(HEADS_MODES)),
        depth=int(rng.integers(1, 3)), residual=True,
    )  # fmt: skip


def _draw_branches(rng: np.random.Generator, seed: int) -> ProbeSpec:
    mode = str(rng.choice(BRANCH_MODES))
    groups = int(rng.choice([1, 1, 2])) if mode == "split_attention" else 1
    # The cell keeps its width; out_width is drawn all the same, as the timed probes' seeds were.
    return ProbeSpec(
        seed, "branches", int(rng.choice(BRANCH_RESOLUTIONS)), _log_width(rng, 32, 512) // 16 * 16 or 16,
        _log_width(rng, 32, 512), heads=int(rng.choice(BRANCH_RADIXES)), groups=groups, mode=mode,
        depth=int(rng.integers(1, 3)), residual=bool(rng.random() < 0.5),
    )  # fmt: skip


def _draw_reductions(rng: np.random.Generator, seed: int) -> ProbeSpec:
    if rng.random() < 0.35:
        mode = "grn"
    else:
        layout, axes = REDUCTION_AXES[int(rng.integers(len(REDUCTION_AXES)))]
        mode = f"{rng.choice(REDUCTION_OPS)}/{layout}/{'-'.join(str(a) for a in axes)}"
    width = _log_width(rng, 32, 768)
    return ProbeSpec(
        seed, "reductions", int(rng.choice(REDUCTION_RESOLUTIONS)), width, width, expand=4, mode=mode,
        depth=int(rng.integers(1, 3)), residual=True,
    )  # fmt: skip


@cache
def reduce_grid_modes() -> tuple[str, ...]:
    """The ``reduce_grid`` space's 36 reductions (``OP/LAYOUT/AXES``) in their fixed order (made once: a probe that
    misses its caps is drawn again)."""
    modes = [
        f"{op}/{layout}/{'-'.join(str(a) for a in axes)}" for op in REDUCTION_OPS for layout, axes in REDUCTION_AXES
    ]
    order = np.random.default_rng(REDUCE_GRID_ORDER_SEED).permutation(len(modes))
    return tuple(modes[i] for i in order)


def _reduce_grid_pair(seed: int) -> str:
    """The two reductions (``MODE+MODE``) of :func:`reduce_grid_modes` that seed ``seed`` takes in either grid."""
    modes = reduce_grid_modes()
    first = (seed % (len(modes) // REDUCE_GRID_PER_PROBE)) * REDUCE_GRID_PER_PROBE
    return "+".join(modes[first : first + REDUCE_GRID_PER_PROBE])


def _draw_reduce_grid(rng: np.random.Generator, seed: int) -> ProbeSpec:
    width = _log_width(rng, 32, 768)
    return ProbeSpec(
        seed, "reductions", int(rng.choice(REDUCTION_RESOLUTIONS)), width, width,
        mode=_reduce_grid_pair(seed),
        depth=int(rng.integers(1, 3)), residual=True,
    )  # fmt: skip


def _draw_reduce_grid_wide(rng: np.random.Generator, seed: int) -> ProbeSpec:
    resolution = int(rng.choice(REDUCTION_RESOLUTIONS))
    stage_width = REDUCE_GRID_WIDE_BASE // resolution
    width = min(REDUCE_GRID_WIDE_MAX, _log_width(rng, stage_width, 8 * stage_width))
    return ProbeSpec(
        seed, "reductions", resolution, width, width,
        mode=_reduce_grid_pair(seed),
        depth=int(rng.integers(1, 3)), residual=True,
    )  # fmt: skip


def _draw_grouped_expand(rng: np.random.Generator, seed: int) -> ProbeSpec:
    groups = int(rng.choice(GROUPED_EXPAND_GROUPS))
    group_in = _log_width(rng, *GROUPED_EXPAND_GROUP_WIDTHS)
    group_out = max(8, int(round(group_in * float(rng.choice(GROUPED_EXPAND_RATIOS)) / 8)) * 8)
    resolution = int(rng.choice(REDUCTION_RESOLUTIONS))
    stride = 2 if resolution >= 14 and rng.random() < 0.3 else 1
    return ProbeSpec(
        seed, "conv", resolution, groups * group_in, groups * group_out, int(rng.choice([1, 1, 3])), stride, groups,
        activation=str(rng.choice(["relu", "hardswish", "silu", "none"])), depth=1,
    )  # fmt: skip


def _draw_narrow_convnext(rng: np.random.Generator, seed: int) -> ProbeSpec:
    width = _log_width(rng, *NARROW_CONVNEXT_WIDTHS)
    return ProbeSpec(
        seed, "convnext", int(rng.choice(NARROW_CONVNEXT_RESOLUTIONS)), width, width, int(rng.choice([3, 5, 7, 7])),
        depth=int(rng.integers(1, 4)),
    )  # fmt: skip


def _draw_prenorm(rng: np.random.Generator, seed: int) -> ProbeSpec:
    mode = str(rng.choice(PRENORM_MODES))
    resolution = int(rng.choice(PRENORM_RESOLUTIONS))
    stride = 2 if rng.random() < (0.5 if mode == "grouped16" else 0.2) and resolution >= 14 else 1
    if mode == "mlp":  # 1x1 up by 2-4x, the activation, 1x1 back
        width = _log_width(rng, 32, 768)
        kernel, groups, expand = 1, 1, int(rng.choice([2, 3, 4]))
    elif mode == "dense":
        width = _log_width(rng, 16, 512)
        kernel, groups, expand = int(rng.choice([1, 3, 3])), 1, 1
    else:
        group_width = 16 if mode == "grouped16" else int(rng.choice(PRENORM_GROUP_WIDTHS))
        groups = max(2, round(_log_width(rng, 48, 1024) / group_width))
        width, kernel, expand = groups * group_width, 3, 1
    return ProbeSpec(
        seed, "prenorm", resolution, width, width, kernel, stride, groups, expand,
        activation=str(rng.choice(["gelu", "gelu", "relu", "silu", "none"])), residual=True,
        depth=int(rng.integers(1, 4)), mode=mode,
    )  # fmt: skip


def draw_probe(seed: int, space: str = "cells") -> ProbeSpec:
    """The probe of ``seed`` in ``space``: drawn again (from the same generator) until it fits the caps.

    Args:
        seed: any integer; equal seeds give equal probes.
        space: ``cells`` (every cell type), ``grouped_conv`` (grouped convolutions by channels per group),
            ``wide_grouped`` (grouped convolutions of 72-320 channels a group, as the large RegNets have),
            ``wide_grouped_strided`` (their stride-2 3x3 ones that open a stage, 14-112 px in),
            ``depthwise`` (inverted residuals and depthwise or width-changing grouped convolutions),
            ``movement`` (pad, roll, crop, L2 normalisation and patch merge, as windowed attention moves data),
            ``highres`` (dense convolutions on 112 and 224 px maps), ``windows`` (Swin's channels-last pad and
            window partition) or ``operators`` (upsampling, normalisation, dilated, 1-D and 3-D convolutions,
            recurrent layers, pads and reductions that no other space makes) or ``recurrent`` (LSTM and GRU
            layers only: 9-1024 steps, 64-1024 units, 1-3 layers, one or two directions) or ``image_io`` (an image
            network's stride-1 stem and its output convolution to 1-21 channels at 56-448 px, with an upsample)
            or ``tokens`` (transformer encoder layers over 16-1025 tokens, 192-1280 wide) or ``norms`` (BatchNorm
            after a token-wise Linear or after an activation, PoolFormer's pool-minus-input, HardSigmoid gates) or
            ``resize`` (bicubic, bilinear and nearest resizes of 7-224 px maps and whole images to 0.5-4x their side)
            or ``heads`` (attention maps mixed over 2-16 heads with the heads innermost, or keys normalised over the
            token axis: CaiT's and CoaT's layouts) or ``branches`` (branches summed over their own axis and weighed by
            a Softmax over it: ResNeSt's split attention, SKNet's selective kernels, MobileViTv2's linear attention)
            or ``prenorm`` (convolutions with no bias after a norm or an activation, and 16-channel grouped ones)
            or ``reduce_grid`` (the ``reductions`` space's ops over each of its axes, every pair in 18 seeds) or
            ``reduce_grid_wide`` (the same pairs on maps 1-8 times a network stage's width at their resolution) or
            ``grouped_expand`` (convolutions of 2-4 groups whose output per group is 1/4-6 times their input).

    Returns:
        The probe's spec, within MAX_CELL_MACS and MAX_ACTIVATION_ELEMENTS per sample (the space's own caps
        where SPACE_CAPS has them).

    Raises:
        ValueError: ``space`` is not one of PROBE_SPACES.
    """
    draw_once = {
        "cells": _draw_once, "grouped_conv": _draw_grouped, "wide_grouped": _draw_wide_grouped,
        "wide_grouped_strided": _draw_wide_grouped_strided,
        "depthwise": _draw_depthwise, "movement": _draw_movement,
        "highres": _draw_highres, "windows": _draw_windows, "operators": _draw_operators,
        "recurrent": _draw_recurrent, "image_io": _draw_image_io, "tokens": _draw_tokens,
        "norms": _draw_norms, "resize": _draw_resize, "heads": _draw_heads,
        "branches": _draw_branches, "reductions": _draw_reductions, "narrow_convnext": _draw_narrow_convnext,
        "prenorm": _draw_prenorm, "reduce_grid": _draw_reduce_grid,
        "reduce_grid_wide": _draw_reduce_grid_wide, "grouped_expand": _draw_grouped_expand,
    }.get(space)  # fmt: skip
    most_macs, largest = SPACE_CAPS.get(space, (MAX_CELL_MACS, MAX_ACTIVATION_ELEMENTS))
    if draw_once is None:
        raise ValueError(f"probe space {space!r} is not one of {', '.join(PROBE_SPACES)}")
    rng = np.random.default_rng(seed)
    while True:
        spec = draw_once(rng, seed)
        tokens = spec.resolution**2 if spec.cell in ("attention", "mlp") else 0
        if spec.cell_macs() <= most_macs and spec.widest_activation() <= largest and tokens <= MAX_TOKENS:
            return spec


def build_probe_network(seed: int, num_classes: int = 1000, space: str = "cells") -> Any:  # -> torch.nn.Module
    """The eval-mode torch module of :func:`draw_probe` ``(seed, space)`` for (batch, 3, H, W) images."""
    import torch
    from torch import nn

    spec = draw_probe(seed, space)

    def act() -> nn.Module:
        activations: dict[str, Callable[[], nn.Module]] = {
            "none": nn.Identity, "relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "gelu": nn.GELU,
            "hardswish": nn.Hardswish, "sigmoid": nn.Sigmoid, "leaky_relu": lambda: nn.LeakyReLU(0.1),
            "prelu": nn.PReLU, "elu": nn.ELU, "tanh": nn.Tanh, "softplus": nn.Softplus, "mish": nn.Mish,
            "hardtanh": nn.Hardtanh,
        }  # fmt: skip
        return activations[spec.activation]()

    def conv(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, activation: bool = True) -> nn.Module:
        return conv_bn(c_in, c_out, k, stride, groups, act if activation else None)

    def SqueezeExcite(channels: int) -> nn.Module:  # noqa: N802 (reads as the module it builds)
        return squeeze_excite(channels, nn.SiLU)

    class Tokens(nn.Module):
        """Runs ``body`` over the feature map as (batch, tokens, channels) and back."""

        def __init__(self, body: nn.Module) -> None:
            super().__init__()
            self.body = body

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, c, h, w = x.shape
            return self.body(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(n, c, h, w)

    class Mlp(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, width * spec.expand)
            self.act = act()
            self.down = nn.Linear(width * spec.expand, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(self.act(self.up(self.norm(x))))

    class ConvNeXt(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.depthwise = nn.Conv2d(width, width, spec.kernel, 1, spec.kernel // 2, groups=width)
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.depthwise(x).permute(0, 2, 3, 1)
            y = self.down(nn.functional.gelu(self.up(self.norm(y))))
            return x + y.permute(0, 3, 1, 2)

    class Movement(nn.Module):
        """Swin's data movement around a window attention (the ``movement`` cell; ProbeSpec says how)."""

        def __init__(self, c_in: int, first: bool) -> None:
            super().__init__()
            merge = spec.stride == 2 and first
            self.project = conv(4 * c_in, spec.out_width, 1, activation=False) if merge else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            last = spec.residual
            y = x.permute(0, 2, 3, 1) if last else x
            h, w = x.shape[2], x.shape[3]
            dims, channels = ((1, 2), 3) if last else ((2, 3), 1)
            pad = spec.kernel
            y = nn.functional.pad(y, (0, 0, 0, pad, 0, pad) if last else (0, pad, 0, pad))
            if spec.groups:
                y = torch.roll(y, shifts=(-spec.groups, -spec.groups), dims=dims)
            y = y[:, :h, :w, :] if last else y[:, :, :h, :w]
            if spec.se:
                y = nn.functional.normalize(y, dim=channels)
            if self.project is not None:
                if last:
                    parts = [y[:, i::2, j::2, :] for i in (0, 1) for j in (0, 1)]
                else:
                    parts = [y[:, :, i::2, j::2] for i in (0, 1) for j in (0, 1)]
                y = torch.cat(parts, dim=channels)
            y = y.permute(0, 3, 1, 2) if last else y
            return self.project(y) if self.project is not None else x + y

    class Windows(nn.Module):
        """Swin's window partition around an attention (the ``windows`` cell; ProbeSpec says how)."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, c, h, w = x.shape
            window, shift, padded = spec.kernel, spec.groups, spec.padded_resolution
            y = nn.functional.pad(self.norm(x.permute(0, 2, 3, 1)), (0, 0, 0, padded - w, 0, padded - h))
            if shift:
                y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2))
            parts = padded // window
            y = y.view(n, parts, window, parts, window, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)
            if spec.se:
                y = nn.functional.normalize(y.view(-1, window * window, spec.heads, c // spec.heads), dim=-1)
            y = y.reshape(n, parts, parts, window, window, c).permute(0, 1, 3, 2, 4, 5).reshape(n, padded, padded, c)
            if shift:
                y = torch.roll(y, shifts=(shift, shift), dims=(1, 2))
            return x + y[:, :h, :w, :].permute(0, 3, 1, 2)

    class Upsample(nn.Module):
        """A 2x upsample (``mode``): a transposed convolution, or a resize or pixel shuffle with a convolution."""

        def __init__(self, c_in: int, c_out: int) -> None:
            super().__init__()
            k = spec.kernel
            if spec.mode == "transpose":  # padding and output padding that give exactly 2x for k = 2, 3, 4
                padding, extra = {2: (0, 0), 3: (1, 1), 4: (1, 0)}[k]
                self.body: nn.Module = nn.Sequential(
                    nn.ConvTranspose2d(c_in, c_out, k, 2, padding, extra, bias=False), nn.BatchNorm2d(c_out), act()
                )
            elif spec.mode == "pixel_shuffle":
                self.body = nn.Sequential(conv(c_in, 4 * c_out, k, activation=False), nn.PixelShuffle(2), act())
            else:
                resize = nn.Upsample(
                    scale_factor=2, mode=spec.mode, **({"align_corners": False} if spec.mode == "bilinear" else {})
                )
                self.body = nn.Sequential(resize, conv(c_in, c_out, k))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    class Conv1d(nn.Module):
        """A 1-D convolution (with batch norm) over the map's h x w positions as one sequence, back as (n, c, L, 1)."""

        def __init__(self, c_in: int, c_out: int, stride: int) -> None:
            super().__init__()
            groups = spec.groups if c_in % spec.groups == 0 and c_out % spec.groups == 0 else 1
            padding = spec.dilation * (spec.kernel // 2)
            self.body = nn.Sequential(
                nn.Conv1d(c_in, c_out, spec.kernel, stride, padding, spec.dilation, groups, bias=False),
                nn.BatchNorm1d(c_out), act(),
            )  # fmt: skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x.flatten(2)).unsqueeze(-1)

    class Conv3d(nn.Module):
        """Frames from the map (a 1x1 convolution to ``expand`` x ``width`` channels, viewed as (n, width, frames,
        h, w)), a 3-D convolution with batch norm and ReLU, and the frames' mean."""

        def __init__(self, c_in: int, c_out: int, stride: int) -> None:
            super().__init__()
            self.frames = nn.Conv2d(c_in, spec.expand * spec.width, 1)
            k = spec.kernel
            strides = (stride if k == 3 else 1, stride, stride)
            self.body = nn.Sequential(
                nn.Conv3d(spec.width, c_out, (k, 3, 3), strides, (k // 2, 1, 1), bias=False),
                nn.BatchNorm3d(c_out), nn.ReLU(),
            )  # fmt: skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, _, h, w = x.shape
            return self.body(self.frames(x).view(n, spec.width, spec.expand, h, w)).mean(2)

    class Recurrent(nn.Module):
        """An LSTM or GRU (``heads`` layers, bidirectional with ``se``) over the map's tokens, back to a map."""

        def __init__(self, c_in: int, c_out: int) -> None:
            super().__init__()
            layer = nn.LSTM if spec.mode == "lstm" else nn.GRU
            hidden = c_out // 2 if spec.se else c_out
            self.body = layer(c_in, hidden, spec.heads, batch_first=True, bidirectional=spec.se)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, _, h, w = x.shape
            y, _ = self.body(x.flatten(2).transpose(1, 2))
            return y.transpose(1, 2).reshape(n, -1, h, w)

    class Gate(nn.Module):
        """CBAM's attention after a 3x3 convolution: spatial (the channels' mean and max, a 7x7 convolution) or
        channel (the map's mean and max through a shared MLP), a sigmoid gate on the convolution's output."""

        def __init__(self, c_in: int, c_out: int) -> None:
            super().__init__()
            self.conv = conv(c_in, c_out, 3)
            if spec.mode == "spatial":
                self.gate: nn.Module = nn.Conv2d(2, 1, spec.kernel, padding=spec.kernel // 2)
            else:
                hidden = max(8, c_out // 8)
                self.gate = nn.Sequential(nn.Conv2d(c_out, hidden, 1), act(), nn.Conv2d(hidden, c_out, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            if spec.mode == "spatial":
                pooled = torch.cat([y.mean(1, keepdim=True), y.amax(1, keepdim=True)], 1)
                return y * torch.sigmoid(self.gate(pooled))
            pooled_sum = self.gate(y.mean((2, 3), keepdim=True)) + self.gate(y.amax((2, 3), keepdim=True))
            return y * torch.sigmoid(pooled_sum)

    class NormCell(nn.Module):
        """The body of a ``norms`` cell (``_draw_norms`` says what each is)."""

        def __init__(self, c_in: int, c_out: int) -> None:
            super().__init__()
            self.act = act()
            if spec.cell == "bn_tokens":
                self.linear = nn.Linear(c_in, c_out, bias=False)
                self.norm: nn.Module = nn.BatchNorm1d(c_out)
            elif spec.cell == "bn_post":
                self.conv = nn.Conv2d(c_in, c_out, spec.kernel, 1, spec.kernel // 2, groups=spec.groups)
                self.norm = nn.BatchNorm2d(c_out)
            elif spec.cell == "pool_sub":
                self.norm = nn.GroupNorm(1, c_in)
                self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
                hidden = c_in * spec.expand
                self.mlp = nn.Sequential(nn.Conv2d(c_in, hidden, 1), nn.GELU(), nn.Conv2d(hidden, c_in, 1))
            else:
                self.conv = nn.Conv2d(c_in, c_out, 3, 1, 1)
                hidden = max(8, c_out // 4)
                self.gate = nn.Sequential(
                    nn.AdaptiveAvgPool2d(1), nn.Conv2d(c_out, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, c_out, 1),
                    nn.Hardsigmoid(),
                )  # fmt: skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if spec.cell == "bn_tokens":
                b, c, h, w = x.shape
                y = self.linear(x.flatten(2).transpose(1, 2))
                y = self.act(self.norm(y.flatten(0, 1)).reshape(b, h * w, -1))
                return y.transpose(1, 2).reshape(b, -1, h, w)
            if spec.cell == "bn_post":
                return self.norm(self.act(self.conv(x)))
            if spec.cell == "pool_sub":
                y = self.norm(x)
                y = x + (self.pool(y) - y)
                return self.mlp(y)
            y = self.act(self.conv(x))
            return y * self.gate(y)

    class ResizeCell(nn.Module):
        """A ``resize`` cell: the map resized to ``kernel`` px (``mode``; ``se``: align_corners), then a 1x1
        convolution to ``out_width`` channels."""

        def __init__(self, c_in: int, c_out: int) -> None:
            super().__init__()
            self.project = nn.Conv2d(c_in, c_out, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            corners = spec.se if spec.mode != "nearest" else None
            y = nn.functional.interpolate(x, size=(spec.kernel, spec.kernel), mode=spec.mode, align_corners=corners)
            return self.project(y)

    class HeadsCell(nn.Module):
        """A ``heads`` cell (ProbeSpec says how) over the map's tokens."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.mix_before = nn.Linear(spec.heads, spec.heads)
            self.mix_after = nn.Linear(spec.heads, spec.heads)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, c, h, w = x.shape
            t = x.flatten(2).transpose(1, 2)
            q, k, v = self.qkv(t).reshape(n, h * w, 3, spec.heads, c // spec.heads).permute(2, 0, 3, 1, 4)
            if spec.mode == "talking":
                attn = (q @ k.transpose(-2, -1)) * (c // spec.heads) ** -0.5
                attn = self.mix_before(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(-1)
                attn = self.mix_after(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
                y = attn @ v
            else:
                y = q @ (k.softmax(dim=2).transpose(-2, -1) @ v)
            return self.proj(y.transpose(1, 2).reshape(n, h * w, c)).transpose(1, 2).reshape(n, c, h, w)

    class BranchesCell(nn.Module):
        """A ``branches`` cell (ProbeSpec says how), ``width`` channels in and out."""

        def __init__(self, width: int) -> None:
            super().__init__()
            radix, groups = spec.heads, spec.groups
            if spec.mode == "linear_attention":
                self.qkv = nn.Conv2d(width, 1 + 2 * width, 1)
                self.out = nn.Conv2d(width, width, 1)
                return
            if spec.mode == "split_attention":
                self.conv: nn.Module = conv_bn(width, width * radix, 3, 1, groups * radix, nn.ReLU)
            else:
                self.paths = nn.ModuleList(
                    nn.Sequential(nn.Conv2d(width, width, 3, 1, d, d, bias=False), nn.BatchNorm2d(width), nn.ReLU())
                    for d in range(1, radix + 1)
                )
            hidden = max(32, width * radix // 4 // 8 * 8)
            self.fc1 = nn.Sequential(nn.Conv2d(width, hidden, 1, groups=groups), nn.BatchNorm2d(hidden), nn.ReLU())
            self.fc2 = nn.Conv2d(hidden, width * radix, 1, groups=groups)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n, c, h, w = x.shape
            radix, groups = spec.heads, spec.groups
            if spec.mode == "linear_attention":  # MobileViTv2's, over the map's tokens
                query, key, value = self.qkv(x).reshape(n, 1 + 2 * c, 1, h * w).split([1, c, c], dim=1)
                context = (key * query.softmax(dim=-1)).sum(dim=-1, keepdim=True)
                return self.out((nn.functional.relu(value) * context.expand_as(value)).reshape(n, c, h, w))
            if spec.mode == "split_attention":
                branches = self.conv(x).reshape(n, radix, c, h, w)
            else:
                branches = torch.stack([path(x) for path in self.paths], dim=1)
            gap = branches.sum(dim=1).mean((2, 3), keepdim=True)
            attn = self.fc2(self.fc1(gap)).view(n, groups, radix, -1).transpose(1, 2).softmax(dim=1)
            return (branches * attn.reshape(n, radix, c, 1, 1)).sum(dim=1)

    class ReductionsCell(nn.Module):
        """A ``reductions`` cell (ProbeSpec says how), ``width`` channels in and out."""

        def __init__(self, width: int) -> None:
            super().__init__()
            if spec.mode == "grn":
                self.dw = nn.Conv2d(width, width, 7, 1, 3, groups=width)
                self.up = nn.Linear(width, spec.expand * width)
                self.down = nn.Linear(spec.expand * width, width)
                self.gamma = nn.Parameter(torch.full((spec.expand * width,), 0.1))
                self.beta = nn.Parameter(torch.zeros(spec.expand * width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if spec.mode == "grn":  # ConvNeXtV2's block, channels last
                y = nn.functional.gelu(self.up(self.dw(x).permute(0, 2, 3, 1)))
                gx = torch.norm(y, p=2, dim=(1, 2), keepdim=True)
                y = self.gamma * (y * (gx / (gx.mean(dim=-1, keepdim=True) + 1e-6))) + self.beta + y
                return self.down(y).permute(0, 3, 1, 2)
            for reduction in spec.mode.split("+"):  # one or more, each gating the map in turn
                x = self._gated(x, reduction)
            return x

        @staticmethod
        def _gated(x: torch.Tensor, reduction: str) -> torch.Tensor:
            op, layout, axes_text = reduction.split("/")
            axes = tuple(int(a) for a in axes_text.split("-"))
            y = x.permute(0, 2, 3, 1) if layout == "last" else x
            if op == "sum":
                r = y.sum(dim=axes, keepdim=True)
            elif op == "mean":
                r = y.mean(dim=axes, keepdim=True)
            elif op == "l2":
                r = torch.norm(y, p=2, dim=axes, keepdim=True)
            else:
                r = y.amax(dim=axes, keepdim=True)
            y = y * torch.sigmoid(r)
            return y.permute(0, 3, 1, 2) if layout == "last" else y

    def operator_cell(c_in: int, c_out: int, stride: int) -> nn.Module:
        """The body of an ``operators`` cell (draw_probe's ``_draw_operators`` says what each is)."""
        if spec.cell == "upsample":
            return Upsample(c_in, c_out)
        if spec.cell == "norm":
            norm = nn.GroupNorm(spec.groups, c_out) if spec.mode == "group" else nn.InstanceNorm2d(c_out, affine=True)
            return nn.Sequential(nn.Conv2d(c_in, c_out, spec.kernel, 1, spec.kernel // 2), norm, act())
        if spec.cell == "dilated":
            groups = spec.groups if c_in % spec.groups == 0 and c_out % spec.groups == 0 else 1
            d = spec.dilation
            return nn.Sequential(
                nn.Conv2d(c_in, c_out, 3, stride, d, d, groups, bias=False), nn.BatchNorm2d(c_out), act()
            )
        if spec.cell == "conv1d":
            return Conv1d(c_in, c_out, stride)
        if spec.cell == "conv3d":
            return Conv3d(c_in, c_out, stride)
        if spec.cell == "recurrent":
            return Recurrent(c_in, c_out)
        if spec.cell == "pad":
            pad = nn.ReflectionPad2d if spec.mode == "reflect" else nn.ReplicationPad2d
            return nn.Sequential(
                pad(spec.kernel // 2), nn.Conv2d(c_in, c_out, spec.kernel, bias=False), nn.BatchNorm2d(c_out), act()
            )
        return Gate(c_in, c_out)

    class PrenormCell(nn.Module):
        """ProbeSpec's ``prenorm`` cell: its convolutions bias-free (grouped16: each with a BatchNorm folded in)."""

        def __init__(self, c_in: int, c_out: int, stride: int) -> None:
            super().__init__()
            hidden = c_in * spec.expand
            groups = spec.groups if c_in % spec.groups == 0 and hidden % spec.groups == 0 else 1
            if spec.mode == "grouped16":
                self.body: nn.Module = nn.Sequential(
                    conv(c_in, hidden, spec.kernel, stride, groups), conv(hidden, c_out, 1, activation=False)
                )
            else:
                pad = spec.kernel // 2
                self.body = nn.Sequential(
                    nn.BatchNorm2d(c_in),
                    nn.Conv2d(c_in, hidden, spec.kernel, stride, pad, groups=groups, bias=False),
                    act(),
                    nn.Conv2d(hidden, c_out, 1, bias=False),
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    class Cell(nn.Module):
        def __init__(self, c_in: int, first: bool) -> None:
            super().__init__()
            stride = spec.stride if first else 1
            c_out = spec.out_width
            self.residual = spec.residual and c_in == c_out and stride == 1
            self.branches: nn.ModuleList | None = None
            if spec.cell == "conv":
                self.body: nn.Module = conv(
                    c_in, c_out, spec.kernel, stride, spec.groups if c_in % spec.groups == 0 else 1
                )
            elif spec.cell == "inverted_residual":
                hidden = c_in * spec.expand
                layers = [conv(c_in, hidden, 1)] if spec.expand > 1 else []
                layers.append(conv(hidden, hidden, spec.kernel, stride, hidden))
                layers += ([SqueezeExcite(hidden)] if spec.se else []) + [conv(hidden, c_out, 1, activation=False)]
                self.body = nn.Sequential(*layers)
            elif spec.cell == "concat":
                share = [c_out // len(spec.branches) // 8 * 8 or 8 for _ in spec.branches]
                share[0] += c_out - sum(share)
                self.branches = nn.ModuleList(
                    nn.Sequential(nn.MaxPool2d(3, stride, 1), conv(c_in, w, 1)) if k == 0 else conv(c_in, w, k, stride)
                    for k, w in zip(spec.branches, share)
                )
                self.body = nn.Identity()
            elif spec.cell == "convnext":
                self.body = ConvNeXt(c_in)
            elif spec.cell == "attention":
                layer = nn.TransformerEncoderLayer(
                    c_in, spec.heads, spec.expand * c_in, activation=spec.activation, batch_first=True,
                    norm_first=bool(spec.seed % 2),
                )  # fmt: skip
                self.body = Tokens(nn.TransformerEncoder(layer, 1, enable_nested_tensor=False))
            elif spec.cell == "mlp":
                self.body = Tokens(Mlp(c_in))
            elif spec.cell == "movement":
                self.body = Movement(c_in, first)
                self.residual = False  # Movement adds its own input back
            elif spec.cell == "windows":
                self.body = Windows(c_in)
                self.residual = False  # Windows adds its own input back
            elif spec.cell in NORM_CELLS:
                self.body = NormCell(c_in, c_out)
            elif spec.cell == "resize":
                self.body = ResizeCell(c_in, c_out)
            elif spec.cell == "heads":
                self.body = HeadsCell(c_in)
            elif spec.cell == "branches":
                self.body = BranchesCell(c_in)
            elif spec.cell == "reductions":
                self.body = ReductionsCell(c_in)
            elif spec.cell == "prenorm":
                self.body = PrenormCell(c_in, c_out, stride)
            elif spec.cell in OPERATOR_CELLS:
                self.body = operator_cell(c_in, c_out, stride)
            else:
                pool = nn.MaxPool2d(3, stride, 1) if spec.kernel == 0 else nn.AvgPool2d(3, stride, 1)
                self.body = nn.Sequential(pool, conv(c_in, c_out, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.branches is not None:
                return torch.cat([branch(x) for branch in self.branches], dim=1)
            y = self.body(x)
            return x + y if self.residual else y

    class ImageIO(nn.Module):
        """The ``image_io`` probe (ProbeSpec says how): its own stem and output layer; the 224 px image is
        average-pooled to the stem's resolution first, so every stem runs at stride 1 as image networks' do."""

        def __init__(self) -> None:
            super().__init__()
            w, k = spec.width, spec.stem_kernel
            self.shrink = nn.AvgPool2d(spec.patch) if spec.patch > 1 else nn.Identity()
            self.stem = nn.Sequential(nn.Conv2d(3, w, k, 1, k // 2), act())
            if spec.mode == "transpose":
                self.up: nn.Module = nn.Identity()
                self.out: nn.Module = nn.ConvTranspose2d(w, spec.out_width, 4, 2, 1)
            else:
                if spec.mode == "pixel_shuffle":
                    self.up = nn.Sequential(nn.Conv2d(w, 4 * w, 3, 1, 1), nn.PixelShuffle(2), act())
                elif spec.mode in ("nearest", "bilinear"):
                    self.up = nn.Upsample(
                        scale_factor=2, mode=spec.mode, **({"align_corners": False} if spec.mode == "bilinear" else {})
                    )
                else:
                    self.up = nn.Identity()
                self.out = nn.Conv2d(w, spec.out_width, spec.kernel, 1, spec.kernel // 2)
            finish = {"tanh": nn.Tanh, "sigmoid": nn.Sigmoid}.get(spec.out_activation, nn.Identity)
            self.finish = finish()
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(spec.out_width, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.finish(self.out(self.up(self.stem(self.shrink(x))))))

    class Sequence(nn.Module):
        """The ``tokens`` probe (ProbeSpec says how): a patch stem, the grid's first ``tokens`` tokens with an
        optional class token before them, ``depth`` encoder layers and a classifier on the tokens' mean."""

        def __init__(self) -> None:
            super().__init__()
            w = spec.width
            self.stem = nn.Conv2d(3, w, spec.patch, spec.patch)
            self.class_token = nn.Parameter(torch.zeros(1, 1, w)) if spec.se else None
            layer = nn.TransformerEncoderLayer(
                w, spec.heads, spec.expand * w, activation=spec.activation, batch_first=True, norm_first=spec.residual
            )
            self.encoder = nn.TransformerEncoder(layer, spec.depth, enable_nested_tensor=False)
            self.head = nn.Linear(w, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.stem(x).flatten(2).transpose(1, 2)
            if spec.tokens < y.shape[1]:
                y = y[:, : spec.tokens]
            if self.class_token is not None:
                y = torch.cat([self.class_token.expand(y.shape[0], -1, -1), y], dim=1)
            return self.head(self.encoder(y).mean(1))

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, spec.width, spec.patch, spec.patch)
            cells = [Cell(spec.width, True)]
            keeps_width = spec.cell in ("convnext", "attention", "mlp", "branches", "reductions", "prenorm")
            width = spec.width if keeps_width else spec.out_width
            cells += [Cell(width, False) for _ in range(spec.depth - 1)]
            self.cells = nn.Sequential(*cells)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.cells(self.stem(x)))

    torch.manual_seed(seed)
    probe = {"image_io": ImageIO, "tokens": Sequence}.get(spec.cell, Probe)
    return probe().eval()
