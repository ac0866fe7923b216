"""The exported ONNX graph as static fusion rules see it: shapes from ONNX shape inference (no
execution, no execution provider), constant subgraphs marked as folded, and subgraph patterns
that can be written down as JSON and found again in another model.

A *pattern* is an ordered list of ops (op type, domain, arity) with, for every input slot, where
the value comes from: another op of the pattern (``["node", k, output_slot]``), a constant
(``["const"]``), an absent optional input (``["none"]``), or an outside tensor labelled by first
appearance (``["ext", label]``: equal labels are the same tensor). Outputs that only feed the
pattern are flagged ``internal``: ORT fuses a chain only when its intermediate values have no
other reader, so a match must keep them private too.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from hase_dagster.analysis.graph import TensorInfo, attribute_values, name_all_nodes
from hase_dagster.core.dtypes import ort_name_of_onnx_type as _ort_name_uncached
from hase_dagster.core.errors import HaseError

# numpy's dtype lookup behind it is slow, and a model has thousands of tensors of few types.
ort_name_of_onnx_type = functools.lru_cache(maxsize=64)(_ort_name_uncached)

# Initializers up to this many elements keep their values for shape inference (Reshape targets,
# Slice bounds); larger ones (weights) are passed as typed inputs, so inference does not copy them.
SMALL_CONSTANT_ELEMENTS = 64
# The largest value the fold pass evaluates or keeps: shapes and index vectors are far smaller, while the constant
# masks and tables some exports build from shapes at run time (MViTv2's ConstantOfShape -> Where -> ScatterND) grow
# with the batch and took 24 GB at batch 64 when evaluated. Larger outputs keep their inferred shape only.
FOLD_MAX_ELEMENTS = 1 << 20
SHAPE_OP_TYPES = frozenset({"Shape", "Size"})


@dataclass
class GraphView:
    """An exported model's nodes (in file order, which ONNX requires to be topological), tensors
    with inferred shapes, and the nodes a constant folder removes before anything runs."""

    nodes: list[onnx.NodeProto]
    tensors: dict[str, TensorInfo]
    producer: dict[str, tuple[int, int]]  # tensor -> (node index, output slot)
    consumers: dict[str, list[tuple[int, int]]]  # tensor -> (node index, input slot) of live nodes
    constant: set[str]
    folded: set[int]
    initializers: set[str]
    graph_inputs: list[str]
    graph_outputs: set[str]
    by_op: dict[str, list[int]] = field(default_factory=dict)
    _attributes: dict[int, dict[str, Any]] = field(default_factory=dict)
    _attribute_texts: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    # The structure this view was made from (shared by views at other batch sizes), if any.
    structure: GraphStructure | None = None

    def attributes(self, index: int) -> dict[str, Any]:
        if index not in self._attributes:
            self._attributes[index] = attribute_values(self.nodes[index])
        return self._attributes[index]

    def attribute_texts(self, index: int) -> list[tuple[str, str]]:
        """Each attribute of node ``index`` with its value as sorted-key JSON (what rule conditions
        compare), computed once per node for every view of the same structure."""
        if index not in self._attribute_texts:
            self._attribute_texts[index] = [
                (name, json.dumps(value, sort_keys=True)) for name, value in self.attributes(index).items()
            ]
        return self._attribute_texts[index]

    def tensor(self, name: str) -> TensorInfo:
        return self.tensors.get(name) or TensorInfo(name, "float", ())

    @property
    def live(self) -> list[int]:
        """Nodes that survive constant folding, in graph order."""
        return [i for i in range(len(self.nodes)) if i not in self.folded]


def _light_copy(model: onnx.ModelProto, batch_size: int | None) -> onnx.ModelProto:
    """The model without large initializer values (typed inputs instead), its first input's
    leading dimension set to ``batch_size`` when given."""
    graph = model.graph
    small, typed = [], []
    for init in graph.initializer:
        count = 1
        for dim in init.dims:
            count *= dim
        if count <= SMALL_CONSTANT_ELEMENTS:
            small.append(init)
        else:
            typed.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    init_names = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init_names]
    light_graph = helper.make_graph(list(graph.node), graph.name or "g", inputs + typed, list(graph.output), small)
    light = helper.make_model(light_graph, opset_imports=list(model.opset_import))
    light.ir_version = model.ir_version
    if batch_size is not None and inputs:
        dims = light.graph.input[0].type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            dims[0].dim_value = batch_size
    return light


def _shape_of(value: onnx.ValueInfoProto) -> TensorInfo:
    tensor_type = value.type.tensor_type
    # No shape at all (unknown rank) reads as one unknown dimension, so it is never taken for a scalar.
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
    dims = dims if tensor_type.HasField("shape") else (-1,)
    dtype = ort_name_of_onnx_type(tensor_type.elem_type) if tensor_type.elem_type else "float"
    return TensorInfo(value.name, dtype, dims)


def _infer(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # onnx raises its own InferenceError and ValidationError types
        raise HaseError(f"ONNX shape inference failed: {str(exc).splitlines()[0]}") from exc
    return {
        value.name: _shape_of(value)
        for value in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output)
    }


def _evaluate(
    node: onnx.NodeProto,
    values: dict[str, np.ndarray],
    tensors: dict[str, TensorInfo],
    evaluators: dict[int, Any] | None = None,
    index: int = -1,
) -> list | None:
    """The outputs of a node whose inputs are all known (shapes of Shape's input), else None;
    the node's reference evaluator is kept in ``evaluators`` under ``index`` when given."""
    if node.op_type == "Shape":
        shape = tensors.get(node.input[0])
        if shape is None or not shape.shape or any(d < 0 for d in shape.shape):
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        dims = list(shape.shape)[attrs.get("start", 0) : attrs.get("end", len(shape.shape))]
        return [np.array(dims, dtype=np.int64)]
    if node.op_type == "Size":
        shape = tensors.get(node.input[0])
        if shape is None or any(d < 0 for d in shape.shape):
            return None
        return [np.array(int(np.prod(shape.shape)), dtype=np.int64)]
    if any(name and name not in values for name in node.input):
        return None
    if _output_elements(node, values) > FOLD_MAX_ELEMENTS:
        return None
    # Imported here: building the reference runtime's op table takes tens of ms, and most models
    # (static shapes) never need it.
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = evaluators.get(index) if evaluators is not None else None
        if evaluator is None:
            evaluator = ReferenceEvaluator(node)
            if evaluators is not None:
                evaluators[index] = evaluator
        return list(evaluator.run(None, {name: values[name] for name in node.input if name}))
    except Exception:  # an op the reference runtime lacks: its outputs stay unknown
        return None


def _output_elements(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> int:
    """How many elements the outputs of a node that makes a tensor from a shape would hold (ConstantOfShape,
    Expand, Tile); 0 for any other node, whose outputs are no larger than its known inputs allow."""
    try:
        if node.op_type == "ConstantOfShape":
            return int(np.prod(values[node.input[0]], dtype=np.float64))
        if node.op_type == "Expand":
            shape = np.broadcast_shapes(values[node.input[0]].shape, tuple(int(d) for d in values[node.input[1]]))
            return int(np.prod(shape, dtype=np.float64))
        if node.op_type == "Tile":
            repeats = np.asarray(values[node.input[1]], dtype=np.float64)
            return int(values[node.input[0]].size * np.prod(repeats))
    except (ValueError, IndexError, KeyError):  # shapes that do not broadcast: the evaluator says so
        return 0
    return 0


def _memo_key(index: int, node: onnx.NodeProto, values: dict[str, np.ndarray]) -> tuple[Any, ...] | None:
    """What an evaluation of node ``index`` depends on: its input values; None when it depends on
    more (Shape and Size read shapes) or cannot be evaluated (an input value is unknown)."""
    if node.op_type in SHAPE_OP_TYPES or any(name and name not in values for name in node.input):
        return None
    return (index, *((values[n].dtype.str, values[n].shape, values[n].tobytes()) for n in node.input if n))


# ONNX element type of each numpy dtype met (as numpy_helper.from_array gives it), and tensor type
# protos by (element type, shape): the fold pass asks for them thousands of times per model.
_ELEMENT_TYPES: dict[np.dtype, int] = {}


def _element_type(array: np.ndarray) -> int:
    if array.dtype == object:  # strings and others: from_array looks at the values
        return int(numpy_helper.from_array(array).data_type)
    code = _ELEMENT_TYPES.get(array.dtype)
    if code is None:
        code = _ELEMENT_TYPES[array.dtype] = int(numpy_helper.from_array(array).data_type)
    return code


@functools.lru_cache(maxsize=4096)
def _tensor_type(element_type: int, shape: tuple[int, ...]) -> onnx.TypeProto:
    """A shared, never modified type proto (inference only reads it)."""
    return helper.make_tensor_type_proto(element_type, list(shape))


def _value_proto(
    name: str, array: np.ndarray, protos: dict[str, tuple[np.ndarray, onnx.TensorProto]] | None
) -> onnx.TensorProto:
    """``numpy_helper.from_array(array, name)``, kept in ``protos`` while ``name`` holds that array."""
    if protos is None:
        return numpy_helper.from_array(array, name)
    cached = protos.get(name)
    if cached is None or cached[0] is not array:
        cached = protos[name] = (array, numpy_helper.from_array(array, name))
    return cached[1]


def _fold_and_infer(
    light: onnx.ModelProto,
    tensors: dict[str, TensorInfo],
    memo: dict[tuple[Any, ...], list | None] | None = None,
    evaluators: dict[int, Any] | None = None,
    protos: dict[str, tuple[np.ndarray, onnx.TensorProto]] | None = None,
) -> dict[str, TensorInfo]:
    """Shapes ONNX inference left unknown because they are computed at run time from other
    shapes (Shape -> Gather -> Concat -> Reshape): one pass in graph order that evaluates those
    constant subgraphs on the shapes known so far and infers each op's outputs from them.

    ``memo`` keeps each evaluated node's outputs by its input values (dtype, shape, bytes): the
    same graph at another batch size evaluates again only what depends on the batch, and
    ``evaluators`` keeps each node's reference evaluator (building one costs as much as a run)
    and ``protos`` each value's tensor proto (for inference) while the value stays the same."""
    values: dict[str, np.ndarray] = {init.name: numpy_helper.to_array(init) for init in light.graph.initializer}
    types: dict[str, onnx.TypeProto] = {value.name: value.type for value in light.graph.input}
    for init in light.graph.initializer:
        types[init.name] = helper.make_tensor_type_proto(init.data_type, list(init.dims))
    opsets = {o.domain or "ai.onnx": o.version for o in light.opset_import}
    out = dict(tensors)

    def visit(index: int, node: onnx.NodeProto, cache: bool) -> None:
        if node.op_type == "If" and node.input[0] in values:
            # Exports build shape-dependent constants this way (timm's Hiera tiles its window position embedding
            # under If(Size(...) < k), which ORT folds before anything runs): the taken branch's nodes are folded
            # and inferred in this scope. They have no index in the graph, by which the memo and the evaluator
            # cache are keyed, so neither keeps them.
            branch = _taken_branch(node, values)
            for inner_node in branch.node:
                visit(-1, inner_node, False)
            for name, inner in zip(node.output, branch.output):
                if name and inner.name in types:
                    types[name] = types[inner.name]
                    out[name] = TensorInfo(name, out[inner.name].dtype, out[inner.name].shape)
                    if inner.name in values:
                        values[name] = values[inner.name]
            return
        key = _memo_key(index, node, values) if cache and memo is not None else None
        if key is not None and memo is not None:
            if key not in memo:
                memo[key] = _evaluate(node, values, out, evaluators, index)
            results = memo[key]
        else:
            results = _evaluate(node, values, out, evaluators if cache else None, index)
        if results is not None:
            for name, value in zip(node.output, results):
                if name:
                    array = np.asarray(value)
                    if array.size <= FOLD_MAX_ELEMENTS:
                        values[name] = array
                    element_type = _element_type(array)
                    types[name] = _tensor_type(element_type, tuple(array.shape))
                    out[name] = TensorInfo(name, ort_name_of_onnx_type(element_type), tuple(array.shape))
            return
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get(node.domain or "ai.onnx", 1), node.domain)
            inferred = shape_inference.infer_node_outputs(
                schema,
                node,
                {name: types[name] for name in node.input if name in types},
                {name: _value_proto(name, values[name], protos) for name in node.input if name in values},
                opset_imports=list(light.opset_import),
            )
        except Exception:  # an op without a schema (contrib domains) or one inference rejects
            return
        for name, type_proto in inferred.items():
            types[name] = type_proto
            value = helper.make_value_info(name, type_proto)
            info = _shape_of(value)
            if name not in out or any(d < 0 for d in out[name].shape):
                out[name] = info

    for index, node in enumerate(light.graph.node):
        visit(index, node, cache=True)
    return out


def _taken_branch(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> onnx.GraphProto:
    """The branch an ``If`` node whose condition value is known takes."""
    condition = bool(np.asarray(values[node.input[0]]).reshape(-1)[0])
    wanted = "then_branch" if condition else "else_branch"
    return helper.get_attribute_value(next(a for a in node.attribute if a.name == wanted))


@dataclass
class GraphStructure:
    """What :func:`prepare` reads off a graph that no input shape changes: the copy without large
    initializer values (nodes named), producers and consumers, constants and folded nodes. Views
    at several batch sizes share it; only shapes are inferred again for each (see :meth:`view`).

    ``matches`` is for callers that match patterns (pattern key -> node groups; matching reads
    only the structure) and ``evaluations`` memoises the constant subgraphs' evaluations."""

    light: onnx.ModelProto
    symbolic_inputs: list[int]  # inputs of ``light`` whose leading dimension is not a number
    nodes: list[onnx.NodeProto]
    initializer_tensors: dict[str, TensorInfo]
    producer: dict[str, tuple[int, int]]
    consumers: dict[str, list[tuple[int, int]]]
    constant: set[str]
    folded: set[int]
    initializers: set[str]
    graph_inputs: list[str]
    graph_outputs: set[str]
    by_op: dict[str, list[int]]
    attributes: dict[int, dict[str, Any]] = field(default_factory=dict)
    attribute_texts: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    matches: dict[str, list[list[int]]] = field(default_factory=dict)
    evaluations: dict[tuple[Any, ...], list | None] = field(default_factory=dict)
    evaluators: dict[int, Any] = field(default_factory=dict)
    value_protos: dict[str, tuple[np.ndarray, onnx.TensorProto]] = field(default_factory=dict)

    @classmethod
    def of(cls, model: onnx.ModelProto, batch_size: int | None = None) -> GraphStructure:
        """The structure of ``model`` (not modified); ``batch_size`` as :func:`prepare` takes it."""
        light = _light_copy(model, batch_size)
        name_all_nodes(light)
        n_inputs = len([i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}])
        symbolic = [
            i
            for i, value in enumerate(light.graph.input[:n_inputs])
            if value.type.tensor_type.shape.dim and not value.type.tensor_type.shape.dim[0].dim_value
        ]
        initializers = {init.name for init in model.graph.initializer}
        initializer_tensors = {
            init.name: TensorInfo(init.name, ort_name_of_onnx_type(init.data_type), tuple(init.dims))
            for init in model.graph.initializer
        }
        nodes = list(light.graph.node)
        producer: dict[str, tuple[int, int]] = {}
        for index, node in enumerate(nodes):
            for slot, name in enumerate(node.output):
                if name:
                    producer[name] = (index, slot)
        constant = set(initializers)
        folded: set[int] = set()
        for index, node in enumerate(nodes):
            inputs = [name for name in node.input if name]
            if node.op_type in SHAPE_OP_TYPES or node.op_type == "Constant" or all(n in constant for n in inputs):
                folded.add(index)
                constant.update(o for o in node.output if o)
        consumers: dict[str, list[tuple[int, int]]] = defaultdict(list)
        by_op: dict[str, list[int]] = defaultdict(list)
        for index, node in enumerate(nodes):
            if index in folded:
                continue
            by_op[node.op_type].append(index)
            for slot, name in enumerate(node.input):
                if name:
                    consumers[name].append((index, slot))
        return cls(
            light=light,
            symbolic_inputs=symbolic,
            nodes=nodes,
            initializer_tensors=initializer_tensors,
            producer=producer,
            consumers=dict(consumers),
            constant=constant,
            folded=folded,
            initializers=initializers,
            graph_inputs=[i.name for i in model.graph.input if i.name not in initializers],
            graph_outputs={o.name for o in model.graph.output},
            by_op=dict(by_op),
        )

    def view(self, batch_size: int | None = None) -> GraphView:
        """The graph view with every tensor's shape inferred, the inputs' symbolic leading
        dimensions set to ``batch_size`` first when given (as ``BatchedModel.at`` sets them).

        Raises:
            HaseError: ONNX shape inference rejects the model.
        """
        if batch_size is not None:
            for index in self.symbolic_inputs:
                self.light.graph.input[index].type.tensor_type.shape.dim[0].dim_value = batch_size
        tensors = _infer(self.light)
        if any(any(d < 0 for d in t.shape) for t in tensors.values()):
            tensors.update(_fold_and_infer(self.light, tensors, self.evaluations, self.evaluators, self.value_protos))
        tensors.update(self.initializer_tensors)
        return GraphView(
            nodes=self.nodes,
            tensors=tensors,
            producer=self.producer,
            consumers=self.consumers,
            constant=self.constant,
            folded=self.folded,
            initializers=self.initializers,
            graph_inputs=self.graph_inputs,
            graph_outputs=self.graph_outputs,
            by_op=self.by_op,
            _attributes=self.attributes,
            _attribute_texts=self.attribute_texts,
            structure=self,
        )


def prepare(model: onnx.ModelProto, batch_size: int | None = None) -> GraphView:
    """Name every node as the analysis does, infer every tensor's shape, and mark folded nodes.

    Args:
        model: the exported model (not modified).
        batch_size: when given, the first input's leading dimension is set to it first (for a
            model exported with a dynamic batch axis).

    Returns:
        The graph view.

    Raises:
        HaseError: ONNX shape inference rejects the model.
    """
    return GraphStructure.of(model, batch_size).view()


# Ops whose two inputs may be swapped: a pattern lists their inputs in a canonical order (ops of
# the pattern first), so Add(skip, conv) and Add(conv, skip) are one pattern.
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "And", "Or", "Equal"})


