"""ORT's NCHWc layout on a statically detected CPU kernel list: the ReorderInput and ReorderOutput kernels ORT 1.31's
NCHWc transformer inserts, and the ops that run on its padded NCHWc tensors.

The rules were read off ORT's optimized graphs (results/cpu-general/nchwc-rules, ``nchwc_rules_study.py``):

- a convertible convolution (float, 4-D, constant weights, group 1 or depthwise) writes an NCHWc tensor, its channels
  padded up to the block (:func:`nchwc_padded`); a chain of such convolutions passes NCHWc tensors with no
  reorder between them;
- it reads an NCHWc input (a ReorderInput from an NCHW producer, its channels padded up to the block) when it is
  depthwise or group 1 with at least ``block`` input channels; group 1 with fewer reads the NCHW tensor (a
  ReorderOutput first where the producer wrote NCHWc); a fused Add's second input (``Conv_Add``) is NCHWc too;
- Relu, Sigmoid, Tanh, HardSigmoid, Gelu and QuickGelu (``Sigmoid_Mul``) of an NCHWc tensor, Add/Mul/Sum of NCHWc
  tensors of one shape and BatchNormalization of an NCHWc tensor run on the padded tensor;
- MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool of channels a multiple of the block run as nchwc ops
  (a ReorderInput first from an NCHW producer); of other channel counts, NCHW;
- Concat along channels of NCHWc tensors whose channels are each a multiple of the block stays NCHWc;
- Resize (linear, integer scales) of an NCHWc tensor runs as ``nchwc.Upsample`` (family Resize); a Transpose to NHWC
  of one becomes a channels-last ``ReorderOutput`` (family Transpose);
- every other consumer reads NCHW: one ReorderOutput back to the original channel count per NCHWc tensor, before its
  first such consumer, and one for an NCHWc tensor nothing reads (a graph output).
"""

from __future__ import annotations

import dataclasses
import heapq
import re
from typing import Any

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.fusion_rules import round_up
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.static_detect import _make_kernel, rebuilt_kernel

NCHWC_DOMAIN = "com.microsoft.nchwc"
_CONVS = ("Conv", "FusedConv")
_POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
_UNARY = ("Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu", "QuickGelu")
_BINARY = ("Add", "Mul", "Sum")
_REORDERS = ("ReorderInput", "ReorderOutput")
_INSERTED = "_inserted_"
_SUFFIX = re.compile(r"#\d+$")


def _blocked_name(name: str) -> str:
    """The name of ``name``'s NCHWc copy."""
    return f"{name}#nchwc"


def _with_channels(tensor: TensorInfo, channels: int, name: str | None = None) -> TensorInfo:
    """``tensor`` with dimension 1 set to ``channels`` (and renamed to ``name`` where given)."""
    shape = (tensor.shape[0], channels, *tensor.shape[2:])
    return dataclasses.replace(tensor, shape=shape, name=name if name is not None else tensor.name)


def _reorder(template: Kernel, op_type: str, source: TensorInfo, target: TensorInfo, channels: int) -> Kernel:
    """A ReorderInput (NCHW ``source`` to NCHWc ``target``) or ReorderOutput (back, to ``channels`` channels)."""
    attributes: dict[str, Any] = {"channels_last": 0}
    if op_type == "ReorderOutput":
        attributes["channels"] = channels
    return _make_kernel(
        template.variant_id, template.ep, f"{op_type}_{source.name if op_type == 'ReorderInput' else target.name}",
        op_type, op_type, NCHWC_DOMAIN, [], [], attributes, [source], [target], [],
    )  # fmt: skip


def _float_conv2d(kernel: Kernel) -> bool:
    """Whether ``kernel`` is a convolution of a float 4-D input by a 4-D weight to a 4-D output."""
    if kernel.op_type not in _CONVS or len(kernel.inputs) < 2 or not kernel.outputs:
        return False
    x, w, y = kernel.inputs[0], kernel.inputs[1], kernel.outputs[0]
    return len(x.shape) == 4 and len(w.shape) == 4 and len(y.shape) == 4 and x.dtype == "float"


