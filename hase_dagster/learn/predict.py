"""Whole-model latency from kernel predictions: per-kernel regressor outputs under a given load,
combined over the model's DAG and calibrated to measured whole-model latencies.

Composition: a model's mean (and p90) latency is a bounded linear combination of named physical
terms (:data:`MEAN_TERMS`): its kernels' predicted idle and loaded sums, a time-slicing wait paid on
arrival and one at each slice boundary the run crosses, a per-kernel and a per-run host cost, the
launch-bound shortfall of kernels shorter than the host's dispatch, and the GPU idle time of a
pipelined host dispatch (:func:`pipelined_end_ms`); view ops (aliases in a model) cost nothing. The
coefficients are fitted on measured whole models. Under GPU time-slicing waiting is paid per model
run, not per kernel, so a raw sum of loaded kernel times is far off.

Host-clocked kernels (the CPU EP) run one after another on the calling thread: each standalone time
includes the kernel runner's own cost per call (``host_floor_ms``), which a model pays once per run, so
it is taken off every kernel; the GPU's launch, dispatch and time-slicing terms do not apply, and the
per-kernel and per-run constants, which models of milliseconds cannot identify (their fitted values
flipped sign between runs), are held at 0 and at most one floor (:data:`HOST_CLOCK_FIXED`, :func:`host_clock_terms`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.fusion import VIEW_OP_TYPES
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.model_dag import critical_path_ms
from hase_dagster.analysis.peak_memory import predict_peak_memory
from hase_dagster.learn.graph_factors import GraphFactors, kernel_category
from hase_dagster.learn.proxies import proxy_records
from hase_dagster.learn.regressor import LatencyRegressor
from hase_dagster.learn.timeslice import TimeSlicing


@dataclass
class KernelPrediction:
    order: int
    node_name: str
    family: str
    instance_id: str
    median_ms: float
    mean_ms: float
    p90_ms: float
    fallback: bool  # its family has no training row
    # the trained families that answered for a fallback kernel (learn.proxies), "+"-joined; "" for none
    proxy_family: str = ""
    # the device kernels it stands for: 1, or its proxies' count (ORT's Einsum launches its transposes, GEMM and
    # copy one by one, each a launch for the composition's per-kernel term)
    launches: int = 1
    # predicted at its FLOPs over the device's measured peak (learn.compute_floor): the trees answered faster
    at_compute_floor: bool = False


@dataclass
class Sums:
    """What composition needs from one model's kernel predictions under one load."""

    median_ms: float
    mean_ms: float
    p90_ms: float
    kernels: int
    load_util: float  # the device's load field, in %
    idle_mean_ms: float = 0.0  # the same kernels predicted with no background load
    # The part of idle_mean_ms / mean_ms that view ops (VIEW_FAMILIES) make up.
    view_idle_ms: float = 0.0
    view_mean_ms: float = 0.0
    # Each non-view kernel's idle time, for the launch-bound term.
    idle_kernel_ms: tuple[float, ...] = ()
    # How many of the kernels are views (VIEW_FAMILIES): they launch nothing on the device.
    view_kernels: int = 0
    # How a co-tenant time-slices the device (GPUs); None where the EP does not time-slice (the CPU).
    time_slicing: TimeSlicing | None = None
    # Kernels that stage their arguments in host memory and wait for a co-tenant on their own: long Concats and
    # staged Splits over a long axis (:func:`host_staged_kernels`).
    host_staged: float = 0.0
    # The idle time of kernels whose loaded times already hold the co-tenant's share (the families timed on the
    # host clock on a device-clocked EP: Composition.wait_included_families); no time-slicing wait is charged on it.
    wait_included_idle_ms: float = 0.0

    def timeslice_wait_ms(self, gpu_share: float = 1.0) -> tuple[float, float]:
        """The mean and p90 wait a run pays to a time-slicing co-tenant, its GPU time taken as
        ``gpu_share`` of the idle non-view kernels' sum (:data:`WAIT_GPU_SHARE_CANDIDATES` says why)."""
        if self.time_slicing is None:
            return 0.0, 0.0
        return self.time_slicing.expected_wait(self._wait_gpu_ms(gpu_share), self.load_util)

    def timeslice_arrival_ms(self, gpu_share: float = 1.0) -> float:
        """The part of :meth:`timeslice_wait_ms`'s mean a run pays on arrival: the mean wait of a run too
        short to reach a slice boundary (:data:`ARRIVAL_RUN_MS`, or the run itself when shorter)."""
        gpu_ms = self._wait_gpu_ms(gpu_share)
        if self.time_slicing is None or gpu_ms <= 0:
            return 0.0
        return self.time_slicing.expected_wait(min(gpu_ms, ARRIVAL_RUN_MS), self.load_util)[0]

    def _wait_gpu_ms(self, gpu_share: float) -> float:
        """The GPU time the time-slicing wait is charged on: ``gpu_share`` of the idle non-view kernels' sum, less
        the kernels whose loaded times already hold the wait (``wait_included_idle_ms``)."""
        return gpu_share * max(0.0, self.idle_mean_ms - self.view_idle_ms - self.wait_included_idle_ms)

    def launch_shortfall_ms(self, dispatch_ms: float) -> float:
        """GPU time left idle while the host dispatches kernels shorter than ``dispatch_ms``."""
        return float(sum(max(0.0, dispatch_ms - g) for g in self.idle_kernel_ms))

    def dispatch_stall_ms(self, dispatch_ms: float) -> float:
        """GPU time left idle when the host issues a kernel every ``dispatch_ms`` and the GPU runs them
        in order (see :func:`pipelined_end_ms`): unlike :meth:`launch_shortfall_ms`, a queue built up
        behind long kernels hides the dispatch of the short ones after them."""
        return pipelined_end_ms(self.idle_kernel_ms, dispatch_ms) - float(sum(self.idle_kernel_ms))

    def values(self, dispatch_ms: float, wait_gpu_share: float = 1.0, count_views: bool = True) -> dict[str, float]:
        """Each mean term's value for this model (see :data:`MEAN_TERMS`), the host dispatching one
        kernel per ``dispatch_ms`` and the time-slicing wait charged on ``wait_gpu_share`` of the idle sum;
        ``per_kernel`` counts the views too with ``count_views`` (compositions fitted before
        :data:`PER_KERNEL_COUNTS_VIEWS`)."""
        share = self.load_util / 100.0
        idle = self.idle_mean_ms - self.view_idle_ms
        wait_mean, wait_p90 = self.timeslice_wait_ms(wait_gpu_share)
        arrival = self.timeslice_arrival_ms(wait_gpu_share)
        shortfall = self.launch_shortfall_ms(dispatch_ms)
        return {
            "idle_kernels": idle,
            "load_share_x_idle": share * idle,
            "loaded_kernels": self.mean_ms - self.view_mean_ms,
            "per_kernel": float(self.kernels if count_views else self.kernels - self.view_kernels),
            "per_run": 1.0,
            # Retired from MEAN_TERMS (see RETIRED_TERMS); a composition fitted before still reads it.
            "view_ops": self.view_idle_ms,
            "load_share_per_run": share,
            "launch_shortfall": shortfall,
            "dispatch_stall": self.dispatch_stall_ms(dispatch_ms),
            # Retired from MEAN_TERMS for the two below; a composition fitted before still reads it.
            "timeslice_wait": wait_mean,
            "timeslice_arrival": arrival,
            "timeslice_crossings": max(0.0, wait_mean - arrival),
            # Time slices fill a device's idle gaps; the CPU EP's sharing is the other load terms'.
            "load_share_x_shortfall": share * shortfall if self.time_slicing is not None else 0.0,
            "p90_kernels": self.p90_ms,
            "timeslice_wait_p90": wait_p90,
            "host_staged_wait": self.host_staged * self.staged_wait_ms(),
        }

    def staged_wait_ms(self) -> float:
        """The mean wait of one host-staged kernel under the co-tenant: a burst when the co-tenant keeps the GPU
        saturated, falling as the cube of its busy share below (:data:`STAGED_WAIT_BUSY_POWER`)."""
        if self.time_slicing is None or self.host_staged == 0:
            return 0.0
        return self.time_slicing.burst_ms * self.time_slicing.busy_share(self.load_util) ** STAGED_WAIT_BUSY_POWER