def input_order(view: GraphView, group: list[int], k: int) -> list[int]:
    """The input slots of the group's ``k``-th op in pattern order (canonical for commutative ops)."""
    node = view.nodes[group[k]]
    slots = list(range(len(node.input)))
    if node.op_type not in COMMUTATIVE or len(slots) != 2 or node.domain:
        return slots
    members = {n: i for i, n in enumerate(group)}

    def rank(slot: int) -> tuple[int, int, int]:
        name = node.input[slot]
        source = view.producer.get(name)
        if source is not None and source[0] in members:
            return (0, members[source[0]], source[1])
        return (2, 0, 0) if name in view.constant else (1, 0, 0)

    return sorted(slots, key=rank)


def signature(view: GraphView, group: list[int]) -> list[dict[str, Any]]:
    """The pattern of ``group`` (node indices, in pattern order)."""
    position = {node: k for k, node in enumerate(group)}
    labels: dict[str, int] = {}
    pattern = []
    for k, node_index in enumerate(group):
        node = view.nodes[node_index]
        inputs: list[list[Any]] = []
        for name in [node.input[slot] for slot in input_order(view, group, k)]:
            if not name:
                inputs.append(["none"])
            elif name in view.producer and view.producer[name][0] in position:
                source, slot = view.producer[name]
                inputs.append(["node", position[source], slot])
            elif name in view.constant:
                inputs.append(["const"])
            else:
                inputs.append(["ext", labels.setdefault(name, len(labels))])
        internal = []
        for name in node.output:
            readers = view.consumers.get(name, [])
            internal.append(
                bool(name)
                and bool(readers)
                and name not in view.graph_outputs
                and all(reader in position for reader, _ in readers)
            )
        pattern.append(
            {
                "op": node.op_type,
                "domain": node.domain,
                "inputs": inputs,
                "n_outputs": len(node.output),
                "internal": internal,
            }
        )
    return pattern