def _convertible_conv(kernel: Kernel) -> bool:
    """Whether ORT's NCHWc transformer converts this convolution: float, 4-D, constant weights, group 1 or
    depthwise (the shapes as :func:`nchwc_padded` left them)."""
    if not _float_conv2d(kernel) or kernel.inputs[1].name not in kernel.weight_names:
        return False
    w, group = kernel.inputs[1], int(kernel.attributes.get("group", 1))
    return group == 1 or (w.shape[1] == 1 and group == w.shape[0])


def nchwc_padded(kernels: list[Kernel], block: int) -> list[Kernel]:
    """The CPU EP's convolutions as ORT's NCHWc transformer runs them for channel block ``block``, in place.

    ORT 1.31 (results/cpu-general/nchwc-rules) pads every float convolution's output channels up to the block; a
    group-1 convolution with at least ``block`` input channels, and a depthwise one, read their input padded up to the
    block too (a group-1 convolution with fewer reads the NCHW input as it is). The fusion rules learn a kernel's shapes
    from the teacher's examples, which mostly had channels that were multiples of the block, so they keep the graph's
    counts; this pass puts the padding back. Grouped (not depthwise) convolutions are left as detected.

    Args:
        kernels: the kernels of one model from static detection on the CPU EP.
        block: the NCHWc block of the CPU the prediction is for (8 or 16; 0 leaves the kernels as they are).

    Returns:
        ``kernels``, with padded convolutions' shapes, FLOPs and bytes recomputed.
    """
    if block <= 0:
        return kernels
    for index, kernel in enumerate(kernels):
        if not _float_conv2d(kernel):
            continue
        x, w, y = kernel.inputs[0], kernel.inputs[1], kernel.outputs[0]
        group = int(kernel.attributes.get("group", 1))
        c_out, c_in = w.shape[0], x.shape[1]
        depthwise = group > 1 and w.shape[1] == 1 and c_out == group == c_in
        if group > 1 and not depthwise:
            continue
        out_padded = round_up(c_out, block)
        in_padded = out_padded if depthwise else (c_in if c_in < block else round_up(c_in, block))
        if out_padded == c_out and in_padded == c_in:
            continue
        inputs = [
            dataclasses.replace(x, shape=(x.shape[0], in_padded, *x.shape[2:])),
            dataclasses.replace(w, shape=(out_padded, 1 if depthwise else in_padded, *w.shape[2:])),
            *[dataclasses.replace(t, shape=(out_padded,)) if t.shape == (c_out,) else t for t in kernel.inputs[2:]],
        ]
        outputs = [dataclasses.replace(y, shape=(y.shape[0], out_padded, *y.shape[2:])), *kernel.outputs[1:]]
        attributes = dict(kernel.attributes) | ({"group": out_padded} if depthwise else {})
        kernels[index] = rebuilt_kernel(kernel, inputs=inputs, outputs=outputs, attributes=attributes)
    return kernels