def pipelined_end_ms(kernel_ms: tuple[float, ...], dispatch_ms: float) -> float:
    """When the last of ``kernel_ms`` ends if the host issues kernel k at (k+1) x ``dispatch_ms`` and
    the GPU runs each when it is issued and the one before has ended.

    The recurrence end = max(end, issue) + g unrolls to max over k of (issue_k + the kernels from k
    on), computed here without a Python loop.

    Args:
        kernel_ms: the kernels' GPU times in launch order, ms.
        dispatch_ms: the host's time to issue one kernel, ms.

    Returns:
        The run's end, ms from its start.
    """
    if not kernel_ms:
        return 0.0
    times = np.asarray(kernel_ms, dtype=float)
    from_k_on = np.cumsum(times[::-1])[::-1]
    issue = dispatch_ms * np.arange(1, len(times) + 1)
    return float(np.max(issue + from_k_on))


# Ops whose output is a view of their input: ORT's CUDA and CPU kernels for them declare an alias.
VIEW_FAMILIES = VIEW_OP_TYPES | {"Identity"}
# ORT's CUDA Concat passes its inputs' pointers and sizes to the kernel by value up to 32 inputs
# (TArray<..., 32>); with more it stages them, and an index per output channel, in pinned host memory and
# copies them over (CudaAsyncBuffer). Under a time-slicing co-tenant a staged Concat with a long output axis
# costs a run part of a burst on its own, a short one nothing: on the H100 at stress 1.0, 16 staged Concats of
# 96 output channels cost nothing, of about 1,100 channels 0.61-0.64 ms each; densenet201's 18 (1,312-1,920
# channels) 0.83-0.90 ms each, its idle time unchanged (results/gpu-general/README.md, "DenseNet-201 under
# load"). Why the length matters is not established; the limit sits inside the measured bracket.
# ORT's CUDA Split stages its outputs' pointers, sizes and an index per element of the split axis in pinned host
# memory (four host-to-device copies) whenever the outputs differ in length along the axis, or there are more
# than 32 of them; equal splits up to 32, and three outputs along the innermost axis (Split3Inner), go by value.
# CUPTI around whole runs on the H100 (2026-11-27, results/gpu-general/load-copies): the four timm networks with such
# Splits (CoaT-Lite, XCiT, CrossViT, ReXNet: 24-64 pinned copies a run, ReXNet's and XCiT's from Slice groups ORT
# fuses into a Split) waited 5-15 bursts a run at stress 1.0 with their GPU busy time unchanged and were 2-4x slower
# than idle at every batch size; the networks without one (BoTNet, GhostNet, GC ViT, TinyViT) waited 1-5 and paid
# 1.1-1.6x. But staging alone does not cost: twin networks whose only difference is an unequal Split (results/
# gpu-general/staged-split) paid nothing for it under load, nor did EfficientViT-M0's 20 unequal q/k/v Splits (set U).
# CUPTI on set V's networks (results/gpu-general/load-copies, section 4) put each wait between a Split's pinned copies
# and its kernel, about one burst each, and sorted the Splits by the length of their split axis, whose per-position
# int64 index array is the one copy that grows: FasterNet-T0 waited at 10 of its 13 Splits a run (the 10 of 160 and
# 320 channels, not the 3 of 40 and 80), InceptionNeXt-T at 15 of 18 (192-768 channels, not the 3 of 96),
# MobileViTv2 at all 9 (129-257), PiT at both (its token axis); EfficientViT-M0's 20 (96) and the twins' (64) at
# none. So a staged Split waits where its axis is longer than STAGED_SPLIT_MIN_AXIS (an index array over 1 KB);
# between 96 and 129 nothing was timed. It counts STAGED_SPLIT_SHARE (one wait) of a long staged Concat. The rule
# before (a piece going straight into a Concat) fitted sets S, T and U after the fact and missed MobileViTv2 and
# PiT (set V, blind); why the length matters (a copy engine for larger copies, or the driver's) is not established.
# How the wait grows with the co-tenant's busy share: twins of 16 staged Splits (160 and 256 channels, timed blind,
# results/gpu-general/staged-split-axis) paid 0.99-1.06 ms a Split at stress 1.0 (about a burst) and 0.07-0.17 ms at
# 0.5, where the busy share is half: a wait only where the co-tenant has work queued when the run lets go of the GPU,
# near certain at saturation and rare below it. The cube of the busy share gives 0.85 and 0.10 of a burst there.
STAGED_WAIT_BUSY_POWER = 3
HOST_STAGED_LIMIT = 32
HOST_STAGED_MIN_AXIS = 512
STAGED_SPLIT_MIN_AXIS = 128
STAGED_SPLIT_SHARE = 1.0


