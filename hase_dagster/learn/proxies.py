"""Transposed convolutions the regressor never measured, predicted as the convolutions they are the adjoint of.

A decoder's or generator's transposed convolution is the backward-data pass of a convolution (cuDNN and ORT's CPU
kernel run it so): the convolution from its output to its input, with the same weight, strides, pads and groups,
does the same FLOPs on the same tensors. A regressor without a transposed-convolution family predicts it as that
convolution; its 1-D and 3-D forms are then read as 2-D ones like every convolution
(``learn.features.conv_dims_as_2d``). Measured on the CPU EP (``results/cpu/proxy_check.md``: the ``operators``
probes' kernels on the 2-core VM, against a regressor without them), the adjoint convolution is nearer than the
trees' fallback. The same check found stand-ins for the other unmeasured operators (recurrent layers as per-step
GEMMs, instance norms as LayerNorms, reductions as pooling, activations as known ones) further off than the
fallback, whose FLOPs and bytes the trees read well enough, so those are predicted as before.
A prediction names each rewritten kernel (``KernelPrediction.proxy``); a device's own rows for the family, once
measured, replace the rewrite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.costs import bytes_moved, estimate_flops, tensor_bytes
from hase_dagster.analysis.graph import TensorInfo


def proxy_kernel(kernel: Kernel, knows: Callable[[str], bool]) -> tuple[str, Kernel] | None:
    """The convolution that does an unmeasured transposed convolution's work, or None when none is needed.

    Args:
        kernel: a kernel of a model to predict (static detection's or a catalog's).
        knows: whether the regressor has a family.

    Returns:
        (how, stand-in): a short description and the kernel predicted in ``kernel``'s place; None for anything
        but a transposed convolution of a family the regressor lacks (and for one when the regressor has no
        ``Conv`` family either).
    """
    if kernel.op_type != "ConvTranspose" or len(kernel.inputs) < 2 or knows(kernel.family) or not knows("Conv"):
        return None
    x, w, out = kernel.inputs[0], kernel.inputs[1], kernel.outputs[0]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape) or len(out.shape) != len(x.shape):
        return None
    attributes = {k: v for k, v in kernel.attributes.items() if k not in ("output_padding", "output_shape")}
    adjoint_in, adjoint_out = TensorInfo(x.name, x.dtype, out.shape), TensorInfo(out.name, out.dtype, x.shape)
    inputs, outputs = [adjoint_in, w, *kernel.inputs[2:]], [adjoint_out, *kernel.outputs[1:]]
    weight_bytes = sum(tensor_bytes(t) for t in inputs if t.name in kernel.weight_names)
    read, written = bytes_moved(inputs, outputs)
    stand_in = replace(
        kernel,
        family="Conv",
        op_type="Conv",
        absorbed_op_types=["Conv"],
        attributes=attributes,
        inputs=inputs,
        outputs=outputs,
        flops=estimate_flops("Conv", attributes, inputs, outputs),
        input_bytes=read,
        output_bytes=written,
        weight_bytes=weight_bytes,
        in_graph_us=None,
    )
    return f"{kernel.family} as its adjoint Conv", stand_in
