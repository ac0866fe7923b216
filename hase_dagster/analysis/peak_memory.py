"""The peak memory a model holds while ORT runs it, predicted from its kernels in execution order:
weights, plus the largest set of activation tensors alive at once, plus a workspace.

A tensor is alive from the kernel that produces it to the last kernel that reads it; a graph
output (read by no kernel) stays alive to the end, and the model's inputs are held by the caller
for the whole run. ORT's allocation planner reuses the memory of dead tensors the same way (memory
patterns), so the live peak is what its arena must hold, before the arena's own rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.costs import tensor_bytes

MB = 1e6
# cuBLAS's default workspace on Hopper-class GPUs (per handle); the CUDA EP's cuDNN convolutions take
# their workspace from the arena too, bounded here by the largest kernel's activations. Both are
# assumptions; on the H100 this workspace plus the fitted session constant below left no arena share
# to fit (results/memory/README.md).
CUBLAS_WORKSPACE_BYTES = 32 * 2**20
# What an ORT session holds beyond its tensors (graph, kernels, planner state): squeezenet1_1 and
# resnet18 at batch 1 held 5.0 and 4.8 MB more RSS than their weights and live activations on the
# CPU EP (the 2-core dev VM, 2026-11-23). On the CUDA EP (cuDNN/cuBLAS handles, kernels loaded, the
# arena's first regions) 127.7 MB, fitted on the H100's six measured peaks (resnet50, mobilenet_v2,
# efficientnet_b0 at batch 1 and 32; results/device/h100/memory_cuda.json, 2026-11-23) by
# learn.memory_calibration: in-sample MAPE 18.2%, 30.7% with each model left out of the fit.
SESSION_BYTES = {"cpu": 5_000_000, "cuda": 127_700_000}
# ORT's arena holds more than the live activations (its allocation plan fragments, the arena rounds
# and grows in powers of two): the share added to the activations' peak. 0.5 on the CPU EP fitted on
# resnet18, mobilenet_v2 and squeezenet1_1 at batch 1 and 4 (dev VM, 2026-11-23: in-sample MAPE 8.7%);
# on efficientnet_b0, mnasnet0_5 and resnet50, never fitted on, it took the MAPE from 23.4% to 16.6%
# (results/memory). On the CUDA EP the same H100 fit found no share beyond the workspace term (which
# already adds the largest kernel's activations): fitted -0.03, kept at 0.
ARENA_OVERHEAD = {"cpu": 0.5, "cuda": 0.0}


@dataclass(frozen=True)
class PeakMemory:
    """Predicted bytes held at the peak, by part (weights, live activations, workspace, the
    session's own, the arena's overhead on the activations), and where in execution order the
    activations peak."""

    weights_bytes: int
    activation_peak_bytes: int
    workspace_bytes: int
    session_bytes: int
    arena_bytes: int
    peak_at_order: int | None
    peak_node: str | None

    @property
    def total_bytes(self) -> int:
        parts = (self.weights_bytes, self.activation_peak_bytes, self.workspace_bytes, self.session_bytes)
        return sum(parts) + self.arena_bytes

    @property
    def total_mb(self) -> float:
        return self.total_bytes / MB

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes, "total_mb": self.total_mb}


def _workspace(kernels: Sequence[Kernel], ep: str) -> int:
    if ep != "cuda" or not kernels:
        return 0
    largest = max(
        sum(tensor_bytes(t) for t in k.activations) + sum(tensor_bytes(t) for t in k.outputs) for k in kernels
    )
    return CUBLAS_WORKSPACE_BYTES + largest


def predict_peak_memory(kernels: Sequence[Kernel], ep: str) -> PeakMemory:
    """Peak memory of running ``kernels`` (one model's, any order: they are sorted by ``order``).

    Args:
        kernels: the model's kernels (from analysis or static detection).
        ep: ``cpu`` or ``cuda`` (the CUDA EP adds a workspace).

    Returns:
        The prediction by part.
    """
    ordered = sorted(kernels, key=lambda k: k.order)
    weights: dict[str, int] = {}
    produced: dict[str, int] = {}
    last_use: dict[str, int] = {}
    size: dict[str, int] = {}
    for step, kernel in enumerate(ordered):
        for tensor in kernel.inputs:
            if tensor.name in kernel.weight_names:
                weights[tensor.name] = tensor_bytes(tensor)
                continue
            size[tensor.name] = tensor_bytes(tensor)
            last_use[tensor.name] = step
        for tensor in kernel.outputs:
            size[tensor.name] = tensor_bytes(tensor)
            produced.setdefault(tensor.name, step)
    end = len(ordered) - 1
    # (start, stop) per activation: model inputs from the start to the end (the caller holds them),
    # graph outputs to the end, everything else from its producer to its last reader.
    intervals = [
        (
            produced.get(name, 0),
            end if name not in produced or name not in last_use else max(last_use[name], produced[name]),
        )
        for name in size
    ]
    delta = [0] * (len(ordered) + 1)
    for (start, stop), name in zip(intervals, size):
        delta[start] += size[name]
        delta[stop + 1] -= size[name]
    live, peak, peak_step = 0, 0, None
    for step in range(len(ordered)):
        live += delta[step]
        if live > peak:
            peak, peak_step = live, step
    return PeakMemory(
        weights_bytes=sum(weights.values()),
        activation_peak_bytes=peak,
        workspace_bytes=_workspace(ordered, ep),
        session_bytes=SESSION_BYTES.get(ep, 0),
        arena_bytes=int(ARENA_OVERHEAD.get(ep, 0.0) * peak),
        peak_at_order=ordered[peak_step].order if peak_step is not None else None,
        peak_node=ordered[peak_step].node_name if peak_step is not None else None,
    )