def _axis_lengths(outputs: list[TensorInfo], axis: int) -> list[int] | None:
    """Each output's length along ``axis`` (negative counts from the end), or None where a shape is unknown."""
    lengths = []
    for t in outputs:
        shape = list(t.shape or ())
        if not shape or not -len(shape) <= axis < len(shape) or not isinstance(shape[axis], int):
            return None
        lengths.append(int(shape[axis]))
    return lengths


def _staged_split(lengths: list[int], innermost: bool = False) -> bool:
    """Whether ORT's CUDA Split stages these output lengths in host memory: unequal, or past 32 outputs, except
    three outputs along the innermost axis (Split3Inner, by value)."""
    if innermost and len(lengths) == 3:
        return False
    return len(lengths) > HOST_STAGED_LIMIT or len(set(lengths)) > 1


def _split_waits(lengths: list[int], innermost: bool, min_axis: int) -> bool:
    """Whether a Split of these output lengths is staged (:func:`_staged_split`) over an axis longer than
    ``min_axis``: the Splits (and fused Slice groups) that wait for a co-tenant."""
    return sum(lengths) > min_axis and _staged_split(lengths, innermost)


def _piece(source: TensorInfo, kernel: Kernel) -> tuple[int, int] | None:
    """(axis, length) of the piece a one-axis Slice, or a Gather of one index (the axis dropped), cuts from
    ``source``; None for anything else."""
    piece = kernel.outputs[0].shape
    if kernel.op_type == "Gather":
        axis = int(kernel.attributes.get("axis", 0) or 0) % max(len(source.shape), 1)
        kept = tuple(d for i, d in enumerate(source.shape) if i != axis)
        return (axis, 1) if len(piece) == len(source.shape) - 1 and tuple(piece) == kept else None
    if len(source.shape) != len(piece):
        return None
    differing = [i for i, (a, b) in enumerate(zip(source.shape, piece, strict=True)) if a != b]
    return (differing[0], int(piece[differing[0]])) if len(differing) == 1 else None


def fused_slice_splits(kernels: list[Kernel], min_axis: int = 0) -> int:
    """How many tensors ORT's GatherSliceToSplitFusion turns into one staged Split: tensors that two or more Slices
    (or Gathers of one index) cut along one axis into pieces whose lengths add up to the axis and differ (ReXNet's
    ``x[:, :c]`` and ``x[:, c:]``, XCiT's class token and patches). The H100's traces show each as ``_SplitKernel``
    with four pinned copies, XCiT's six also where the tensor has other consumers besides. Static detection keeps
    those as Slices and Gathers; the count is for the wait only. Only groups whose axis is longer than ``min_axis``
    count (see :func:`host_staged_kernels`)."""
    consumers: dict[str, list[Kernel]] = {}
    for k in kernels:
        if k.op_type in ("Slice", "Gather") and k.inputs and k.outputs:
            consumers.setdefault(k.inputs[0].name, []).append(k)
    count = 0
    for users in consumers.values():
        if len(users) < 2:
            continue
        source = users[0].inputs[0]
        pieces = [_piece(source, k) for k in users]
        axes = {p[0] for p in pieces if p is not None}
        if None in pieces or len(axes) != 1:
            continue
        axis = axes.pop()
        lengths = [p[1] for p in pieces if p is not None]
        if sum(lengths) == source.shape[axis] and _split_waits(lengths, axis == len(source.shape) - 1, min_axis):
            count += 1
    return count


def host_staged_kernels(kernels: list[Kernel]) -> float:
    """How many of ``kernels`` stage their arguments in host memory on the CUDA EP and wait for a co-tenant
    on their own, in long Concats: Concats of more than :data:`HOST_STAGED_LIMIT` inputs whose output is longer
    than :data:`HOST_STAGED_MIN_AXIS` along the joined axis (an unknown length counts as short) count 1; Splits
    ORT stages (:func:`_staged_split`) and the Slice groups ORT fuses into such a Split (:func:`fused_slice_splits`)
    count :data:`STAGED_SPLIT_SHARE` each where their axis is longer than :data:`STAGED_SPLIT_MIN_AXIS` (the comment
    above them says why)."""
    concats = 0
    splits = fused_slice_splits(kernels, STAGED_SPLIT_MIN_AXIS)
    for k in kernels:
        axis = int(k.attributes.get("axis", 0) or 0)
        if k.op_type == "Split" and k.outputs:
            lengths = _axis_lengths(k.outputs, axis)
            rank = len(k.outputs[0].shape or ())
            splits += lengths is not None and _split_waits(lengths, axis in (-1, rank - 1), STAGED_SPLIT_MIN_AXIS)
            continue
        if k.op_type != "Concat" or len(k.inputs) <= HOST_STAGED_LIMIT or not k.outputs:
            continue
        length = _axis_lengths(k.outputs[:1], axis)
        if length is not None and length[0] > HOST_STAGED_MIN_AXIS:
            concats += 1
    return concats + STAGED_SPLIT_SHARE * splits


@dataclass(frozen=True)
class Term:
    """One term of the composition: its bounds, the coefficient it has without evidence, and why."""

    name: str
    lower: float
    upper: float
    prior: float
    why: str


