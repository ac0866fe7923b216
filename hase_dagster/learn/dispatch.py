"""How long the host takes to dispatch one ORT node on a device-clocked EP, by op type, relative to a typical node.

On the CUDA EP a node's ``Compute`` runs on the host and enqueues its kernels; a host-bound run (batch 1-4, small
kernels) lasts about as long as its nodes' dispatches. That time is not one constant: cuDNN's convolution and
cuBLAS's GEMM set up descriptors and plans on the host every call, an elementwise kernel only launches, and a view
aliases its input. The analysis already times every node under ORT's profiler on the device's host
(:attr:`Kernel.in_graph_us`, ``analysis.graph.optimize_and_profile``), whose CUDA EP node times are host-side; at
batch 1 the GPU never falls behind, so they are the dispatch (plus the profiler's own cost per node, the same for
all). On the H100's training kernels at batch 1 the median node took 14.5 us, a Conv 40, a Gemm 35.5, an Add 11.5
and a Reshape 5.5 (results/gpu-general/dispatch).

The composition keeps one fitted dispatch time (``Composition.dispatch_ms``) and weights it per kernel by its op
type's median over the typical node's, so a model of convolutions is charged more host time per kernel than one of
elementwise ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.fusion import VIEW_OP_TYPES

# The batch size whose node times stand for the host's dispatch: the GPU keeps up with the host there, so a node's
# host time is not stretched by a full launch queue (at batch 64 a Conv's mean host time was 3x its batch-1 one).
DISPATCH_BATCH_SIZE = 1
# Op types with fewer timed nodes than this keep the typical weight (1).
MIN_NODES = 5
# Weights are bounded: an op type whose node runs a host loop (ORT's CUDA LSTM and GRU: milliseconds on the host)
# is host-clocked already (Composition.wait_included_families), not a dispatch.
MAX_WEIGHT = 8.0


def op_dispatch_weights(
    timed: Iterable[tuple[str, float]], min_nodes: int = MIN_NODES, max_weight: float = MAX_WEIGHT
) -> dict[str, float] | None:
    """Each op type's median host time per node over the median of every launching node's.

    Args:
        timed: (op type, host time in us) of nodes timed in graph at :data:`DISPATCH_BATCH_SIZE`; views
            (``VIEW_OP_TYPES``) are left out, they launch nothing.
        min_nodes: op types with fewer nodes are left out (their kernels weigh 1).
        max_weight: the largest weight kept.

    Returns:
        Op type to weight (the typical node 1), or None where no node was timed.
    """
    by_op: dict[str, list[float]] = {}
    for op_type, us in timed:
        if op_type in VIEW_OP_TYPES or not np.isfinite(us) or us <= 0:
            continue
        by_op.setdefault(op_type, []).append(float(us))
    every = [us for values in by_op.values() for us in values]
    if not every:
        return None
    typical = float(np.median(every))
    return {
        op: round(min(max_weight, float(np.median(values)) / typical), 4)
        for op, values in sorted(by_op.items())
        if len(values) >= min_nodes
    }


def kernel_dispatch_weights(
    kernels: Sequence[Kernel], proxy_families: Sequence[str], weights: Mapping[str, float] | None
) -> tuple[float, ...]:
    """Each kernel's dispatch weight: its op type's entry in ``weights``, or, for a kernel predicted through proxies
    (a family no training row has, ``learn.proxies``), the sum of its proxies' entries: ORT's Einsum launches its
    transposes, GEMM and copy from one node, and the H100's dispatch study timed an Einsum node at 4.5 typical
    nodes, its proxies' weights summing to about 4 (results/gpu-general/dispatch). Op types and families without an
    entry weigh 1.

    Args:
        kernels: a model's kernels in launch order.
        proxy_families: each kernel's proxies' families, "+"-joined ("" for none: ``KernelPrediction.proxy_family``).
        weights: :func:`op_dispatch_weights`' answer; None: no weights.

    Returns:
        One weight per kernel, or () where ``weights`` is None (every kernel dispatches alike).
    """
    if weights is None:
        return ()
    return tuple(
        sum(float(weights.get(f, 1.0)) for f in proxies.split("+")) if proxies else float(weights.get(k.op_type, 1.0))
        for k, proxies in zip(kernels, proxy_families, strict=True)
    )