def _rewired(
    kernels: list[Kernel], conv_outputs: set[str], nodes: dict[str, tuple[list[str], list[str]]] | None
) -> list[Kernel]:
    """``kernels`` reading the tensors their producers write, in place.

    A fused kernel's template names its output after its first op (a ``Conv_HardSwish`` writes the Conv's output)
    while its consumers read its last op's, so every output of a kernel's absorbed nodes (``nodes``: node name -> its
    input and output names) is read as the kernel's output, and a fused Add's other summand (``Conv_Add``'s fourth
    input, named after the Conv's output by the template) is the absorbed Add's input from outside the kernel. The
    reorders the fusion rules' inserts add are dropped (this pass derives them from the graph), and so are inserted
    Reshapes of a convolution's output (the teacher showed them after a Gemm; ORT runs none after a convolution): the
    kernels that read their outputs read the original tensor again.

    Args:
        kernels: one model's kernels from static detection, in their list order.
        conv_outputs: the outputs of the convolutions ORT converts to NCHWc.
        nodes: the model's node names -> their input and output names (None: names as the kernels have them).

    Returns:
        The kernels kept, in their list order.
    """
    written = {t.name for k in kernels for t in k.outputs}
    alias: dict[str, str] = {}
    for kernel in kernels:
        if len(kernel.outputs) != 1 or nodes is None:
            continue
        inside = {name for node in kernel.absorbed_ops for name in nodes.get(node, ([], []))[1]}
        for name in inside - written:
            alias[name] = kernel.outputs[0].name
        if kernel.op_type in _CONVS and len(kernel.inputs) > 3 and kernel.inputs[3].name not in kernel.weight_names:
            adds = [n for n, t in zip(kernel.absorbed_ops, kernel.absorbed_op_types) if t in ("Add", "Sum")]
            summands = [name for n in adds for name in nodes.get(n, ([], []))[0] if name not in inside]
            if len(summands) == 1:
                kernel.inputs = [*kernel.inputs[:3], dataclasses.replace(kernel.inputs[3], name=summands[0])]
    kept: list[Kernel] = []
    dropped: dict[str, str] = {}  # a dropped kernel's output -> the tensor its chain started from
    for kernel in kernels:
        if _INSERTED in kernel.node_name and kernel.outputs:
            source = _SUFFIX.sub("", kernel.node_name.split(_INSERTED, 1)[1])
            if kernel.op_type in _REORDERS or (kernel.op_type == "Reshape" and source in conv_outputs):
                dropped.update((tensor.name, source) for tensor in kernel.outputs)
                continue
        kept.append(kernel)
    # An inserted chain's output is named after the tensor its consumer reads, with a "#order" suffix (``_wire``):
    # without the chain, the consumer reads that tensor again (else the tensor the chain started from).
    kept_written = {t.name for k in kept for t in k.outputs}
    for kernel in kept:
        inputs = []
        for tensor in kernel.inputs:
            name = alias.get(tensor.name, tensor.name)
            if name not in kept_written and tensor.name not in kernel.weight_names:
                base = _SUFFIX.sub("", name)
                base = alias.get(base, base)
                if base in kept_written or (base == name and name not in dropped):
                    name = base
                elif name in dropped:
                    name = alias.get(dropped[name], dropped[name])
            inputs.append(dataclasses.replace(tensor, name=name))
        kernel.inputs = inputs
    return kept


def _topological(kernels: list[Kernel]) -> list[Kernel]:
    """``kernels`` in an order where every kernel comes after the producers of its inputs, otherwise as listed
    (static detection places a fused kernel at its first node, which can come before a summand's producer); as
    listed where their tensors make a cycle (:func:`has_cycle`)."""
    return _ordered(kernels)[0]


def has_cycle(kernels: list[Kernel]) -> bool:
    """Whether ``kernels``' tensors (each read from the kernel that writes it) make a cycle: no order runs them."""
    return not _ordered(kernels)[1]


def _ordered(kernels: list[Kernel]) -> tuple[list[Kernel], bool]:
    """(``kernels`` in a topological order, True), or (``kernels`` as listed, False) where they make a cycle."""
    producer = {t.name: index for index, k in enumerate(kernels) for t in k.outputs}
    waits = [
        {producer[t.name] for t in k.inputs if t.name in producer and producer[t.name] != index}
        for index, k in enumerate(kernels)
    ]
    users: dict[int, list[int]] = {}
    for index, needed in enumerate(waits):
        for other in needed:
            users.setdefault(other, []).append(index)
    ready = [index for index, needed in enumerate(waits) if not needed]
    heapq.heapify(ready)
    ordered: list[Kernel] = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(kernels[index])
        for user in users.get(index, []):
            waits[user].discard(index)
            if not waits[user]:
                heapq.heappush(ready, user)
    if len(ordered) < len(kernels):  # a cycle (names the rules' templates confused): keep the list's order
        return kernels, False
    return ordered, True