_INF = float("inf")
# Every term is a physical cost; their coefficients are fitted on measured whole models.
MEAN_TERMS: tuple[Term, ...] = (
    Term("idle_kernels", 0.0, _INF, 1.0, "the kernels' idle times, views apart: the work itself"),
    Term(
        "load_share_x_idle",
        0.0,
        _INF,
        0.0,
        "load share x idle sum: under GPU time-slicing a run yields slices in proportion to its length",
    ),
    Term("loaded_kernels", 0.0, _INF, 0.0, "the kernels' times under the load: CPU time-sharing slows each kernel"),
    Term(
        "per_kernel",
        -_INF,
        _INF,
        0.0,
        "count of kernels that launch on the device (views apart, PER_KERNEL_COUNTS_VIEWS): a host-clocked "
        "kernel alone pays a launch and sync a model pays once (negative); a device-clocked one lacks the GPU's "
        "gap between launches (positive)",
    ),
    Term("per_run", 0.0, _INF, 0.0, "1 ms: a whole run's fixed host work (binding, dispatch, sync)"),
    Term(
        "load_share_per_run",
        0.0,
        _INF,
        0.0,
        "load share x 1 ms: a run that arrives while the co-tenant holds the GPU waits out its slice, "
        "whatever the run's length",
    ),
    Term(
        "launch_shortfall",
        0.0,
        _INF,
        0.0,
        "sum over kernels of max(0, dispatch - kernel time): the GPU idles while the host dispatches "
        "kernels shorter than it (small models, batch 1)",
    ),
    Term(
        "dispatch_stall",
        0.0,
        _INF,
        0.0,
        "GPU idle time while a host issuing one kernel per dispatch time runs ahead of or behind an "
        "in-order GPU (pipelined_end_ms - the kernels' sum): host-bound small models, batch 1",
    ),
    Term(
        "timeslice_arrival",
        0.0,
        _INF,
        1.0,
        "the mean wait for a time-slicing co-tenant (learn.timeslice) that a run pays on arrival: the "
        "co-tenant's burst, in the busy share of its period",
    ),
    Term(
        "timeslice_crossings",
        0.0,
        _INF,
        1.0,
        "the rest of the time-slicing wait: a burst at every slice boundary the run's GPU time crosses, "
        "in the busy share of the period. Fitted apart from the arrival: a long GPU-bound run pays "
        "nearly all of it, a short host-bound one hides part of its arrival wait in its own gaps",
    ),
    Term(
        "load_share_x_shortfall",
        -_INF,
        0.0,
        0.0,
        "load share x launch shortfall on a time-slicing device (0 on the CPU EP), never positive: the "
        "co-tenant's slices fill GPU time a launch-bound run leaves idle anyway, so part of its wait hides "
        "in its own dispatch gaps",
    ),
    Term(
        "host_staged_wait",
        0.0,
        _INF,
        0.8,
        "host-staged kernels x burst x the co-tenant's busy share: a long Concat whose arguments are staged "
        "in host memory waits for the co-tenant on its own (HOST_STAGED_LIMIT); no training network has one, "
        "so the fit keeps the prior, 0.8: 0.61-0.90 ms a kernel measured at stress 1.0 over a 0.95 ms burst",
    ),
)
# Terms a composition fitted before may name and this one no longer fits. ``view_ops`` (the standalone
# copy time of view ops, bounded to [0, 1]): ORT aliases a view op's output to its input, so in a model it
# runs no kernel; the coefficient was identified only by the one architecture rich in views (the text
# encoder: 0.19 with it, 0.56-1.0 without it, a 23-37% over-prediction of that encoder held out), and
# leaving it out improved every held-out setting on the H100 and the CPU (results/gpu-general/README.md).
# ``timeslice_wait`` (the whole time-slicing wait, one coefficient): it is the sum of the two terms that
# replaced it, and one coefficient served neither; fitted on the H100 it came out 0.43 and long models'
# loaded over idle time was 1.44 against 1.53-1.56 measured on every machine and set, while short ones were
# too slow; fitted apart, arrival 0.51 and crossings 0.79 (results/gpu-general/README.md).
RETIRED_TERMS: frozenset[str] = frozenset({"view_ops", "timeslice_wait"})
P90_TERMS: tuple[Term, ...] = (
    *MEAN_TERMS,
    Term("p90_kernels", 0.0, _INF, 0.0, "the kernels' p90 sum"),
    Term("timeslice_wait_p90", 0.0, _INF, 0.0, "the p90 of the time-slicing wait (learn.timeslice)"),
)
# Host-clocked kernels (Composition.host_floor_ms > 0): the terms held at 0 (GPU-only physics, and a
# per-kernel constant the floor already accounts for), and per_run bounded by one floor at fit time.
# load_share_per_run too: runs back to back share a CPU core with the stressor's worker in the
# scheduler's slices, so a run's loaded time grows with its own length, not by a wait per run; fitted on
# training models of 3-190 ms it came out near 1 ms, and networks of 0.8-2 ms measured 0.3-0.6 ms of
# extra time at full load against 1.5 ms predicted (results/cpu-general/README.md, set C).
HOST_CLOCK_FIXED: frozenset[str] = frozenset(
    {
        "per_kernel",
        "load_share_per_run",
        "launch_shortfall",
        "dispatch_stall",
        "timeslice_arrival",
        "timeslice_crossings",
        "load_share_x_shortfall",
        "host_staged_wait",
    }
)
# Below this gpu_busy_share a prediction warns that the run is host-bound: on one H100 machine, settled
# timings of such runs (batch 1 and 4 of 44 networks) moved by a median 18% between two passes minutes
# apart, 37% of them within +-10% (results/gpu-general/gpu-time/README.md); on another, batch-1 timings took
# two values 1.39-1.53x apart, the host's state switching within seconds with the GPU at its top clock
# (results/gpu-general/README.md, "Stride-2 wide groups, and what moves an idle batch-1 timing"); the slow
# state is the CPU core's own speed: a fixed pure-Python loop on the timing thread ran 1.6-1.7x slower exactly
# then, pinned or not, with no steal (same README, "Set M blind, the two host states read from the guest").
HOST_BOUND_SHARE = 0.5
# Host dispatch times tried for the launch-bound term (ms per kernel); 0 switches it off.
DISPATCH_CANDIDATES_MS = (0.0, 0.002, 0.004, 0.006, 0.008, 0.010, 0.012, 0.016, 0.020, 0.024, 0.032)
# The in-graph GPU time the time-slicing wait is charged on, as a share of the standalone kernels' idle sum,
# tried by the mean's fit with each dispatch time. A standalone kernel's time holds its own launch and a
# graph shares caches and overlaps tails, so CUPTI's kernel time of whole networks is less than the sum
# (views apart): medians 0.61 / 0.71 / 0.85 / 0.95 at batch 1 / 4 / 16 / 64 on the H100, 144 files of two
# checker sets. The wait counts slice boundaries of that GPU time, so the raw sum over-counts them; the H100's
# composition takes 0.8, which every held-out set agrees with (results/gpu-general/wait_gpu_share.md).
WAIT_GPU_SHARE_CANDIDATES = (0.7, 0.8, 0.9, 1.0)
# A run this short crosses no slice boundary (the H100's slices are 1.75 ms): its wait is the arrival wait.
ARRIVAL_RUN_MS = 0.05
# Whether the per_kernel term counts view kernels. CUPTI of whole runs on an H200 (results/gpu-general/gaps) put a
# gap of 1.6-1.9 us between the GPU's consecutive device events at batch 16 and 64, queued in time, in every network
# (ResNet-50, DeiT-S, NesT, Swin V2, TNT): a run's GPU time grows by launches, and a view launches none.
PER_KERNEL_COUNTS_VIEWS = False
# Pull toward each term's prior, in units of squared relative error per (column-scaled) term.
RIDGE = 1e-6
# A composition is fitted on at least this many models; on fewer it is the identity (the sums as they are).
MIN_COMPOSITION_POINTS = 3