def pattern_key(pattern: list[dict[str, Any]]) -> str:
    return json.dumps(pattern, sort_keys=True, separators=(",", ":"))


def _plan(pattern: list[dict[str, Any]]) -> list[tuple[int, int, str, int, int]] | None:
    """Steps that reach every pattern op from op 0: (new op, known op, how, slot, other slot).

    ``consumer``: the new op reads output ``other`` of the known op at input ``slot``;
    ``producer``: the new op writes (output ``other``) the known op's input ``slot``;
    ``sibling``: the new op's input ``slot`` is the same outside tensor as the known op's ``other``.
    None when the pattern is not connected that way.
    """
    links: list[tuple[int, int, str, int, int]] = []
    ext_first: dict[int, tuple[int, int]] = {}
    for k, op in enumerate(pattern):
        for slot, source in enumerate(op["inputs"]):
            if source[0] == "node":
                links.append((k, source[1], "consumer", slot, source[2]))
                links.append((source[1], k, "producer", source[2], slot))
            elif source[0] == "ext":
                if source[1] in ext_first:
                    other_k, other_slot = ext_first[source[1]]
                    links.append((k, other_k, "sibling", slot, other_slot))
                    links.append((other_k, k, "sibling", other_slot, slot))
                else:
                    ext_first[source[1]] = (k, slot)
    known = {0}
    steps = []
    while len(known) < len(pattern):
        step = next((link for link in links if link[0] not in known and link[1] in known), None)
        if step is None:
            return None
        # For "producer" the slots are stored as (new op's output, known op's input): swap to (known input, new output).
        new, old, how, a, b = step
        steps.append((new, old, how, b, a) if how == "producer" else step)
        known.add(new)
    return steps