def nchwc_reordered(
    kernels: list[Kernel],
    block: int,
    original: dict[str, tuple[int, ...]],
    nodes: dict[str, tuple[list[str], list[str]]] | None = None,
    graph_outputs: set[str] | None = None,
) -> list[Kernel]:
    """The reorders and NCHWc consumers of ORT's NCHWc transformer on a kernel list whose convolutions
    :func:`nchwc_padded` already padded (the rules: the module docstring).

    Args:
        kernels: one model's CPU kernels from static detection, convolutions padded, in execution order.
        block: the NCHWc block (8 or 16; 0 or less leaves the kernels as they are).
        original: every tensor's shape before the padding, by name.
        nodes: the model's node names -> their inputs' and outputs' names (what a fused kernel reads and its
            consumers read).
        graph_outputs: the model's outputs (an NCHWc one is reordered back; without them, those nothing reads).

    Returns:
        A new kernel list: the rules' own reorder kernels replaced by ReorderInput/ReorderOutput kernels where ORT
        puts them, ops on NCHWc tensors with padded channels, renumbered in order.
    """
    if block <= 0:
        return kernels
    conv_outputs = {k.outputs[0].name for k in kernels if _convertible_conv(k)}
    kernels = _topological(_rewired(kernels, conv_outputs, nodes))
    read = {t.name for k in kernels for t in k.inputs}
    written = {t.name for k in kernels for t in k.outputs}
    ends = (graph_outputs or set()) | (written - read)
    blocked: dict[str, int] = {}  # tensor -> its original channels, where an NCHWc copy of it exists
    only_blocked: set[str] = set()  # tensors that exist only as NCHWc so far
    produced: set[str] = set()  # tensors an NCHWc kernel wrote (not a ReorderInput)
    out: list[Kernel] = []

    def channels_of(tensor: TensorInfo) -> int:
        return original.get(tensor.name, tensor.shape)[1]

    def as_blocked(tensor: TensorInfo, template: Kernel) -> TensorInfo:
        """The NCHWc copy of ``tensor``, a ReorderInput first where there is none."""
        channels = blocked.get(tensor.name, channels_of(tensor))
        target = _with_channels(tensor, round_up(channels, block), _blocked_name(tensor.name))
        if tensor.name not in blocked:
            out.append(_reorder(template, "ReorderInput", _with_channels(tensor, channels), target, channels))
            blocked[tensor.name] = channels
        return target

    def as_plain(tensor: TensorInfo, template: Kernel) -> TensorInfo:
        """``tensor`` in NCHW, a ReorderOutput first where it exists only as NCHWc."""
        if tensor.name not in only_blocked:
            return tensor
        channels = blocked[tensor.name]
        source = _with_channels(tensor, round_up(channels, block), _blocked_name(tensor.name))
        plain = _with_channels(tensor, channels)
        out.append(_reorder(template, "ReorderOutput", source, plain, channels))
        only_blocked.discard(tensor.name)
        return plain

    def runs_blocked(kernel: Kernel, inputs: list[TensorInfo], channels: int, **changes: Any) -> None:
        """``kernel`` on NCHWc tensors: its first output NCHWc with ``channels`` original channels."""
        y = kernel.outputs[0]
        outputs = [_with_channels(y, round_up(channels, block), _blocked_name(y.name)), *kernel.outputs[1:]]
        out.append(rebuilt_kernel(kernel, inputs=inputs, outputs=outputs, **changes))
        blocked[y.name] = channels
        only_blocked.add(y.name)
        produced.add(y.name)

    for kernel in kernels:
        acts = [t for t in kernel.inputs if t.name not in kernel.weight_names]
        four_d = bool(acts) and bool(kernel.outputs) and all(len(t.shape) == 4 for t in acts[:1] + kernel.outputs[:1])
        op = kernel.op_type
        if _convertible_conv(kernel):
            x, group = kernel.inputs[0], int(kernel.attributes.get("group", 1))
            reads_blocked = group > 1 or channels_of(x) >= block
            inputs = [as_blocked(x, kernel) if reads_blocked else as_plain(x, kernel), *kernel.inputs[1:]]
            if len(inputs) > 3 and inputs[3].name not in kernel.weight_names and len(inputs[3].shape) == 4:
                inputs[3] = as_blocked(inputs[3], kernel)  # the fused Add's other summand
            runs_blocked(kernel, inputs, channels_of(kernel.outputs[0]))
        elif op in _POOLS and four_d:
            channels = channels_of(acts[0])
            # A global pool of an NCHW tensor a node wrote stays NCHW (of a graph input, it is reordered in).
            stays = op.startswith("Global") and acts[0].name not in blocked and acts[0].name in written
            if channels % block == 0 and not stays:
                runs_blocked(kernel, [as_blocked(kernel.inputs[0], kernel), *kernel.inputs[1:]], channels,
                             domain=NCHWC_DOMAIN)  # fmt: skip
            else:
                out.append(rebuilt_kernel(kernel, inputs=[as_plain(t, kernel) for t in kernel.inputs], domain=""))
        elif (op in _UNARY or op == "BatchNormalization") and four_d and acts[0].name in produced:
            x = kernel.inputs[0]
            runs_blocked(kernel, [as_blocked(x, kernel), *kernel.inputs[1:]], blocked[x.name])
        elif (
            op in _BINARY
            and four_d
            and len(acts) == len(kernel.inputs) >= 2
            and all(t.name in produced for t in acts)
            and len({original.get(t.name, t.shape) for t in acts}) == 1
        ):
            runs_blocked(kernel, [as_blocked(t, kernel) for t in acts], blocked[acts[0].name])
        elif (
            op == "Concat"
            and four_d
            and int(kernel.attributes.get("axis", 1)) in (1, -3)
            and all(t.name in produced and blocked[t.name] % block == 0 for t in acts)
        ):
            runs_blocked(kernel, [as_blocked(t, kernel) for t in acts], sum(blocked[t.name] for t in acts))
        elif (
            op == "Resize"
            and four_d
            and acts[0].name in produced
            and kernel.attributes.get("mode") in ("linear", b"linear")
            and all(o % i == 0 for i, o in zip(acts[0].shape[2:], kernel.outputs[0].shape[2:]))
        ):
            x = kernel.inputs[0]
            runs_blocked(kernel, [as_blocked(x, kernel), *kernel.inputs[1:]], blocked[x.name],
                         op_type="Upsample", domain=NCHWC_DOMAIN)  # fmt: skip
        elif (
            op == "Transpose"
            and four_d
            and acts[0].name in produced
            and list(kernel.attributes.get("perm", [])) == [0, 2, 3, 1]
        ):
            x = acts[0]
            attributes = {"channels_last": 1, "channels": blocked[x.name]}
            out.append(rebuilt_kernel(kernel, op_type="ReorderOutput", domain=NCHWC_DOMAIN, attributes=attributes,
                                inputs=[as_blocked(x, kernel)]))  # fmt: skip
        else:
            out.append(rebuilt_kernel(kernel, inputs=[as_plain(t, kernel) for t in kernel.inputs]))
    for name in sorted(only_blocked & ends):  # NCHWc graph outputs (or tensors nothing reads), reordered back
        producer = next(k for k in reversed(out) if any(t.name == _blocked_name(name) for t in k.outputs))
        tensor = next(t for t in producer.outputs if t.name == _blocked_name(name))
        as_plain(dataclasses.replace(tensor, name=name), producer)
    for order, kernel in enumerate(out):
        kernel.order = order
    return out


