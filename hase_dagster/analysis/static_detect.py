"""Static kernel detection: an ONNX model becomes the kernel list ORT would run on the target EP,
from learned fusion rules alone: ONNX shape inference, then the rules' patterns; nothing is
executed and the target EP is not needed.

Ops no rule covers stay as one unfused kernel each and are listed in ``coverage``: never dropped.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.costs import bytes_moved, estimate_flops, tensor_bytes
from hase_dagster.analysis.fusion import family_name
from hase_dagster.analysis.fusion_rules import (
    MIN_PRECISION,
    FusionRules,
    conditions_hold,
    features,
    group_refs,
    qualified,
    render_attributes,
    render_tensor,
)
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.pattern_graph import GraphStructure, GraphView, Matcher, prepare
from hase_dagster.core.errors import HaseError, ModelLoadError


@dataclass
class StaticDetection:
    """The kernels of a model found by the rules, and how much of the model the rules covered."""

    kernels: list[Kernel]
    coverage: dict[str, Any]


_MATCHERS: dict[int, list[Matcher]] = {}


def rebuilt_kernel(
    kernel: Kernel,
    inputs: list[TensorInfo] | None = None,
    outputs: list[TensorInfo] | None = None,
    op_type: str | None = None,
    domain: str | None = None,
    attributes: dict[str, Any] | None = None,
) -> Kernel:
    """``kernel`` with the given fields changed, its FLOPs and bytes recomputed from the new shapes (same order)."""
    rebuilt = _make_kernel(
        kernel.variant_id, kernel.ep, kernel.node_name, kernel.family, op_type or kernel.op_type,
        kernel.domain if domain is None else domain, kernel.absorbed_ops, kernel.absorbed_op_types,
        kernel.attributes if attributes is None else attributes, kernel.inputs if inputs is None else inputs,
        kernel.outputs if outputs is None else outputs, kernel.weight_names,
    )  # fmt: skip
    rebuilt.order = kernel.order
    return rebuilt


# Ops the look-ahead of ORT's transpose optimizer passes between a MaxPool and a later Transpose (elementwise, one
# data input): with one, the later Transpose still draws the earlier one down (see pads_before_transposes).
_LAYOUT_FREE_UNARY = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Identity", "Cast", "Erf"})


def pads_before_transposes(kernels: list[Kernel]) -> list[Kernel]:
    """ORT's transpose optimizer on a Transpose -> Pad -> MaxPool chain whose MaxPool output reaches another
    Transpose: the first Transpose moves below the Pad, so the Pad runs on the Transpose's input layout (NesT's
    channels-last LayerNorm, Transpose to NCHW, same-padding and max-pool: the Pad runs channels last, a different
    and on the GPU 20x slower kernel than the NCHW H/W padding the graph reads as).

    Why only then, read off ORT 1.31's optimizer on the CPU EP at the basic level (tests/test_static_detection.py):
    it pushes a Transpose through a Pad when its look-ahead sees it cancel a later Transpose; MaxPool has a handler
    (NhwcMaxPool, taken only for 8-bit tensors), which the look-ahead passes, so the push happens and stops at the
    MaxPool. Without the later Transpose, or with an AveragePool or a Conv (no handler), the Pad keeps its layout.

    Args:
        kernels: a detected kernel list in execution order, its tensors wired (:func:`_wire`).

    Returns:
        The list with each such Pad and Transpose swapped (the Pad on the Transpose's input, the Transpose on the
        padded tensor, each at the other's place in the order); the rest unchanged.
    """
    consumers: dict[str, list[int]] = {}
    for index, kernel in enumerate(kernels):
        for tensor in kernel.activations:
            consumers.setdefault(tensor.name, []).append(index)

    def only_consumer(index: int) -> int | None:
        outputs = kernels[index].outputs
        users = consumers.get(outputs[0].name, []) if len(outputs) == 1 else []
        return users[0] if len(users) == 1 else None

    def plain(index: int | None, *op_types: str) -> bool:
        return index is not None and kernels[index].op_type in op_types and not kernels[index].domain

    def reaches_transpose(index: int) -> bool:
        after = only_consumer(index)
        while plain(after, *_LAYOUT_FREE_UNARY):
            after = only_consumer(after)  # type: ignore[arg-type]
        return plain(after, "Transpose")

    result = list(kernels)
    for index, transpose in enumerate(kernels):
        pad_index = only_consumer(index) if plain(index, "Transpose") and transpose.activations else None
        if pad_index is None or not plain(pad_index, "Pad"):
            continue
        pool_index = only_consumer(pad_index)
        if pool_index is None or not plain(pool_index, "MaxPool") or not reaches_transpose(pool_index):
            continue
        pad = kernels[pad_index]
        perm = [int(p) for p in transpose.attributes.get("perm") or []]
        source, padded = transpose.activations[0], pad.outputs[0]
        if sorted(perm) != list(range(len(source.shape))) or len(padded.shape) != len(perm):
            continue
        shape = [0] * len(perm)
        for axis, source_axis in enumerate(perm):
            shape[source_axis] = padded.shape[axis]
        moved = dataclasses.replace(padded, name=f"{padded.name}#before_transpose", shape=tuple(shape))
        data = [source if t.name == transpose.outputs[0].name else t for t in pad.inputs]
        result[index] = dataclasses.replace(rebuilt_kernel(pad, inputs=data, outputs=[moved]), order=transpose.order)
        result[pad_index] = dataclasses.replace(
            rebuilt_kernel(transpose, inputs=[moved], outputs=[padded]), order=pad.order
        )
    return result


def _matchers(rules: FusionRules) -> list[Matcher]:
    """One matcher per rule, built once per rules object (detection is called in loops)."""
    key = id(rules)
    if key not in _MATCHERS or len(_MATCHERS[key]) != len(rules.rules):
        _MATCHERS[key] = [Matcher(rule["pattern"]) for rule in rules.rules]
    return _MATCHERS[key]


def _make_kernel(
    variant_id: str,
    ep: str,
    name: str,
    family: str,
    op_type: str,
    domain: str,
    absorbed: list[str],
    absorbed_types: list[str],
    attributes: dict[str, Any],
    inputs: list[TensorInfo],
    outputs: list[TensorInfo],
    weights: list[str],
) -> Kernel:
    read, written = bytes_moved(inputs, outputs)
    return Kernel(
        variant_id=variant_id,
        ep=ep,
        order=0,
        node_name=name,
        family=family,
        op_type=op_type,
        domain=domain,
        absorbed_ops=absorbed,
        absorbed_op_types=absorbed_types,
        attributes=attributes,
        inputs=inputs,
        outputs=outputs,
        weight_names=weights,
        flops=estimate_flops(op_type, attributes, inputs, outputs),
        input_bytes=read,
        output_bytes=written,
        weight_bytes=sum(tensor_bytes(t) for t in inputs if t.name in weights),
    )


def _renders(template: dict[str, Any], refs: dict[str, TensorInfo]) -> bool:
    """Whether every dimension of the template's tensors resolves on this match."""
    return all(all(d >= 0 for d in render_tensor(t, refs).shape) for t in template["inputs"] + template["outputs"])


def _matches(view: GraphView, matcher: Matcher) -> list[list[int]]:
    """The matcher's node groups in ``view``; kept in the view's structure, since matching reads
    only the graph's structure: views at other batch sizes match again for free."""
    if view.structure is None:
        return matcher.matches(view)
    found = view.structure.matches.get(matcher.key)
    if found is None:
        found = view.structure.matches[matcher.key] = matcher.matches(view)
    return found


def _select(view: GraphView, rules: FusionRules) -> list[tuple[dict[str, Any], list[int]]]:
    """Rule matches that hold their conditions, largest patterns (then surest rules) first,
    without overlap."""
    candidates: list[tuple[tuple[Any, ...], dict[str, Any], list[int]]] = []
    for rule, matcher in zip(rules.rules, _matchers(rules)):
        if rule["precision"] < MIN_PRECISION:
            continue
        seen: set[frozenset[int]] = set()
        for group in _matches(view, matcher):
            frozen = frozenset(group)
            if frozen in seen:
                continue
            seen.add(frozen)
            if rule["conditions"] and not conditions_hold(rule["conditions"], features(view, group)):
                continue
            if rule["kernel"] is not None and not _renders(rule["kernel"], group_refs(view, group)):
                continue  # learned on other ranks: its kernel's shapes cannot be read off this match
            rank = (-len(group), -rule["precision"], -rule["positives"], min(group))
            candidates.append((rank, rule, group))
    candidates.sort(key=lambda c: c[0])
    taken: set[int] = set()
    chosen = []
    for _, rule, group in candidates:
        if taken.isdisjoint(group):
            taken.update(group)
            chosen.append((rule, group))
    return chosen


def detect_kernels(
    source: str | os.PathLike[str], rules: FusionRules, variant_id: str | None = None
) -> StaticDetection:
    """The kernels ORT would run for ``source`` on the rules' EP, found without running it.

    Args:
        source: an ONNX file with static input shapes.
        rules: fusion rules of the target EP, ORT version and device.
        variant_id: the name the kernels carry (the file's stem by default).

    Returns:
        The kernels (in graph order, ops no rule covers as unfused kernels) and the coverage:
        share of the model's ops a rule covered, the uncovered op types, the rules used.

    Raises:
        HaseError: the file is missing or not a valid ONNX model.
    """
    started = time.perf_counter()
    path = Path(source)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError as exc:
        raise ModelLoadError(f"model file {path} does not exist") from exc
    except Exception as exc:  # protobuf raises DecodeError and others
        raise ModelLoadError(f"cannot read {path} as an ONNX model: {exc}") from exc
    return detect_in_model(model, rules, variant_id or path.stem, started)


def detect_in_model(
    model: onnx.ModelProto, rules: FusionRules, variant_id: str, started: float | None = None
) -> StaticDetection:
    """:func:`detect_kernels` for a model already in memory."""
    started = time.perf_counter() if started is None else started
    return _detect(prepare(model), rules, variant_id, started)


def detect_at(
    structure: GraphStructure, batch_size: int | None, rules: FusionRules, variant_id: str
) -> StaticDetection:
    """:func:`detect_in_model` for a graph whose structure is read already: only what depends on
    shapes (shape inference, the rules' conditions, the kernels' tensors) is done again.

    Args:
        structure: the model's :class:`GraphStructure` (read once, kept for every batch size).
        batch_size: the inputs' symbolic leading dimensions are set to it (None: as they are).
        rules: fusion rules of the target EP, ORT version and device.
        variant_id: the name the kernels carry.

    Returns:
        What :func:`detect_in_model` returns for the model at that batch size.
    """
    started = time.perf_counter()
    return _detect(structure.view(batch_size), rules, variant_id, started)


def _detect(view: GraphView, rules: FusionRules, variant_id: str, started: float) -> StaticDetection:
    unknown = [name for name in view.graph_inputs if any(d < 0 for d in view.tensor(name).shape)]
    if unknown:
        raise HaseError(f"model input(s) {', '.join(unknown)} have no static shape: export at a fixed batch size")
    chosen = _select(view, rules)
    covered = {node for _, group in chosen for node in group}
    # (first original node index, position) -> kernel, so kernels follow the graph's order.
    placed: list[tuple[tuple[int, int], Kernel]] = []
    kernel_of_node: dict[int, Kernel] = {}
    rule_uses: Counter = Counter()
    eliminated = 0
    for rule, group in chosen:
        rule_uses[rule["id"]] += 1
        template = rule["kernel"]
        if template is None:
            eliminated += len(group)
            continue
        refs = group_refs(view, group)
        inputs = [render_tensor(t, refs) for t in template["inputs"]]
        outputs = [render_tensor(t, refs) for t in template["outputs"]]
        weights = [tensor.name for tensor, t in zip(inputs, template["inputs"]) if t["weight"]]
        names = [view.nodes[n].name for n in group]
        kernel = _make_kernel(
            variant_id, rules.ep, names[-1], rule["family"], template["op_type"], template["domain"], names,
            [view.nodes[n].op_type for n in group], render_attributes(template["attributes"], view, group),
            inputs, outputs, weights,
        )  # fmt: skip
        kernel._static_rule = (rule, group)  # type: ignore[attr-defined]
        placed.append(((min(group), 1), kernel))
        for node in group:
            kernel_of_node[node] = kernel
    uncovered: Counter = Counter()
    for node_index in view.live:
        if node_index in covered:
            continue
        node = view.nodes[node_index]
        uncovered[node.op_type if not node.domain else f"{node.domain}.{node.op_type}"] += 1
        inputs = [view.tensor(name) for name in node.input if name]
        kernel = _make_kernel(
            variant_id, rules.ep, node.name, family_name([node.op_type], node.op_type), node.op_type, node.domain,
            [node.name], [node.op_type], view.attributes(node_index), inputs,
            [view.tensor(name) for name in node.output if name],
            [t.name for t in inputs if t.name in view.initializers],
        )  # fmt: skip
        placed.append(((node_index, 1), kernel))
        kernel_of_node[node_index] = kernel
    placed.extend(_inserted(view, rules, placed, kernel_of_node, variant_id))
    placed.sort(key=lambda p: p[0])
    kernels = [kernel for _, kernel in placed]
    for order, kernel in enumerate(kernels):
        kernel.order = order
        if hasattr(kernel, "_static_rule"):
            del kernel._static_rule
    _wire(kernels)
    kernels = pads_before_transposes(kernels)
    live = len(view.live)
    coverage = {
        "original_ops": live,
        "covered_ops": len(covered),
        "covered_share": len(covered) / live if live else 1.0,
        "eliminated_ops": eliminated,
        "uncovered_ops": sum(uncovered.values()),
        "uncovered_patterns": dict(sorted(uncovered.items())),
        "rules_used": len(rule_uses),
        "kernels": len(kernels),
        "seconds": time.perf_counter() - started,
    }
    return StaticDetection(kernels=kernels, coverage=coverage)


def _wire(kernels: list[Kernel]) -> None:
    """Make the kernels' tensors a DAG in list order, in place: an output whose name an earlier
    kernel already wrote or read (a reshape ORT added keeps its input's name in the templates)
    gets a new name, and later readers of that name read the newest writer. Node names are
    made unique the same way."""
    newest: dict[str, str] = {}
    seen: set[str] = set()
    nodes: set[str] = set()
    for kernel in kernels:
        kernel.inputs = [dataclasses.replace(t, name=newest.get(t.name, t.name)) for t in kernel.inputs]
        seen.update(t.name for t in kernel.inputs)
        outputs = []
        for tensor in kernel.outputs:
            name = tensor.name if tensor.name not in seen else f"{tensor.name}#{kernel.order}"
            newest[tensor.name] = name
            seen.add(name)
            outputs.append(dataclasses.replace(tensor, name=name))
        kernel.outputs = outputs
        if kernel.node_name in nodes:
            kernel.node_name = f"{kernel.node_name}#{kernel.order}"
        nodes.add(kernel.node_name)


def _chain_sources(
    view: GraphView, group: list[int], first: dict[str, Any], refs: dict[str, TensorInfo], used: set[str]
) -> list[str]:
    """Original tensors an inserted chain may read: the one its template names, else the group's
    outside inputs with as many elements (ORT's own tensors, e.g. a flattened Gemm output, have
    no original name), leaving out those another chain of the same kernel reads."""
    if not first["inputs"]:
        return []
    wanted = render_tensor(first["inputs"][0], refs)
    if wanted.name in view.producer or wanted.name in view.graph_inputs:
        return [wanted.name]
    members = set(group)
    found: list[str] = []
    for node_index in group:
        for name in view.nodes[node_index].input:
            if not name or name in view.constant or view.producer.get(name, (-1, 0))[0] in members:
                continue
            if view.tensor(name).numel == wanted.numel and name not in used and name not in found:
                found.append(name)
    return found


def _inserted(
    view: GraphView,
    rules: FusionRules,
    placed: list[tuple[tuple[int, int], Kernel]],
    kernel_of_node: dict[int, Kernel],
    variant_id: str,
) -> list[tuple[tuple[int, int], Kernel]]:
    """Kernels ORT adds with no original op (layout reorders, reshapes), before the inputs of
    rule kernels where the teacher showed them for that kind of producer."""
    out: list[tuple[tuple[int, int], Kernel]] = []
    done: set[tuple[str, str]] = set()
    for position, kernel in placed:
        rule_and_group = getattr(kernel, "_static_rule", None)
        if rule_and_group is None:
            continue
        rule, group = rule_and_group
        if not rule["inserts"]:
            continue
        refs = group_refs(view, group)
        used: set[str] = set()  # tensors this kernel's chains already read: one chain per input
        for slot_text, entry in rule["inserts"].items():
            slot = int(slot_text)
            if slot >= len(kernel.inputs):
                continue
            best_key, best, name = None, 0, ""
            for chain_key, chain in entry["chains"].items():
                for chain_input in _chain_sources(view, group, chain["kernels"][0], refs, used):
                    producer_node = view.producer.get(chain_input, (None, 0))[0]
                    source = qualified(kernel_of_node.get(producer_node)) if producer_node is not None else "input"
                    count = chain["by_producer"].get(source, 0)
                    total = entry["totals"].get(source, 0)
                    if source not in entry["totals"]:
                        # A producer kind the teacher never showed here: go by all producers.
                        count, total = sum(chain["by_producer"].values()), sum(entry["totals"].values())
                    if count > best and count * 2 >= total:
                        best_key, best, name = chain_key, count, chain_input
            if best_key is None or (name, best_key) in done:
                continue
            done.add((name, best_key))
            used.add(name)
            for template in entry["chains"][best_key]["kernels"]:
                inputs = [render_tensor(t, refs) for t in template["inputs"]]
                added = _make_kernel(
                    variant_id, rules.ep, f"{template['op_type']}_inserted_{name}", template["family"],
                    template["op_type"], template["domain"], [], [],
                    render_attributes(template["attributes"], view, group), inputs,
                    [render_tensor(t, refs) for t in template["outputs"]],
                    [tensor.name for tensor, t in zip(inputs, template["inputs"]) if t["weight"]],
                )  # fmt: skip
                out.append(((position[0], 0), added))
    return out