class Matcher:
    """Finds every occurrence of one pattern in a graph view."""

    def __init__(self, pattern: list[dict[str, Any]]) -> None:
        self.pattern = pattern
        self.key = pattern_key(pattern)
        self.steps = _plan(pattern)

    def _fits(self, view: GraphView, node_index: int, k: int) -> bool:
        node = view.nodes[node_index]
        op = self.pattern[k]
        return (
            node_index not in view.folded
            and node.op_type == op["op"]
            and node.domain == op["domain"]
            and len(node.input) == len(op["inputs"])
            and len(node.output) == op["n_outputs"]
        )

    def matches(self, view: GraphView, anchors: list[int] | None = None) -> list[list[int]]:
        """Node groups (in pattern order) whose pattern equals this one."""
        if self.steps is None:
            return []
        first = self.pattern[0]["op"]
        found = []
        for anchor in anchors if anchors is not None else view.by_op.get(first, []):
            if not self._fits(view, anchor, 0):
                continue
            assignment = [-1] * len(self.pattern)
            assignment[0] = anchor
            found.extend(self._extend(view, assignment, 0))
        return found

    def _extend(self, view: GraphView, assignment: list[int], step_index: int) -> list[list[int]]:
        if step_index == len(self.steps or []):
            return [list(assignment)] if pattern_key(signature(view, assignment)) == self.key else []
        new, old, how, slot, other = (self.steps or [])[step_index]
        known = view.nodes[assignment[old]]
        candidates: list[int] = []
        any_slot = self.pattern[new]["op"] in COMMUTATIVE
        if how == "consumer":
            name = known.output[other] if other < len(known.output) else ""
            candidates = [c for c, s in view.consumers.get(name, []) if s == slot or any_slot]
        elif how == "producer":
            known_slots = input_order(view, assignment, old) if self.pattern[old]["op"] in COMMUTATIVE else None
            actual = known_slots[slot] if known_slots is not None and slot < len(known_slots) else slot
            name = known.input[actual] if actual < len(known.input) else ""
            if name in view.producer and view.producer[name][1] == other:
                candidates = [view.producer[name][0]]
        else:
            known_slots = input_order(view, assignment, old) if self.pattern[old]["op"] in COMMUTATIVE else None
            actual = known_slots[other] if known_slots is not None and other < len(known_slots) else other
            name = known.input[actual] if actual < len(known.input) else ""
            candidates = [c for c, s in view.consumers.get(name, []) if s == slot or any_slot]
        out = []
        for candidate in candidates:
            if candidate in assignment or not self._fits(view, candidate, new):
                continue
            assignment[new] = candidate
            out.extend(self._extend(view, assignment, step_index + 1))
            assignment[new] = -1
        return out