def nchwc_layout(
    kernels: list[Kernel],
    block: int,
    nodes: dict[str, tuple[list[str], list[str]]] | None = None,
    graph_outputs: set[str] | None = None,
) -> list[Kernel]:
    """One model's CPU kernels from static detection as ORT's NCHWc transformer runs them for channel block
    ``block``: convolutions padded (:func:`nchwc_padded`), then the reorders and
    NCHWc consumers (:func:`nchwc_reordered`).

    Args:
        kernels: the kernels of one model from static detection on the CPU EP, in execution order.
        block: the NCHWc block of the CPU the prediction is for (8 or 16; 0 leaves the kernels as they are).
        nodes: the model's node names -> their inputs' and outputs' names (see :func:`nchwc_reordered`).
        graph_outputs: the model's outputs.

    Returns:
        The kernel list ORT would run (a new list; ``kernels`` may have been changed in place); as detected where
        no convolution is one ORT converts. Where the reorder
        pass's renaming of the rules' tensors makes a cycle (RepGhostNet's re-parameterised BatchNorm branches, whose
        fused kernels the templates wire to each other), the padded kernels alone, as they came out of the padding:
        a kernel graph no order can run has no critical path and no prediction.
    """
    if block <= 0:
        return kernels
    original: dict[str, tuple[int, ...]] = {}
    for kernel in kernels:
        for tensor in kernel.inputs + kernel.outputs:
            original.setdefault(tensor.name, tuple(tensor.shape))
    padded = nchwc_padded(kernels, block)
    if not any(_convertible_conv(kernel) for kernel in padded):
        return padded  # nothing ORT's NCHWc transformer converts: the kernels as detected (names and order too)
    inputs_before = [list(kernel.inputs) for kernel in padded]  # the pass rewires these kernels in place
    reordered = nchwc_reordered(padded, block, original, nodes, graph_outputs)
    if not has_cycle(reordered):
        return reordered
    for kernel, inputs in zip(padded, inputs_before, strict=True):
        kernel.inputs = inputs
    return padded
