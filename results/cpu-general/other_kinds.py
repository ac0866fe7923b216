"""Set O (issue 11): networks of kinds that no profile and no earlier set has, written by hand as users write
them: a U-Net, a DCGAN generator, a wav2vec-style 1-D feature encoder, a temporal convolution network, an LSTM
language model, a bidirectional GRU tagger, an MLP-Mixer, an ESPCN super-resolution net, an FPN-style decoder
with resizes, a fast style-transfer net, a DeepLab ASPP head, and torchvision's 3-D ResNet-18 for video. Their
operators (transposed and 1-D / 3-D / dilated convolutions, resizes, pixel shuffle, group and instance norm,
reflection pads, recurrent layers, LeakyReLU / Tanh / PReLU) are the ones the ``operators`` probe space draws;
the set is fixed before those probes are measured, and the networks are not drawn from it.

Set P (fixed 2026-11-27 00:58 UTC, after set O was timed on the H100 and before the ``recurrent`` probes are measured
or merged, to judge them blind): a CRNN text recogniser (convolutions, then a two-layer bidirectional LSTM), a
DeepSpeech2-style speech model (2-D convolutions over a spectrogram, three bidirectional GRUs), an LSTM time-series
forecaster, a bidirectional LSTM sequence-to-sequence encoder, an SRResNet super-resolution generator (PReLU, pixel
shuffles), a pix2pix U-Net generator (instance norms, LeakyReLU, transposed convolutions, Tanh), a WaveNet stack
(gated dilated causal 1-D convolutions) and Tacotron's CBHG (a 1-D convolution bank, highway layers, a bidirectional
GRU). None is drawn from a probe space.

Set Q (fixed 2026-11-27 03:25 UTC, before the ``image_io`` probes' timings were read on either device, to judge them
blind): image-to-image networks, whose two ends no classifier has: EDSR-baseline (x2, pixel shuffle), FSRCNN
(1-channel, PReLU, a 9x9 transposed convolution out), DnCNN (17 layers, 1 channel in and out), a CycleGAN ResNet
generator (reflection pads, instance norms, 7x7 convolutions in and out, Tanh), a Monodepth2-style depth network
(ResNet-18 encoder, nearest upsampling, ELU, a 1-channel Sigmoid disparity), a VAE decoder (GroupNorm, SiLU, nearest
upsampling 32 -> 256 px), a U-Net with bilinear upsampling (1 channel in, a Sigmoid mask out) and a SimpleBaseline
pose network (ResNet-18, three transposed convolutions, 17 heatmaps).

Each network is exported at each batch size into OUT as ``NAME_iS_bB.onnx`` (S: the input's image size, or the
sequence length), random weights, opset 17, loaded by ORT on the CPU (and run once at batch 1).

    .venv/bin/python results/cpu-general/other_kinds.py OUT --batch-sizes 1,16,64 [--only unet,tcn]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F  # noqa: N812 (torch's own idiom)
from torch import nn

from hase_dagster.analysis.zoo import trace_to_onnx


def _double_conv(c_in: int, c_out: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
        nn.Conv2d(c_out, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(),
    )  # fmt: skip


class UNet(nn.Module):
    """Ronneberger's U-Net, three levels of 32-256 channels: max pools down, transposed convolutions up."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.down = nn.ModuleList([_double_conv(3, c), _double_conv(c, 2 * c), _double_conv(2 * c, 4 * c)])
        self.bottom = _double_conv(4 * c, 8 * c)
        self.up = nn.ModuleList([nn.ConvTranspose2d(k, k // 2, 2, 2) for k in (8 * c, 4 * c, 2 * c)])
        self.merge = nn.ModuleList([_double_conv(k, k // 2) for k in (8 * c, 4 * c, 2 * c)])
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips)):
            x = merge(torch.cat([up(x), skip], 1))
        return self.head(x)


class DCGANGenerator(nn.Module):
    """Radford et al.'s generator: a 100-d code to a 64 px image through transposed convolutions."""

    def __init__(self, g: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        widths = [100, 8 * g, 4 * g, 2 * g, g]
        for i, (c_in, c_out) in enumerate(zip(widths, widths[1:])):
            layers += [nn.ConvTranspose2d(c_in, c_out, 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False)]
            layers += [nn.BatchNorm2d(c_out), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.ConvTranspose2d(g, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class AudioEncoder(nn.Module):
    """wav2vec 2.0's feature encoder: seven 1-D convolutions over 1 s of 16 kHz audio, a group norm on the first."""

    def __init__(self, c: int = 256) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(1, c, 10, 5, bias=False), nn.GroupNorm(c, c), nn.GELU()]
        for k in (3, 3, 3, 3, 2, 2):
            layers += [nn.Conv1d(c, c, k, 2, bias=False), nn.GELU()]
        self.net = nn.Sequential(*layers)
        self.project = nn.Linear(c, 256)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.project(self.net(wave).transpose(1, 2))


class TemporalConvNet(nn.Module):
    """Bai et al.'s TCN: residual blocks of two dilated 1-D convolutions (dilation 1-32) over 1,024 steps."""

    def __init__(self, c: int = 128, levels: int = 6) -> None:
        super().__init__()
        self.stem = nn.Conv1d(40, c, 1)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(c, c, 3, padding=2**i, dilation=2**i),
                nn.ReLU(),
                nn.Conv1d(c, c, 3, padding=2**i, dilation=2**i),
                nn.ReLU(),
            )  # fmt: skip
            for i in range(levels)
        )
        self.head = nn.Conv1d(c, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = F.relu(x + block(x))
        return self.head(x)


class LSTMLanguageModel(nn.Module):
    """A two-layer LSTM language model over 128 tokens: embedding, LSTM, a projection to the 8,000-token vocabulary."""

    def __init__(self, vocabulary: int = 8000, width: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.lstm = nn.LSTM(width, width, 2, batch_first=True)
        self.out = nn.Linear(width, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.embed(tokens))[0])


class GRUTagger(nn.Module):
    """A bidirectional GRU sequence tagger over 256 steps of 80 mel features (one layer of 192 a direction)."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(80, 192, 1, batch_first=True, bidirectional=True)
        self.out = nn.Linear(384, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.gru(x)[0])


class MLPMixer(nn.Module):
    """Tolstikhin et al.'s MLP-Mixer, small: 16 px patches, width 256, four blocks of token and channel MLPs."""

    def __init__(self, width: int = 256, tokens: int = 196, depth: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 16, 16)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(2 * depth))
        self.token_mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(tokens, 256), nn.GELU(), nn.Linear(256, tokens)) for _ in range(depth)
        )
        self.channel_mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)) for _ in range(depth)
        )
        self.head = nn.Linear(width, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x).flatten(2).transpose(1, 2)
        for i, (tokens, channels) in enumerate(zip(self.token_mlps, self.channel_mlps)):
            x = x + tokens(self.norms[2 * i](x).transpose(1, 2)).transpose(1, 2)
            x = x + channels(self.norms[2 * i + 1](x))
        return self.head(x.mean(1))