def _design(
    points: list[Sums],
    terms: tuple[Term, ...],
    dispatch_ms: float,
    wait_gpu_share: float = 1.0,
    count_views: bool = PER_KERNEL_COUNTS_VIEWS,
) -> np.ndarray:
    rows = [s.values(dispatch_ms, wait_gpu_share, count_views) for s in points]
    return np.array([[row[t.name] for t in terms] for row in rows])


def _relative_fit(design: np.ndarray, measured: np.ndarray, terms: tuple[Term, ...]) -> tuple[np.ndarray, float]:
    """Bounded least squares on relative errors (models span 0.05 to 300 ms, and a plain fit would
    serve the largest and ignore the smallest), with a light pull toward the priors; returns the
    coefficients and the mean squared relative error."""
    from scipy.optimize import lsq_linear  # fitting only: a prediction does not pay scipy's import

    relative = design / measured[:, None]
    scale = np.sqrt(np.mean(relative**2, axis=0))
    scale[scale == 0] = 1.0
    scaled = relative / scale
    width = len(terms)
    prior = np.array([t.prior for t in terms]) * scale
    ridge = np.sqrt(RIDGE * len(measured)) * np.eye(width)
    a = np.vstack([scaled, ridge])
    b = np.concatenate([np.ones(len(measured)), ridge @ prior])
    lower = np.array([t.lower for t in terms]) * scale
    upper = np.array([t.upper for t in terms]) * scale
    coefficients = lsq_linear(a, b, bounds=(lower, upper)).x / scale
    error = float(np.mean((relative @ coefficients - 1.0) ** 2))
    return coefficients, error


def host_clock_terms(terms: tuple[Term, ...], host_floor_ms: float) -> tuple[Term, ...]:
    """``terms`` for host-clocked kernels: without :data:`HOST_CLOCK_FIXED`, per_run within one floor."""
    return tuple(
        replace(t, upper=host_floor_ms) if t.name == "per_run" else t for t in terms if t.name not in HOST_CLOCK_FIXED
    )


@dataclass
class Composition:
    """Bounded least squares from named kernel-sum terms to measured model mean and p90 (ms).

    ``host_floor_ms`` is 0 for device-clocked kernels (GPUs); for host-clocked ones (the CPU EP) it is
    the kernel runner's cost per call, taken off every kernel's time before the terms are summed
    (:func:`kernel_sums`), and the fit uses :func:`host_clock_terms`. ``wait_gpu_share`` is the share of
    the idle sum the time-slicing wait is charged on (:data:`WAIT_GPU_SHARE_CANDIDATES`; 1.0 in a
    composition fitted before it). ``wait_included_families`` are the kernel families whose standalone times
    were taken on the host clock on a device-clocked EP (ORT's CUDA LSTM and GRU, which the device clock cannot
    time): a host-clocked kernel's loaded time already holds what the co-tenant's slices cost it, so the
    time-slicing wait is not charged on them again (:attr:`Sums.wait_included_idle_ms`), and under load they
    count at their idle time (:func:`kernel_sums`). On the H100, RNN kernels ran 1.03-1.19x their idle time at
    stress 1.0 (medians by batch), the recurrent probes' whole networks a median 1.07x, where the trees, whose load
    effect is learned mostly on GPU-bound kernels, gave the kernels 1.30x and the wait's terms charged their
    ms-long runs +40-60% (results/gpu-general/README.md, "Operators and recurrent probes").
    """

    mean_coefficients: dict[str, float] | None = None
    p90_coefficients: dict[str, float] | None = None
    dispatch_ms: float = 0.0
    fitted_on: int = 0
    host_floor_ms: float = 0.0
    wait_gpu_share: float = 1.0
    wait_included_families: tuple[str, ...] = ()
    per_kernel_counts_views: bool = True
    # The host loop reading (hase_dagster.measure.host_speed) typical of the host whose timings the composition was
    # fitted on, and the Python major.minor it was read with; None where none was recorded (hase predictor
    # host-reference adds it). ``hase predict --host-reading`` scales predictions by a reading against it.
    host_loop_ms: float | None = None
    host_loop_python: str | None = None
    # The 10th and 90th percentiles of the same readings (the host's fast and slow states: a GPU host's core switches
    # between two speeds within seconds, learn.host_speed); None where none was recorded. Each prediction gives the
    # range they span (ModelPrediction.host_range_ms).
    host_loop_range_ms: tuple[float, float] | None = None
    # Whether it was fitted on out-of-sample kernel sums (learn.training.fit_cross_fitted_composition): each
    # training architecture's sums from a regressor trained without it. The evaluation's held-out predictors are
    # fitted the same way.
    cross_fitted: bool = False

    @classmethod
    def fit(
        cls,
        points: list[tuple[Sums, float, float]],
        host_floor_ms: float = 0.0,
        wait_included_families: tuple[str, ...] = (),
    ) -> Composition:
        """``points``: (sums, measured mean ms, measured p90 ms). Fewer than :data:`MIN_COMPOSITION_POINTS`: identity.

        The host dispatch time of the launch-bound term and the GPU share of the time-slicing wait are
        chosen among :data:`DISPATCH_CANDIDATES_MS` and :data:`WAIT_GPU_SHARE_CANDIDATES` by the mean's
        fit (device-clocked kernels only).

        Args:
            points: the training models, their sums built with the same ``host_floor_ms``.
            host_floor_ms: the runner's cost per call in host-clocked kernel times; 0 for device clocks.
            wait_included_families: kept for prediction (the points' sums were built with them).

        Returns:
            The fitted composition.
        """
        if len(points) < MIN_COMPOSITION_POINTS:
            return cls(host_floor_ms=host_floor_ms, wait_included_families=wait_included_families)
        sums = [s for s, _, _ in points]
        mean_ms = np.array([m for _, m, _ in points])
        p90_ms = np.array([p for _, _, p in points])
        mean_terms, p90_terms = MEAN_TERMS, P90_TERMS
        dispatches: tuple[float, ...] = DISPATCH_CANDIDATES_MS
        shares: tuple[float, ...] = WAIT_GPU_SHARE_CANDIDATES
        if host_floor_ms > 0:
            mean_terms, p90_terms = (
                host_clock_terms(MEAN_TERMS, host_floor_ms),
                host_clock_terms(P90_TERMS, host_floor_ms),
            )
            dispatches, shares = (0.0,), (1.0,)
        if all(s.time_slicing is None for s in sums):
            shares = (1.0,)  # no wait to charge: the share would be chosen by nothing
        fits = {
            (d, w): _relative_fit(_design(sums, mean_terms, d, w), mean_ms, mean_terms)
            for d in dispatches
            for w in shares
        }
        dispatch, share = min(fits, key=lambda key: fits[key][1])
        p90, _ = _relative_fit(_design(sums, p90_terms, dispatch, share), p90_ms, p90_terms)
        return cls(
            {t.name: float(c) for t, c in zip(mean_terms, fits[dispatch, share][0])},
            {t.name: float(c) for t, c in zip(p90_terms, p90)},
            dispatch,
            len(points),
            host_floor_ms,
            share,
            wait_included_families,
            PER_KERNEL_COUNTS_VIEWS,
        )

    def apply(self, sums: Sums) -> tuple[float, float]:
        if self.mean_coefficients is None or self.p90_coefficients is None:
            return sums.mean_ms, max(sums.p90_ms, sums.mean_ms)
        values = sums.values(self.dispatch_ms, self.wait_gpu_share, self.per_kernel_counts_views)
        # A negative per-kernel term must not drive a prediction below a tenth of the idle sum.
        floor = 0.1 * sums.idle_mean_ms
        mean = max(sum(c * values[name] for name, c in self.mean_coefficients.items()), floor)
        p90 = sum(c * values[name] for name, c in self.p90_coefficients.items())
        return mean, max(p90, mean)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Composition:
        known = {t.name for t in P90_TERMS} | RETIRED_TERMS
        for key in ("mean_coefficients", "p90_coefficients"):
            unknown = set(data.get(key) or {}) - known
            if unknown:
                raise ValueError(f"composition names unknown terms {sorted(unknown)}")
        return cls(
            data.get("mean_coefficients"),
            data.get("p90_coefficients"),
            float(data.get("dispatch_ms", 0.0)),
            int(data.get("fitted_on", 0)),
            float(data.get("host_floor_ms", 0.0)),  # compositions fitted before it: device-clock behaviour
            float(data.get("wait_gpu_share", 1.0)),  # compositions fitted before it: the whole idle sum
            tuple(data.get("wait_included_families", ())),  # compositions fitted before it: none
            bool(data.get("per_kernel_counts_views", True)),  # compositions fitted before it: views counted
            None if data.get("host_loop_ms") is None else float(data["host_loop_ms"]),
            None if data.get("host_loop_python") is None else str(data["host_loop_python"]),
            _loop_range(data.get("host_loop_range_ms")),
            bool(data.get("cross_fitted", False)),  # compositions fitted before it: in-sample sums
        )


