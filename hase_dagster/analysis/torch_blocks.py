"""Torch building blocks the generated networks share (``random_nets``, ``design_space``): a
convolution with batch norm and an optional activation, and squeeze-excitation. torch is imported
when a block is built, so importing this module costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def conv_bn(
    c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, activation: Callable[[], Any] | None = None
) -> Any:  # -> torch.nn.Sequential
    """Conv2d (padding k // 2, no bias) and BatchNorm2d, then ``activation()`` when given."""
    from torch import nn

    layers = [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    return nn.Sequential(*layers, activation()) if activation else nn.Sequential(*layers)


def squeeze_excite(channels: int, inner: Callable[[], Any]) -> Any:  # -> torch.nn.Module
    """Squeeze-excitation: the input scaled by a sigmoid gate computed from its global average
    (1x1 convolutions to max(8, channels // 4) and back, ``inner()`` between them)."""
    import torch
    from torch import nn

    class SqueezeExcite(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            hidden = max(8, channels // 4)
            self.gate = nn.Sequential(
                nn.AdaptiveAvgPool2d(1),
                nn.Conv2d(channels, hidden, 1),
                inner(),
                nn.Conv2d(hidden, channels, 1),
                nn.Sigmoid(),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.gate(x)

    return SqueezeExcite()
