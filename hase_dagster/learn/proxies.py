"""Convolutions the regressor never measured, predicted as the 2-D convolutions it did measure (issue 11).

Every table holds 2-D convolutions only. A user's network can run transposed convolutions (decoders, generators),
1-D ones (audio, sequence models) and 3-D ones (video): the trees then read a 5-D tensor's last four dims as if
they were (batch, channels, height, width), and a transposed convolution's FLOPs and bytes as a family they never
saw. :func:`proxy_kernels` rewrites such a kernel as the 2-D convolution that does the same arithmetic the way the
libraries run it:

- a transposed convolution is the convolution whose backward-data pass it is (cuDNN and ORT's CPU kernel run it
  so): input and output swapped, the same weight, strides, pads and groups, the same FLOPs;
- a 1-D convolution is a 2-D one with a 1 x k kernel over a 1 x L map (what ORT's CUDA EP hands cuDNN);
- a 3-D one is a 2-D one over (batch x output frames) samples of C x kd channels: the same GEMM (M output
  positions, N output channels, K input channels per group x kernel).

Measured on the CPU EP (``results/cpu/proxy_check.md``: the ``operators`` probes' kernels on the 2-core VM against
the CPU bundle, which has none of them) the rewrite is nearer than the trees' fallback for transposed and 1-D
convolutions and level for 3-D ones. The same check found stand-ins for the other unmeasured operators (recurrent
layers as per-step GEMMs, instance norms as LayerNorms, reductions as pooling, activations as known ones) further
off than the fallback, whose FLOPs and bytes the trees read well enough (``results/cpu/proxy_check-all-kinds.md``),
so those are predicted as before. A prediction names each rewritten kernel (``KernelPrediction.proxy``); a device's
own rows for a family, once measured, do not replace the rewrite of a convolution's rank, since no table has
1-D or 3-D convolution rows to learn it from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.costs import bytes_moved, estimate_flops, tensor_bytes
from hase_dagster.analysis.graph import TensorInfo

CONV_OP_TYPES = frozenset({"Conv", "FusedConv", "ConvTranspose"})


def proxy_kernels(kernel: Kernel, knows: Callable[[str], bool]) -> tuple[str, list[Kernel]] | None:
    """The 2-D convolution that does ``kernel``'s work, or None when it needs none.

    Args:
        kernel: a kernel of a model to predict (static detection's or a catalog's).
        knows: whether the regressor has a family.

    Returns:
        (how, kernels): a short description and the stand-in kernels, whose predicted times add up to
        ``kernel``'s; None for anything but a transposed convolution or one of 1 or 3 spatial dims (and for
        such a one no known family can stand in for).
    """
    # (the CPU EP's NCHWc convolutions hold 5-D blocked tensors: 2-D convolutions, never converted)
    if kernel.op_type not in CONV_OP_TYPES or len(kernel.inputs) < 2 or kernel.domain == "com.microsoft.nchwc":
        return None
    return _convolution(kernel, knows)


def _rebuilt(
    kernel: Kernel,
    family: str,
    inputs: list[TensorInfo],
    outputs: list[TensorInfo] | tuple[TensorInfo, ...],
    attributes: dict[str, Any],
    op: str,
) -> Kernel:
    """``kernel`` as an ``op`` kernel of ``family`` on new tensors, its FLOPs and bytes computed again."""
    weight_names = [t.name for t in inputs if t.name in kernel.weight_names]
    read, written = bytes_moved(inputs, outputs)
    weight_bytes = sum(tensor_bytes(t) for t in inputs if t.name in weight_names)
    return replace(
        kernel,
        family=family,
        op_type=op,
        absorbed_ops=[kernel.node_name],
        absorbed_op_types=[op],
        attributes=attributes,
        inputs=list(inputs),
        outputs=list(outputs),
        weight_names=weight_names,
        flops=estimate_flops(op, attributes, inputs, outputs),
        input_bytes=read,
        output_bytes=written,
        weight_bytes=weight_bytes,
        in_graph_us=None,
    )


def _convolution(kernel: Kernel, knows: Callable[[str], bool]) -> tuple[str, list[Kernel]] | None:
    """A transposed convolution as its adjoint convolution, and any convolution of 1 or 3 spatial dims as a 2-D one."""
    x, w = kernel.inputs[0], kernel.inputs[1]
    out = kernel.outputs[0]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape) or len(out.shape) != len(x.shape):
        return None
    steps = []
    attributes = dict(kernel.attributes)
    transposed = kernel.op_type == "ConvTranspose"
    family = kernel.family
    if transposed:
        family = "Conv" if not knows(family) else family
        x, out = TensorInfo(x.name, x.dtype, out.shape), TensorInfo(out.name, out.dtype, x.shape)
        attributes.pop("output_padding", None)
        attributes.pop("output_shape", None)
        steps.append("as its adjoint convolution")
    spatial = len(x.shape) - 2
    if spatial != 2:
        x, w, out, attributes = _as_2d(x, w, out, attributes, spatial)
        steps.append(f"{spatial}-D as 2-D")
    if not steps or not knows(family):
        return None
    rest = kernel.inputs[2:]
    op = "Conv" if transposed else kernel.op_type
    proxy = _rebuilt(kernel, family, [x, w, *rest], [out, *kernel.outputs[1:]], attributes, op)
    return f"{kernel.family} {', '.join(steps)}", [proxy]


def _as_2d(
    x: TensorInfo, w: TensorInfo, out: TensorInfo, attributes: dict[str, Any], spatial: int
) -> tuple[TensorInfo, TensorInfo, TensorInfo, dict[str, Any]]:
    """A convolution of 1 or 3 spatial dims as a 2-D one with the same GEMM (M: output positions, N: output
    channels, K: input channels per group x kernel)."""

    def listed(name: str, fill: int) -> list[int]:
        value = attributes.get(name)
        return [int(v) for v in value] if isinstance(value, list) and value else [fill] * spatial

    kernel_shape, strides, dilations = list(w.shape[2:]), listed("strides", 1), listed("dilations", 1)
    pads = listed("pads", 0) if "pads" in attributes else [0] * (2 * spatial)
    converted = {k: v for k, v in attributes.items() if k not in ("kernel_shape", "strides", "dilations", "pads")}
    n, c = x.shape[0], x.shape[1]
    if spatial == 1:  # a row: (N, C, L) -> (N, C, 1, L)
        x2 = (n, c, 1, x.shape[2])
        w2 = (w.shape[0], w.shape[1], 1, kernel_shape[0])
        out2 = (out.shape[0], out.shape[1], 1, out.shape[2])
        converted |= {
            "kernel_shape": [1, kernel_shape[0]], "strides": [1, strides[0]], "dilations": [1, dilations[0]],
            "pads": [0, pads[0], 0, pads[1]],
        }  # fmt: skip
    else:  # frames into the batch and the frame kernel into the channels: (N x D', C x kd, H, W)
        frames = out.shape[2]
        x2 = (n * frames, c * kernel_shape[0], x.shape[3], x.shape[4])
        w2 = (w.shape[0], w.shape[1] * kernel_shape[0], kernel_shape[1], kernel_shape[2])
        out2 = (out.shape[0] * frames, out.shape[1], out.shape[3], out.shape[4])
        converted |= {
            "kernel_shape": kernel_shape[1:], "strides": strides[1:], "dilations": dilations[1:],
            "pads": [pads[1], pads[2], pads[4], pads[5]],
        }  # fmt: skip
    return (
        TensorInfo(x.name, x.dtype, x2),
        TensorInfo(w.name, w.dtype, w2),
        TensorInfo(out.name, out.dtype, out2),
        converted,
    )