def _loop_range(value: Any) -> tuple[float, float] | None:
    """A composition's ``host_loop_range_ms`` from JSON: None, or two positive ms, the fast one first."""
    if value is None:
        return None
    try:
        fast, slow = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"host_loop_range_ms must be two numbers of ms, got {value!r}") from exc
    if not 0 < fast <= slow < float("inf"):
        raise ValueError(f"host_loop_range_ms must be two positive ms, the fast state first, got {value!r}")
    return fast, slow


@dataclass
class ModelPrediction:
    model: str
    ep: str
    batch_size: int | None
    load: dict[str, float]
    load_source: str
    predicted_ms: float
    p90_ms: float
    critical_path_ms: float
    sequential_sum_ms: float
    coverage: dict[str, Any]
    kernels: list[KernelPrediction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Where the kernel list came from: "analysis" (optimized, profiled and fingerprinted on the EP)
    # or "static" (detected from the ONNX file with a bundle's fusion rules, nothing executed).
    kernel_source: str = "analysis"
    # The bundle that predicted (``learn.bundles.Bundle.summary``); None for the data directory's predictor.
    predictor: dict[str, Any] | None = None
    # Static detection's coverage (ops no fusion rule covers, kept as unfused kernels); None after analysis.
    detection_coverage: dict[str, Any] | None = None
    # Peak memory the model holds on the EP, from tensor lifetimes over the kernels' order, weights and a
    # workspace (``analysis.peak_memory``), in MB, with its parts.
    predicted_peak_memory_mb: float | None = None
    peak_memory: dict[str, Any] | None = None
    # The precision the model file was made in (``analysis.precision.detect_precision``): its kernels
    # are analysed and predicted as they are, in it. None where no file was read (zoo variants).
    precision: str | None = None
    # Device-clocked EPs (GPUs): the share of the predicted idle run its kernels keep the device busy (their
    # idle sum, views apart, over the idle prediction, at most 1); the rest is the host's dispatch and the
    # per-run cost. None on host-clocked EPs. See HOST_BOUND_SHARE.
    gpu_busy_share: float | None = None
    # Device-clocked EPs: the composition's idle prediction of the same model (``predicted_ms`` itself at idle).
    # Under load the run's wait for the co-tenant is GPU-side time, which the host's speed does not move
    # (learn.host_speed). None on host-clocked EPs.
    idle_predicted_ms: float | None = None
    # The prediction on its host's fast and slow states ([low, high] ms, learn.host_speed.host_range): how far a
    # host-bound run's measured time moves with the host core's speed (a GPU run at batch 1-16, a CPU run at idle).
    # None where the composition records no range. ``--host-reading`` moves predicted_ms and leaves this range.
    host_range_ms: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def predict_kernels(
    regressor: LatencyRegressor, kernels: list[Kernel], load: dict[str, float]
) -> list[KernelPrediction]:
    """Every kernel under ``load``; kernels of a family the regressor never saw are marked fallback
    (their estimate comes from shapes, FLOPs and bytes alone)."""
    return predict_kernels_under(regressor, kernels, [load])[0]


def predict_kernels_under(
    regressor: LatencyRegressor, kernels: list[Kernel], loads: list[dict[str, float]]
) -> list[list[KernelPrediction]]:
    """Every kernel under each of ``loads``, in one pass of the regressor (see :func:`predict_kernels`)."""
    if not kernels:
        return [[] for _ in loads]
    records = [k.to_dict() for k in kernels]
    factors = getattr(regressor, "graph_factors", None)  # a stand-in regressor may not carry the field
    categories = [kernel_category(k) for k in kernels] if factors is not None else []
    # whether each kernel's (feature) family was trained on: once per kernel, not per load
    fallback = [not regressor.knows(k.family, record) for k, record in zip(kernels, records)]
    # a kernel of an unknown family is predicted as the trained kernels that do its work, where some do
    proxies = [
        proxy_records(record, lambda r: regressor.knows(str(r["family"]), r)) if unknown else None
        for record, unknown in zip(records, fallback)
    ]
    standing_in = [p or [record] for p, record in zip(proxies, records)]
    owner = np.repeat(np.arange(len(records)), [len(p) for p in standing_in])
    flat = [r for p in standing_in for r in p]
    proxy_family = ["+".join(str(r["family"]) for r in p) if p else "" for p in proxies]
    peaks = getattr(regressor, "compute_peaks", None)  # a stand-in regressor may not carry the field
    # the floor once per kernel record, for the regressor to apply and for the flag
    flat_floor = {"floor_ms": peaks.floor_ms(flat)} if peaks is not None else {}
    floor = np.bincount(owner, flat_floor["floor_ms"], len(records)) if flat_floor else np.zeros(len(records))
    out = []
    for flat_predicted in regressor.predict_kernels(flat, loads, **flat_floor):
        predicted = {t: np.bincount(owner, v, len(records)) for t, v in flat_predicted.items()}
        at_floor = (floor > 0) & (predicted["mean_ms"] <= floor * (1 + 1e-9))
        if factors is not None:
            predicted = in_graph(factors, categories, predicted)
        out.append(
            [
                KernelPrediction(
                    order=k.order,
                    node_name=k.node_name,
                    family=k.family,
                    instance_id=records[i]["instance_id"],  # hashed once per kernel, not per load
                    median_ms=float(predicted["median_ms"][i]),
                    mean_ms=float(predicted["mean_ms"][i]),
                    p90_ms=float(predicted["p90_ms"][i]),
                    fallback=fallback[i],
                    proxy_family=proxy_family[i],
                    launches=len(standing_in[i]),
                    at_compute_floor=bool(at_floor[i]),
                )
                for i, k in enumerate(kernels)
            ]
        )
    return out


def in_graph(factors: GraphFactors, categories: list[str], predicted: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Standalone predictions (per target, per kernel) as in-graph ones: each kernel's time scaled by
    the factor of its category (``categories``, :func:`kernel_category` per kernel; :class:`GraphFactors`)."""
    return {
        target: np.array([factors.scale(c, float(ms)) for c, ms in zip(categories, values, strict=True)])
        for target, values in predicted.items()
    }


def idle_load(regressor: LatencyRegressor, load: dict[str, float]) -> dict[str, float]:
    """``load`` with the device's load field at zero."""
    return {**load, regressor.load_fields[0]: 0.0}


def without_floor(predictions: list[KernelPrediction], floor_ms: float) -> list[KernelPrediction]:
    """``predictions`` with ``floor_ms`` (the runner's cost per call) taken off once per launch, none below 0."""
    if floor_ms <= 0:
        return predictions
    return [
        replace(
            p,
            median_ms=max(p.median_ms - floor_ms * p.launches, 0.0),
            mean_ms=max(p.mean_ms - floor_ms * p.launches, 0.0),
            p90_ms=max(p.p90_ms - floor_ms * p.launches, 0.0),
        )
        for p in predictions
    ]


def kernel_sums(
    predictions: list[KernelPrediction],
    load_util: float,
    idle: list[KernelPrediction],
    time_slicing: TimeSlicing | None = None,
    host_floor_ms: float = 0.0,
    host_staged: float = 0.0,
    wait_included_families: tuple[str, ...] = (),
) -> Sums:
    """The sums composition needs from kernel predictions under a load and at idle.

    Args:
        predictions: every kernel under the load.
        load_util: the device's load field under that load, in %.
        idle: the same kernels at idle.
        time_slicing: the co-tenant's time slicing on a GPU (:func:`time_slicing_of`); None on the CPU.
        host_floor_ms: the runner's cost per call, taken off each host-clocked kernel time (0: none).
        host_staged: the model's host-staged kernels (:func:`host_staged_kernels`).
        wait_included_families: host-bound families (:attr:`Composition.wait_included_families`): no
            time-slicing wait charged on them, and their idle times stand for their loaded ones.

    Returns:
        The :class:`Sums` of one model under one load.
    """
    predictions, idle = without_floor(predictions, host_floor_ms), without_floor(idle, host_floor_ms)
    # A host-bound kernel under load: its idle time (see Composition: the trees' load effect is not its own)
    predictions = [i if p.family in wait_included_families else p for p, i in zip(predictions, idle)]
    return Sums(
        median_ms=sum(p.median_ms for p in predictions),
        mean_ms=sum(p.mean_ms for p in predictions),
        p90_ms=sum(p.p90_ms for p in predictions),
        kernels=sum(p.launches for p in predictions),
        load_util=load_util,
        idle_mean_ms=sum(p.mean_ms for p in idle),
        view_idle_ms=sum(p.mean_ms for p in idle if p.family in VIEW_FAMILIES),
        view_mean_ms=sum(p.mean_ms for p in predictions if p.family in VIEW_FAMILIES),
        # one per node, whatever its launches: the host dispatches a node (an Einsum's Compute launches its parts
        # back to back), and the GPU-side gap of each launch is the per-kernel term's
        idle_kernel_ms=tuple(p.mean_ms for p in idle if p.family not in VIEW_FAMILIES),
        view_kernels=sum(p.family in VIEW_FAMILIES for p in predictions),
        time_slicing=time_slicing,
        host_staged=host_staged,
        wait_included_idle_ms=sum(p.mean_ms for p in idle if p.family in wait_included_families),
    )


def time_slicing_of(ep: str) -> TimeSlicing | None:
    """The time slicing measured on the GPU (``results/gpu-general/wait_study.json``) for the CUDA EP;
    None for the CPU EP, whose sharing the fitted load terms describe."""
    return TimeSlicing() if ep == "cuda" else None


def model_sums(
    regressor: LatencyRegressor,
    kernels: list[Kernel],
    load: dict[str, float],
    host_floor_ms: float = 0.0,
    wait_included_families: tuple[str, ...] = (),
) -> tuple[Sums, list[KernelPrediction]]:
    """Kernel predictions under ``load`` and the sums composition needs (with the idle sum), each
    kernel less ``host_floor_ms`` (see :func:`kernel_sums`)."""
    predictions, idle = predict_kernels_under(regressor, kernels, [load, idle_load(regressor, load)])
    util = float(load[regressor.load_fields[0]])
    sums = kernel_sums(
        predictions,
        util,
        idle,
        time_slicing_of(regressor.ep),
        host_floor_ms,
        host_staged_kernels(kernels),
        wait_included_families,
    )
    return sums, predictions


def predict_model(
    model: str,
    kernels: list[Kernel],
    regressor: LatencyRegressor,
    composition: Composition,
    load: dict[str, float],
    load_source: str,
    batch_size: int | None = None,
) -> ModelPrediction:
    """Predict one model's latency under ``load`` from its kernels."""
    return predict_model_under(model, kernels, regressor, composition, [(load, load_source)], batch_size)[0]


def predict_model_under(
    model: str,
    kernels: list[Kernel],
    regressor: LatencyRegressor,
    composition: Composition,
    loads: list[tuple[dict[str, float], str]],
    batch_size: int | None = None,
) -> list[ModelPrediction]:
    """Predict one model's latency under each ``(load, load source)``, with one regressor pass over
    every load and its idle twin and one DAG: what :func:`predict_model` returns for each, faster."""
    for load, _ in loads:
        missing = [f for f in regressor.load_fields if f not in load]
        if missing:
            raise ValueError(f"load lacks {missing}, which the regressor needs")
    asked = [load for load, _ in loads] + [idle_load(regressor, load) for load, _ in loads]
    predicted = predict_kernels_under(regressor, kernels, asked)
    memory = predict_peak_memory(kernels, regressor.ep)
    slicing = time_slicing_of(regressor.ep)
    busy, idle_mean = idle_run(composition, predicted[len(loads)], slicing) if loads else (None, None)
    # Counted on every EP: without time slicing (the CPU) a staged kernel waits nothing (Sums.staged_wait_ms).
    staged = host_staged_kernels(kernels)
    reference, loop_range = composition.host_loop_ms, composition.host_loop_range_ms
    if reference is not None and loop_range is not None:
        # imported here: learn.host_speed builds on this module's ModelPrediction
        from hase_dagster.learn.host_speed import host_range
    out = []
    for i, (load, load_source) in enumerate(loads):
        predictions, idle = predicted[i], predicted[len(loads) + i]
        sums = kernel_sums(
            predictions,
            float(load[regressor.load_fields[0]]),
            idle,
            slicing,
            composition.host_floor_ms,
            staged,
            composition.wait_included_families,
        )
        out.append(
            _model_prediction(model, regressor, composition, load, load_source, batch_size, sums, predictions, kernels)
        )
        out[-1].gpu_busy_share, out[-1].idle_predicted_ms = busy, idle_mean
        if reference is not None and loop_range is not None:
            out[-1].host_range_ms = host_range(out[-1], reference, loop_range)
        if busy is not None and busy < HOST_BOUND_SHARE:
            out[-1].warnings.append(
                f"host-bound: its kernels keep the GPU busy {busy:.0%} of an idle run, the rest is host dispatch; "
                "such runs' measured times move with the host CPU core's speed (on H100 hosts, between two values "
                "about 1.5x apart within seconds) and between machines; with a bundle that has a host reference, "
                "--host-reading predicts it for the core's speed now"
            )
        out[-1].predicted_peak_memory_mb, out[-1].peak_memory = memory.total_mb, memory.to_dict()
    return out


def gpu_busy_share(
    composition: Composition, idle: list[KernelPrediction], time_slicing: TimeSlicing | None
) -> float | None:
    """The share of a predicted idle run that the model's kernels keep a device busy: their idle sum
    (views apart) over the composition's idle prediction, at most 1.

    Args:
        composition: the fitted composition.
        idle: every kernel predicted at idle.
        time_slicing: the device's time slicing; None on host-clocked EPs, which get no share.

    Returns:
        The share in [0, 1], or None for host-clocked kernels (the CPU EP) and empty models.
    """
    return idle_run(composition, idle, time_slicing)[0]


def idle_run(
    composition: Composition, idle: list[KernelPrediction], time_slicing: TimeSlicing | None
) -> tuple[float | None, float | None]:
    """:func:`gpu_busy_share` and the composition's idle prediction it is a share of (ms); (None, None) where
    the share is None."""
    if time_slicing is None or composition.host_floor_ms > 0 or not idle:
        return None, None
    sums = kernel_sums(idle, 0.0, idle, time_slicing, wait_included_families=composition.wait_included_families)
    mean, _ = composition.apply(sums)
    busy = sums.idle_mean_ms - sums.view_idle_ms
    return (float(min(1.0, busy / mean)), float(mean)) if mean > 0 else (None, None)


def _model_prediction(
    model: str,
    regressor: LatencyRegressor,
    composition: Composition,
    load: dict[str, float],
    load_source: str,
    batch_size: int | None,
    sums: Sums,
    predictions: list[KernelPrediction],
    kernels: list[Kernel],
) -> ModelPrediction:
    warnings: list[str] = []
    mean, p90 = composition.apply(sums)
    # The kernels as listed (standalone predictions, the runner's floor included on host clocks).
    listed_sum = sum(p.mean_ms for p in predictions)
    scale = mean / listed_sum if listed_sum > 0 else 1.0
    by_node = {p.node_name: p.mean_ms for p in predictions}
    path_ms = critical_path_ms(kernels, by_node)
    fallback = [p for p in predictions if p.fallback]
    fallback_families = sorted({p.family for p in fallback})
    fallback_share = sum(p.mean_ms for p in fallback) / listed_sum if listed_sum > 0 else 0.0
    proxied = [p for p in fallback if p.proxy_family]
    if fallback:
        # A fallback is the trees' answer for an unknown family's shape and bytes; ORT's own kernels for
        # such families can be far slower (swin_v2_t's Pads on the H100: 22x, results/gpu-general/README.md).
        # A proxied one is predicted as the trained kernels that do its work (learn.proxies).
        answered = sorted({f"{p.family} as {p.proxy_family}" for p in proxied})
        warnings.append(
            f"{len(fallback)} of {len(predictions)} kernels belong to families without a trained regressor "
            f"({fallback_families}), {fallback_share:.0%} of the kernel sum; "
            + (f"{len(proxied)} predicted through proxies ({answered}), " if proxied else "")
            + f"{len(fallback) - len(proxied)} are fallback estimates"
        )
    if batch_size is not None and regressor.batch_sizes and batch_size not in regressor.batch_sizes:
        warnings.append(
            f"batch size {batch_size} was never benchmarked on {regressor.ep} (benchmarked: {regressor.batch_sizes}); "
            "kernel times are extrapolated"
        )
    if composition.mean_coefficients is None:
        warnings.append("no whole-model measurements to calibrate against: predicted_ms is the plain kernel sum")
    return ModelPrediction(
        model=model,
        ep=regressor.ep,
        batch_size=batch_size,
        load=load,
        load_source=load_source,
        predicted_ms=mean,
        p90_ms=p90,
        critical_path_ms=path_ms * scale,
        sequential_sum_ms=listed_sum,
        coverage={
            "kernels": len(predictions),
            "covered": len(predictions) - len(fallback),
            "fallback": len(fallback),
            "fallback_families": fallback_families,
            "fallback_share": round(fallback_share, 4),
            "proxied": len(proxied),
            "at_compute_floor": sum(p.at_compute_floor for p in predictions),
        },
        kernels=predictions,
        warnings=warnings,
    )