class ESPCN(nn.Module):
    """Shi et al.'s ESPCN: three convolutions with Tanh and a pixel shuffle, 3x super-resolution."""

    def __init__(self, scale: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
            nn.Conv2d(32, 3 * scale**2, 3, padding=1), nn.PixelShuffle(scale),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FPNDecoder(nn.Module):
    """A feature pyramid over four strided LeakyReLU convolutions: nearest resizes top-down, a bilinear one out."""

    def __init__(self) -> None:
        super().__init__()
        widths = (3, 64, 128, 256, 256)
        self.stages = nn.ModuleList(nn.Conv2d(a, b, 3, 2, 1) for a, b in zip(widths, widths[1:]))
        self.lateral = nn.ModuleList(nn.Conv2d(c, 128, 1) for c in widths[1:])
        self.out = nn.Conv2d(128, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = []
        for stage in self.stages:
            x = F.leaky_relu(stage(x), 0.1)
            features.append(x)
        y = self.lateral[3](features[3])
        for i in (2, 1, 0):
            y = F.interpolate(y, scale_factor=2, mode="nearest") + self.lateral[i](features[i])
        return self.out(F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False))


class StyleTransfer(nn.Module):
    """Johnson et al.'s transformation net: reflection pads, instance norms, residual blocks, nearest upsampling."""

    def __init__(self) -> None:
        super().__init__()

        def block(c_in: int, c_out: int, k: int, stride: int = 1, relu: bool = True) -> nn.Sequential:
            layers = [
                nn.ReflectionPad2d(k // 2),
                nn.Conv2d(c_in, c_out, k, stride),
                nn.InstanceNorm2d(c_out, affine=True),
            ]
            return nn.Sequential(*layers, *([nn.ReLU()] if relu else []))

        self.down = nn.Sequential(block(3, 32, 9), block(32, 64, 3, 2), block(64, 128, 3, 2))
        self.residuals = nn.ModuleList(
            nn.Sequential(block(128, 128, 3), block(128, 128, 3, relu=False)) for _ in range(5)
        )
        self.up = nn.Sequential(
            nn.Upsample(scale_factor=2), block(128, 64, 3), nn.Upsample(scale_factor=2), block(64, 32, 3),
            nn.ReflectionPad2d(4), nn.Conv2d(32, 3, 9),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        for residual in self.residuals:
            x = x + residual(x)
        return self.up(x)


class ASPPHead(nn.Module):
    """DeepLab v3's atrous spatial pyramid on a small strided backbone: rates 6, 12, 18, image pooling, 4x bilinear."""

    def __init__(self, c: int = 256) -> None:
        super().__init__()
        widths = (3, 32, 64, 128, 256)
        self.backbone = nn.Sequential(
            *[
                nn.Sequential(nn.Conv2d(a, b, 3, 2 if i < 3 else 1, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU())
                for i, (a, b) in enumerate(zip(widths, widths[1:]))
            ]
        )
        self.branches = nn.ModuleList(
            [nn.Conv2d(256, c, 1, bias=False)]
            + [nn.Conv2d(256, c, 3, padding=r, dilation=r, bias=False) for r in (6, 12, 18)]
        )
        self.pool = nn.Conv2d(256, c, 1)
        self.project = nn.Sequential(
            nn.Conv2d(5 * c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 21, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        f = self.backbone(x)
        pooled = F.interpolate(self.pool(f.mean((2, 3), keepdim=True)), size=f.shape[-2:], mode="bilinear")
        y = self.project(torch.cat([F.relu(b(f)) for b in self.branches] + [pooled], 1))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


class CRNN(nn.Module):
    """Shi et al.'s CRNN: seven convolutions over a 32x128 line of text to 32 columns of 512, a two-layer
    bidirectional LSTM of 256 a direction, 37 classes a column."""

    def __init__(self) -> None:
        super().__init__()

        def block(c_in: int, c_out: int, norm: bool = False) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_out, 3, 1, 1), *([nn.BatchNorm2d(c_out)] if norm else []), nn.ReLU()]

        self.cnn = nn.Sequential(
            *block(1, 64), nn.MaxPool2d(2), *block(64, 128), nn.MaxPool2d(2), *block(128, 256, True),
            *block(256, 256), nn.MaxPool2d((2, 1)), *block(256, 512, True), *block(512, 512),
            nn.MaxPool2d((2, 1)), *block(512, 512, True), nn.AdaptiveAvgPool2d((1, None)),
        )  # fmt: skip
        self.rnn = nn.LSTM(512, 256, 2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(512, 37)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        columns = self.cnn(x).squeeze(2).transpose(1, 2)
        return self.out(self.rnn(columns)[0])


class DeepSpeech(nn.Module):
    """DeepSpeech2, small: two strided 2-D convolutions over 2 s of 161-bin spectrogram (200 frames to 100), three
    bidirectional GRUs of 384 a direction, 29 characters a frame."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20),
            nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20),
        )  # fmt: skip
        self.rnn = nn.GRU(32 * 41, 384, 3, batch_first=True, bidirectional=True)
        self.out = nn.Linear(768, 29)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)  # (n, 32, 41, 100)
        return self.out(self.rnn(y.flatten(1, 2).transpose(1, 2))[0])


class Forecaster(nn.Module):
    """An LSTM forecaster: a week of hourly readings (168 steps of 8 features), two layers of 128, the next 24 h."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 128, 2, batch_first=True)
        self.out = nn.Linear(128, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(x)[0][:, -1])


class Seq2SeqEncoder(nn.Module):
    """A translation model's encoder: 64 tokens of a 16,000-word vocabulary, embeddings of 512, two bidirectional
    LSTM layers of 256 a direction, and a bridge to the decoder's 512."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16000, 512)
        self.lstm = nn.LSTM(512, 256, 2, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(512, 512)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.bridge(self.lstm(self.embed(tokens))[0]))


class SRResNet(nn.Module):
    """Ledig et al.'s SRResNet generator, small: 9x9 convolutions in and out, eight residual blocks of 64 with
    PReLU, two pixel-shuffle 2x upsamplings (64 px in, 256 px out)."""

    def __init__(self, c: int = 64, blocks: int = 8) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, c, 9, padding=4), nn.PReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(c, c, 3, padding=1),
                nn.BatchNorm2d(c),
                nn.PReLU(),
                nn.Conv2d(c, c, 3, padding=1),
                nn.BatchNorm2d(c),
            )  # fmt: skip
            for _ in range(blocks)
        )
        self.mid = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))
        self.up = nn.Sequential(
            *(m for _ in range(2) for m in (nn.Conv2d(c, 4 * c, 3, padding=1), nn.PixelShuffle(2), nn.PReLU()))
        )
        self.tail = nn.Conv2d(c, 3, 9, padding=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = y = self.head(x)
        for block in self.blocks:
            y = y + block(y)
        return self.tail(self.up(x + self.mid(y)))


class Pix2PixGenerator(nn.Module):
    """Isola et al.'s U-Net generator at 128 px: five strided 4x4 convolutions (LeakyReLU 0.2, instance norms) down,
    transposed 4x4 convolutions with skips up, Tanh out."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        widths = [c, 2 * c, 4 * c, 8 * c, 8 * c]
        self.down = nn.ModuleList()
        for i, w in enumerate(widths):
            layers: list[nn.Module] = [nn.Conv2d(3 if i == 0 else widths[i - 1], w, 4, 2, 1)]
            if 0 < i < len(widths) - 1:
                layers.append(nn.InstanceNorm2d(w))
            self.down.append(nn.Sequential(*layers, nn.LeakyReLU(0.2)))
        self.up = nn.ModuleList()
        for i in reversed(range(1, len(widths))):
            c_in = widths[i] * (1 if i == len(widths) - 1 else 2)
            self.up.append(
                nn.Sequential(
                    nn.ConvTranspose2d(c_in, widths[i - 1], 4, 2, 1), nn.InstanceNorm2d(widths[i - 1]), nn.ReLU()
                )
            )
        self.out = nn.Sequential(nn.ConvTranspose2d(2 * c, 3, 4, 2, 1), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        skips.pop()
        for block in self.up:
            x = torch.cat([block(x), skips.pop()], 1)
        return self.out(x)


class WaveNet(nn.Module):
    """van den Oord et al.'s WaveNet, small: two stacks of eight gated causal 1-D convolutions (dilation 1-128, 64
    residual and 128 skip channels) over 4,000 samples of 64-d input."""

    def __init__(self, c: int = 64, skip: int = 128) -> None:
        super().__init__()
        self.inp = nn.Conv1d(64, c, 1)
        self.dilations = [2**i for i in range(8)] * 2
        self.gates = nn.ModuleList(nn.Conv1d(c, 2 * c, 2, dilation=d) for d in self.dilations)
        self.residual = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in self.dilations)
        self.skip = nn.ModuleList(nn.Conv1d(c, skip, 1) for _ in self.dilations)
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(), nn.Conv1d(skip, 256, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        skips = 0
        for d, gate, residual, skip in zip(self.dilations, self.gates, self.residual, self.skip):
            filt, g = gate(F.pad(x, (d, 0))).chunk(2, 1)
            y = torch.tanh(filt) * torch.sigmoid(g)
            x = x + residual(y)
            skips = skips + skip(y)
        return self.out(skips)


class CBHG(nn.Module):
    """Tacotron's CBHG over 200 frames of 128-d features: a bank of 1-D convolutions of widths 1-8, a max pool,
    two projections, four highway layers and a bidirectional GRU of 128 a direction."""

    def __init__(self, c: int = 128, bank: int = 8) -> None:
        super().__init__()
        self.bank = nn.ModuleList(
            nn.Sequential(nn.Conv1d(c, c, k, padding=k // 2), nn.BatchNorm1d(c), nn.ReLU()) for k in range(1, bank + 1)
        )
        self.project = nn.Sequential(
            nn.Conv1d(bank * c, c, 3, padding=1), nn.BatchNorm1d(c), nn.ReLU(),
            nn.Conv1d(c, c, 3, padding=1), nn.BatchNorm1d(c),
        )  # fmt: skip
        self.highways = nn.ModuleList(nn.Linear(c, 2 * c) for _ in range(4))
        self.gru = nn.GRU(c, c, 1, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[-1]
        y = torch.cat([conv(x)[..., :steps] for conv in self.bank], 1)
        y = F.max_pool1d(y, 2, 1, padding=1)[..., :steps]
        y = (self.project(y) + x).transpose(1, 2)
        for highway in self.highways:
            h, t = highway(y).chunk(2, -1)
            gate = torch.sigmoid(t)
            y = F.relu(h) * gate + y * (1 - gate)
        return self.gru(y)[0]


class EDSR(nn.Module):
    """Lim et al.'s EDSR-baseline, x2: a 3x3 stem of 64, eight residual blocks without norms (residual scale 0.1), a
    pixel shuffle up and a 3x3 convolution to RGB."""

    def __init__(self, c: int = 64, blocks: int = 8) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))
            for _ in range(blocks)
        )
        self.body_end = nn.Conv2d(c, c, 3, padding=1)
        self.up = nn.Sequential(nn.Conv2d(c, 4 * c, 3, padding=1), nn.PixelShuffle(2))
        self.tail = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = y = self.head(x)
        for block in self.blocks:
            y = y + 0.1 * block(y)
        return self.tail(self.up(x + self.body_end(y)))


class FSRCNN(nn.Module):
    """Dong et al.'s FSRCNN, x2 on the luma channel: 5x5 feature extraction of 56, a 1x1 shrink to 12, four 3x3
    maps, a 1x1 expand, PReLUs with a slope per channel, and a 9x9 stride-2 transposed convolution out."""

    def __init__(self, d: int = 56, s: int = 12, m: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(1, d, 5, padding=2), nn.PReLU(d), nn.Conv2d(d, s, 1), nn.PReLU(s)]
        for _ in range(m):
            layers += [nn.Conv2d(s, s, 3, padding=1), nn.PReLU(s)]
        layers += [nn.Conv2d(s, d, 1), nn.PReLU(d), nn.ConvTranspose2d(d, 1, 9, 2, 4, 1)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class DnCNN(nn.Module):
    """Zhang et al.'s DnCNN for grey images: 17 3x3 layers of 64 (batch norms inside), predicting the noise."""

    def __init__(self, c: int = 64, depth: int = 17) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(1, c, 3, padding=1), nn.ReLU()]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
        layers.append(nn.Conv2d(c, 1, 3, padding=1))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.body(x)


class CycleGANGenerator(nn.Module):
    """Zhu et al.'s ResNet generator with six blocks (ngf 32): reflection pads, 7x7 convolutions in and out,
    instance norms, two strided convolutions down, two transposed ones up, Tanh."""

    def __init__(self, c: int = 32, blocks: int = 6) -> None:
        super().__init__()

        def block(k: int) -> nn.Module:
            return nn.Sequential(
                nn.ReflectionPad2d(1), nn.Conv2d(k, k, 3), nn.InstanceNorm2d(k), nn.ReLU(),
                nn.ReflectionPad2d(1), nn.Conv2d(k, k, 3), nn.InstanceNorm2d(k),
            )  # fmt: skip

        self.down = nn.Sequential(
            nn.ReflectionPad2d(3), nn.Conv2d(3, c, 7), nn.InstanceNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, 2, 1), nn.InstanceNorm2d(2 * c), nn.ReLU(),
            nn.Conv2d(2 * c, 4 * c, 3, 2, 1), nn.InstanceNorm2d(4 * c), nn.ReLU(),
        )  # fmt: skip
        self.blocks = nn.ModuleList(block(4 * c) for _ in range(blocks))
        self.up = nn.Sequential(
            nn.ConvTranspose2d(4 * c, 2 * c, 3, 2, 1, 1), nn.InstanceNorm2d(2 * c), nn.ReLU(),
            nn.ConvTranspose2d(2 * c, c, 3, 2, 1, 1), nn.InstanceNorm2d(c), nn.ReLU(),
            nn.ReflectionPad2d(3), nn.Conv2d(c, 3, 7), nn.Tanh(),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        for block in self.blocks:
            x = x + block(x)
        return self.up(x)


def _resnet18_stages() -> tuple[nn.Module, nn.ModuleList]:
    """torchvision's ResNet-18 (random weights) as its stem and four stages."""
    import torchvision

    net = torchvision.models.resnet18(weights=None)
    return nn.Sequential(net.conv1, net.bn1, net.relu), nn.ModuleList([
        nn.Sequential(net.maxpool, net.layer1), net.layer2, net.layer3, net.layer4
    ])  # fmt: skip


class DepthNet(nn.Module):
    """Monodepth2's depth network: a ResNet-18 encoder; a decoder of 3x3 convolutions with ELU, nearest 2x
    upsampling and skip concatenation (256 -> 16 channels), and a 3x3 convolution to one Sigmoid disparity."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.stages = _resnet18_stages()
        skips, widths = (256, 128, 64, 64, 0), (256, 128, 64, 32, 16)
        c_in = 512
        self.convs, self.merges = nn.ModuleList(), nn.ModuleList()
        for skip, width in zip(skips, widths):
            self.convs.append(nn.Sequential(nn.Conv2d(c_in, width, 3, padding=1), nn.ELU()))
            self.merges.append(nn.Sequential(nn.Conv2d(width + skip, width, 3, padding=1), nn.ELU()))
            c_in = width
        self.disparity = nn.Sequential(nn.Conv2d(16, 1, 3, padding=1), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [self.stem(x)]
        for stage in self.stages:
            features.append(stage(features[-1]))
        y = features[-1]
        for i, (conv, merge) in enumerate(zip(self.convs, self.merges)):
            y = F.interpolate(conv(y), scale_factor=2, mode="nearest")
            if i < 4:
                y = torch.cat([y, features[3 - i]], 1)
            y = merge(y)
        return self.disparity(y)


class VAEDecoder(nn.Module):
    """A latent-diffusion VAE decoder, small: a 3x3 convolution from 4 latent channels, residual blocks with
    GroupNorm(32) and SiLU, nearest 2x upsampling three times (32 -> 256 px, 128 -> 32 channels), RGB out."""

    def __init__(self, widths: tuple[int, ...] = (128, 128, 64, 32)) -> None:
        super().__init__()

        class Res(nn.Module):
            def __init__(self, c_in: int, c_out: int) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.GroupNorm(32, c_in), nn.SiLU(), nn.Conv2d(c_in, c_out, 3, padding=1),
                    nn.GroupNorm(32, c_out), nn.SiLU(), nn.Conv2d(c_out, c_out, 3, padding=1),
                )  # fmt: skip
                self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.skip(x) + self.body(x)

        self.stem = nn.Conv2d(4, widths[0], 3, padding=1)
        stages: list[nn.Module] = [Res(widths[0], widths[0])]
        for c_in, c_out in zip(widths, widths[1:]):
            stages += [
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(c_in, c_in, 3, padding=1),
                Res(c_in, c_out),
            ]
        self.stages = nn.Sequential(*stages)
        self.out = nn.Sequential(nn.GroupNorm(32, widths[-1]), nn.SiLU(), nn.Conv2d(widths[-1], 3, 3, padding=1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.out(self.stages(self.stem(z)))


class BilinearUNet(nn.Module):
    """A U-Net as segmentation code often writes it: four levels of 16-128 channels, bilinear upsampling and a
    1x1 convolution to one Sigmoid mask, 1 channel in."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        widths = [c, 2 * c, 4 * c, 8 * c]
        self.down = nn.ModuleList(
            [_double_conv(1, widths[0])] + [_double_conv(a, b) for a, b in zip(widths, widths[1:])]
        )
        self.merge = nn.ModuleList(_double_conv(b + a, a) for a, b in zip(widths[:-1], widths[1:]))
        self.head = nn.Conv2d(c, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(F.max_pool2d(x, 2) if i else x)
            skips.append(x)
        for i, merge in enumerate(reversed(self.merge)):
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = merge(torch.cat([x, skips[-2 - i]], 1))
        return torch.sigmoid(self.head(x))


class PoseNet(nn.Module):
    """Xiao et al.'s SimpleBaseline: a ResNet-18 encoder, three 4x4 stride-2 transposed convolutions of 256 (batch
    norm, ReLU) and a 1x1 convolution to 17 keypoint heatmaps (256 x 192 in, 64 x 48 out)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.stages = _resnet18_stages()
        layers: list[nn.Module] = []
        c_in = 512
        for _ in range(3):
            layers += [nn.ConvTranspose2d(c_in, 256, 4, 2, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU()]
            c_in = 256
        self.deconv = nn.Sequential(*layers)
        self.heatmaps = nn.Conv2d(256, 17, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.heatmaps(self.deconv(x))


def _r3d_18() -> nn.Module:
    import torchvision

    return torchvision.models.video.r3d_18(weights=None)


# name -> (constructor, one sample's input shape, the size in the file name, integer tokens below this many, or 0)
NETWORKS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int, int]] = {
    "unet": (UNet, (3, 256, 256), 256, 0),
    "dcgan": (DCGANGenerator, (100, 1, 1), 64, 0),
    "audioenc": (AudioEncoder, (1, 16000), 16000, 0),
    "tcn": (TemporalConvNet, (40, 1024), 1024, 0),
    "lstmlm": (LSTMLanguageModel, (128,), 128, 8000),
    "grutagger": (GRUTagger, (256, 80), 256, 0),
    "mixer": (MLPMixer, (3, 224, 224), 224, 0),
    "espcn": (ESPCN, (3, 224, 224), 224, 0),
    "fpn": (FPNDecoder, (3, 256, 256), 256, 0),
    "style": (StyleTransfer, (3, 256, 256), 256, 0),
    "aspp": (ASPPHead, (3, 256, 256), 256, 0),
    "r3d18": (_r3d_18, (3, 16, 112, 112), 112, 0),
    # set P
    "crnn": (CRNN, (1, 32, 128), 128, 0),
    "deepspeech": (DeepSpeech, (1, 161, 200), 200, 0),
    "forecaster": (Forecaster, (168, 8), 168, 0),
    "seq2seqenc": (Seq2SeqEncoder, (64,), 64, 16000),
    "srresnet": (SRResNet, (3, 64, 64), 64, 0),
    "pix2pix": (Pix2PixGenerator, (3, 128, 128), 128, 0),
    "wavenet": (WaveNet, (64, 4000), 4000, 0),
    "cbhg": (CBHG, (128, 200), 200, 0),
    # set Q
    "edsr": (EDSR, (3, 96, 96), 96, 0),
    "fsrcnn": (FSRCNN, (1, 128, 128), 128, 0),
    "dncnn": (DnCNN, (1, 160, 160), 160, 0),
    "cyclegan": (CycleGANGenerator, (3, 128, 128), 128, 0),
    "depthnet": (DepthNet, (3, 192, 256), 192, 0),
    "vaedec": (VAEDecoder, (4, 32, 32), 32, 0),
    "unetbilinear": (BilinearUNet, (1, 192, 192), 192, 0),
    "posenet": (PoseNet, (3, 256, 192), 256, 0),
}
SET_O = ("unet", "dcgan", "audioenc", "tcn", "lstmlm", "grutagger", "mixer", "espcn", "fpn", "style", "aspp", "r3d18")
SET_P = ("crnn", "deepspeech", "forecaster", "seq2seqenc", "srresnet", "pix2pix", "wavenet", "cbhg")
SET_Q = ("edsr", "fsrcnn", "dncnn", "cyclegan", "depthnet", "vaedec", "unetbilinear", "posenet")


def export(name: str, out: Path, batch: int) -> Path:
    """``name`` exported at ``batch`` into ``out`` and run once by ORT on the CPU; returns the file."""
    make, shape, size, vocabulary = NETWORKS[name]
    torch.manual_seed(0)
    module = make().eval()
    example = torch.randint(0, vocabulary, (batch, *shape)) if vocabulary else torch.randn(batch, *shape)
    path = out / f"{name}_i{size}_b{batch}.onnx"
    trace_to_onnx(module, example, path, 17)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    if batch == 1:  # the check run: batch 1 only, as a 2-core machine runs r3d_18 at 64 for minutes
        feed = np.zeros((1, *shape), np.int64 if vocabulary else np.float32)
        session.run(None, {session.get_inputs()[0].name: feed})
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument(
        "--only", default=None, help="comma-separated names, or a set: O, P or Q (default: every network)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sets = {"O": SET_O, "P": SET_P, "Q": SET_Q}
    names = list(sets.get(args.only) or args.only.split(",")) if args.only else list(NETWORKS)
    unknown = sorted(set(names) - set(NETWORKS))
    if unknown:
        raise SystemExit(f"other_kinds: error: no network named {unknown}; known: {', '.join(NETWORKS)}")
    for name in names:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            print(export(name, args.out, batch), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
