"""Which original ops each node of ORT's optimized graph absorbed.

ORT renames nodes and tensors when it optimizes (NCHWc outputs become ``reorder_token_N``; a fused
Conv+Relu may carry the Conv's name), so names cannot be trusted. Instead both graphs are run on the
same random input and every float tensor gets a *value fingerprint* (sum, sum of magnitudes, sum of
squares) that does not change with layout (NCHWc blocking, zero channel padding, permutations).
An optimized tensor is then identified with the original tensor holding the same values, and an
optimized node absorbed exactly the original ops that lie strictly between the original
counterparts of its inputs and of its outputs.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from hase_dagster.analysis.graph import OptimizedGraph, OptimizedNode, name_all_nodes

if TYPE_CHECKING:  # imported where sessions are made: family_name's readers need no ORT
    import onnxruntime as ort

    from hase_dagster.core.config import OrtOptions
    from hase_dagster.core.ort_runtime import EpName

# Ops that compute nothing at inference time: absorbed, but left out of family names.
NO_OP_TYPES = frozenset({"Identity", "Dropout"})
# Exporters decompose some functions at older opsets; a family is named after the function.
DECOMPOSITIONS: dict[tuple[str, ...], str] = {("Div", "Erf", "Add", "Mul", "Mul"): "Gelu"}
# Pure view changes: absorbed into a kernel they cost nothing, so they stay out of its name.
VIEW_OP_TYPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
# Shape-only ops are folded away when shapes are static.
SHAPE_OP_TYPES = frozenset({"Shape", "Size"})
# Tensors exposed per fingerprint session. Every chunk is a new session (on CUDA a new cuDNN
# algorithm search), so chunks are large where the host has the memory: at batch 64 on the H100,
# 512 MB chunks made the catalog take about a minute per CNN.
FINGERPRINT_CHUNK_BYTES: dict[str, int] = {"cpu": 512 * 1024**2, "cuda": 4 * 1024**3}
# Relative tolerance between the same values computed by fused and unfused fp32 kernels
# (TF32 is off in fingerprint runs). A bias of 0.1 shifts the sum of squares by a few percent.
TOLERANCE: dict[str, float] = {"cpu": 1e-3, "cuda": 1e-3}


@dataclass(frozen=True)
class OriginalOp:
    """A node of the model as exported, before ORT optimized it."""

    index: int
    name: str
    op_type: str


@dataclass
class FusionMap:
    """For every optimized node: the original ops it absorbed, in original graph order."""

    absorbed: dict[str, list[OriginalOp]]
    folded: list[OriginalOp] = field(default_factory=list)
    unmapped: list[OriginalOp] = field(default_factory=list)
    # How many optimized float tensors found an original with the same values (a health measure).
    matched_tensors: int = 0
    fingerprinted_tensors: int = 0
    perturbed_twin: bool = False

    def to_dict(self) -> dict[str, Any]:
        ops = lambda items: [[op.index, op.name, op.op_type] for op in items]  # noqa: E731
        return {
            "absorbed": {name: ops(items) for name, items in self.absorbed.items()},
            "folded": ops(self.folded),
            "unmapped": ops(self.unmapped),
            "matched_tensors": self.matched_tensors,
            "fingerprinted_tensors": self.fingerprinted_tensors,
            "perturbed_twin": self.perturbed_twin,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FusionMap:
        ops = lambda items: [OriginalOp(int(i), str(n), str(t)) for i, n, t in items]  # noqa: E731
        return cls(
            absorbed={name: ops(items) for name, items in data["absorbed"].items()},
            folded=ops(data["folded"]),
            unmapped=ops(data["unmapped"]),
            matched_tensors=int(data["matched_tensors"]),
            fingerprinted_tensors=int(data["fingerprinted_tensors"]),
            perturbed_twin=bool(data["perturbed_twin"]),
        )

    def family(self, node: OptimizedNode) -> str:
        """Canonical family name: the absorbed original op types in order, or the node's own op
        type when it has no original counterpart (layout reorders, copies ORT inserted)."""
        return family_name([op.op_type for op in self.absorbed.get(node.name, [])], node.op_type)


def family_name(original_op_types: list[str], fallback: str) -> str:
    """Join op types with ``_`` after dropping no-ops and view changes and collapsing known
    decompositions; ``fallback`` (the optimized node's own op type) when nothing is left."""
    types = [t for t in original_op_types if t not in NO_OP_TYPES and t not in VIEW_OP_TYPES]
    for pattern, name in DECOMPOSITIONS.items():
        width = len(pattern)
        i = 0
        while i + width <= len(types):
            if tuple(types[i : i + width]) == pattern:
                types[i : i + width] = [name]
            i += 1
    return "_".join(types) if types else fallback


def _fingerprint(values: np.ndarray) -> np.ndarray:
    """Power sums of the values: unchanged by layout, permutation and zero padding, and (with
    five of them) distinct even between same-shaped tensors of look-alike layers."""
    flat = values.astype(np.float64, copy=False).ravel()
    magnitude = np.abs(flat)
    square = flat * flat
    return np.array([flat.sum(), magnitude.sum(), square.sum(), (square * flat).sum(), (square * square).sum()])


def _elem_type_name(elem_type: int) -> str:
    return helper.tensor_dtype_to_np_dtype(elem_type).name


def _float_tensor_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Float32 tensors of a standard-ops model and their inferred shapes (() when unknown)."""
    inferred = shape_inference.infer_shapes(model)
    shapes: dict[str, tuple[int, ...]] = {}
    for info in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tensor_type = info.type.tensor_type
        if _elem_type_name(tensor_type.elem_type) != "float32":
            continue
        dims = tuple(d.dim_value for d in tensor_type.shape.dim)
        shapes[info.name] = dims if dims and all(dims) else ()
    return shapes


def _bytes(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) * 4 if shape else 0


def fold_constant_nodes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with every node whose inputs are all constant computed once on the CPU EP and
    replaced by initializers, as ORT's constant folding does before it creates any kernel.

    An unoptimized session keeps such nodes, and an EP may refuse one that folding would have
    removed: the CUDA EP rejects training-mode BatchNormalization, which timm's weight-standardised
    convolutions (NFNets) apply to their constant weights.

    Returns:
        The folded model (the input itself when nothing is constant) and every folded node's
        outputs by name.
    """
    from hase_dagster.core.ort_runtime import make_session

    inputs = {value.name for value in model.graph.input}
    constant = {init.name for init in model.graph.initializer if init.name not in inputs}
    folded_nodes = []
    folded_indices: set[int] = set()  # by position: nodes may be unnamed
    for index, node in enumerate(model.graph.node):  # ONNX graphs are stored in topological order
        if node.domain not in ("", "ai.onnx") or node.op_type.startswith("Random"):
            continue
        if all(not name or name in constant for name in node.input):
            folded_nodes.append(node)
            folded_indices.add(index)
            constant.update(name for name in node.output if name)
    if not folded_nodes:
        return model, {}
    outputs = [name for node in folded_nodes for name in node.output if name]
    needed = {name for node in folded_nodes for name in node.input if name}
    constants = helper.make_graph(
        folded_nodes,
        "constants",
        [],
        [onnx.ValueInfoProto(name=name) for name in outputs],
        [init for init in model.graph.initializer if init.name in needed],
    )
    sub = helper.make_model(constants, opset_imports=model.opset_import, ir_version=model.ir_version)
    session = make_session(sub.SerializeToString(), "cpu", level="disable")
    values = dict(zip(outputs, session.run(outputs, {})))
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    kept = [node for index, node in enumerate(folded.graph.node) if index not in folded_indices]
    del folded.graph.node[:]
    folded.graph.node.extend(kept)
    used = {name for node in kept for name in node.input} | {value.name for value in folded.graph.output}
    folded.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(values[name]), name) for name in outputs if name in used
    )
    return folded, values


def run_fingerprints(
    model: onnx.ModelProto,
    tensors: dict[str, int],
    ep: EpName,
    feeds_seed: int = 0,
    options: OrtOptions | None = None,
) -> dict[str, np.ndarray]:
    """Fingerprints of ``tensors`` (name -> bytes) from running ``model`` unoptimized on ``ep``.

    Tensors are exposed as extra graph outputs a chunk at a time, so memory stays bounded. When
    ``ep`` cannot load the unoptimized model, its constant nodes are folded first
    (:func:`fold_constant_nodes`) and their tensors fingerprinted from the folded values.
    """
    from hase_dagster.core.errors import ModelLoadError
    from hase_dagster.core.ort_runtime import make_session, quick_search, random_inputs

    existing_outputs = {o.name for o in model.graph.output}
    chunks: list[list[str]] = [[]]
    used = 0
    for name, size in tensors.items():
        if chunks[-1] and used + size > FINGERPRINT_CHUNK_BYTES[ep]:
            chunks.append([])
            used = 0
        chunks[-1].append(name)
        used += size
    fingerprints: dict[str, np.ndarray] = {}
    source: onnx.ModelProto = model
    folded_values: dict[str, np.ndarray] = {}

    def probe_session(names: list[str]) -> ort.InferenceSession:
        probe = onnx.ModelProto()
        probe.CopyFrom(source)
        for name in names:
            if name not in existing_outputs and name not in folded_values:
                probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
        return make_session(probe.SerializeToString(), ep, quick_search(options), level="disable", exact=True)

    for chunk in chunks:
        try:
            session = probe_session(chunk)
        except ModelLoadError:
            if source is not model:
                raise
            source, folded_values = fold_constant_nodes(model)
            if not folded_values:
                raise
            session = probe_session(chunk)
        names = [o.name for o in session.get_outputs()]
        results = session.run(names, random_inputs(session, feeds_seed))
        for name, value in zip(names, results):
            if name in tensors or name in existing_outputs:
                fingerprints[name] = _fingerprint(np.asarray(value))
    for name, value in folded_values.items():
        if name in tensors:
            fingerprints[name] = _fingerprint(np.asarray(value))
    return fingerprints


class _OriginalGraph:
    """The exported graph as a DAG of nodes, with the tensors each produces and consumes."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.nodes = list(model.graph.node)
        self.order = {node.name: i for i, node in enumerate(self.nodes)}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        for i, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producer[name] = i
            for name in node.input:
                if name:
                    self.consumers[name].append(i)
        import networkx as nx  # here, not at import: static detection and prediction import this module

        self.dag = nx.DiGraph()
        self.dag.add_nodes_from(range(len(self.nodes)))
        for i, node in enumerate(self.nodes):
            for name in node.input:
                if name in self.producer:
                    self.dag.add_edge(self.producer[name], i)
        self.folded = self._constant_nodes()

    def _constant_nodes(self) -> set[int]:
        """Nodes whose outputs are known before any input arrives: ORT folds them away."""
        import networkx as nx

        constant = {init.name for init in self.model.graph.initializer}
        folded: set[int] = set()
        for i in nx.topological_sort(self.dag):
            node = self.nodes[i]
            inputs = [name for name in node.input if name]
            if node.op_type in SHAPE_OP_TYPES or node.op_type == "Constant" or all(n in constant for n in inputs):
                folded.add(i)
                constant.update(o for o in node.output if o)
        return folded

    def position(self, tensor: str) -> int:
        """Topological position of a tensor's producer (-1 for graph inputs and initializers)."""
        return self.producer.get(tensor, -1)

    def ancestors(self, nodes: set[int]) -> set[int]:
        import networkx as nx

        out = set(nodes)
        for node in nodes:
            out |= nx.ancestors(self.dag, node)
        return out

    def descendants(self, nodes: set[int]) -> set[int]:
        import networkx as nx

        out = set(nodes)
        for node in nodes:
            out |= nx.descendants(self.dag, node)
        return out

    def op(self, index: int) -> OriginalOp:
        return OriginalOp(index, self.nodes[index].name, self.nodes[index].op_type)


def _relative_distance(table: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Largest relative difference over the power sums, each against its own scale: odd sums
    (which can cancel to ~0) against the matching absolute scale."""
    if not len(table):
        return np.zeros(0)
    scale_1 = np.maximum(table[:, 1], abs(fp[1])) + 1e-12  # sum |x| bounds |sum x|
    scale_2 = np.maximum(table[:, 2], fp[2]) + 1e-12
    scale_4 = np.maximum(table[:, 4], fp[4]) + 1e-12
    scale_3 = np.sqrt(scale_2 * scale_4)  # Cauchy-Schwarz bound of |sum x^3|
    return np.max(
        np.stack(
            [
                np.abs(table[:, 0] - fp[0]) / scale_1,
                np.abs(table[:, 1] - fp[1]) / scale_1,
                np.abs(table[:, 2] - fp[2]) / scale_2,
                np.abs(table[:, 3] - fp[3]) / scale_3,
                np.abs(table[:, 4] - fp[4]) / scale_4,
            ]
        ),
        axis=0,
    )


def _match_tensors(
    optimized_fp: dict[str, np.ndarray],
    original_fp: dict[str, np.ndarray],
    optimized_shapes: dict[str, tuple[int, ...]],
    original_shapes: dict[str, tuple[int, ...]],
    original: _OriginalGraph,
    tolerance: float,
) -> dict[str, str]:
    """Optimized tensor name -> original tensor with the same values.

    Ties (a Reshape, Flatten or Transpose keeps its input's values) go to the same name, then to
    a tensor of the same shape, then to the earliest original tensor.
    """
    names = list(original_fp)
    table = np.array([original_fp[n] for n in names]) if names else np.zeros((0, 5))
    position = {name: i for i, name in enumerate(names)}
    matches: dict[str, str] = {}
    for name, fp in optimized_fp.items():
        distance = _relative_distance(table, fp)
        candidates = [names[i] for i in np.flatnonzero(distance <= tolerance)]
        if not candidates:
            padded = _constant_padding_match(
                fp, optimized_shapes.get(name, ()), original_fp, original_shapes, tolerance
            )
            if padded is not None:
                matches[name] = padded
            continue
        stripped = name.removesuffix("_nchwc")
        if stripped in candidates:
            matches[name] = stripped
            continue
        shape = optimized_shapes.get(name, ())
        pool = [c for c in candidates if shape and original_shapes.get(c) == shape] or candidates
        by_name = {c: distance[position[c]] for c in pool}
        best = min(by_name.values())
        # Equal values (a view or a transpose of one tensor) tie: take the earliest of them.
        closest = [c for c, d in by_name.items() if d <= best + 1e-9]
        matches[name] = min(closest, key=original.position)
    return matches


def _constant_padding_match(
    fp: np.ndarray,
    shape: tuple[int, ...],
    original_fp: dict[str, np.ndarray],
    original_shapes: dict[str, tuple[int, ...]],
    tolerance: float,
) -> str | None:
    """The original tensor an NCHWc tensor holds when its padding channels are not zero.

    ORT's NCHWc layout pads the channels to its block; a fused activation with f(0) != 0 (Sigmoid: 0.5) fills the
    padding with f(0), which shifts every power sum. An original tensor of the same shape but fewer channels
    matches when one value v explains the shift of all five sums (v from the first, the rest checked).

    Args:
        fp: the NCHWc tensor's fingerprint.
        shape: its shape (channels padded).
        original_fp: fingerprints of the original graph's tensors.
        original_shapes: their shapes.
        tolerance: the relative distance a match may have.

    Returns:
        The original tensor's name, or None when none matches.
    """
    if len(shape) < 2:
        return None
    elements = int(np.prod(shape))
    for candidate, candidate_shape in original_shapes.items():
        if (
            candidate not in original_fp
            or len(candidate_shape) != len(shape)
            or candidate_shape[0] != shape[0]
            or candidate_shape[2:] != shape[2:]
            or not 0 < candidate_shape[1] < shape[1]
        ):
            continue
        count = elements - int(np.prod(candidate_shape))
        value = (fp[0] - original_fp[candidate][0]) / count
        if abs(value) < 1e-6:
            continue  # zero padding: the plain match would have found it
        shift = count * np.array([value, abs(value), value**2, value**3, value**4])
        if _relative_distance(original_fp[candidate][None, :], fp - shift)[0] <= tolerance:
            return candidate
    return None


def perturb_degenerate_initializers(model: onnx.ModelProto, seed: int = 0) -> bool:
    """Add noise to every constant-valued float initializer of more than one element, in place.

    Untrained models have all-zero biases and all-one norms; a zero bias makes ``MatMul`` and
    ``MatMul+Add`` hold the same values, so the fingerprints could not tell them apart. Scalars
    are left alone: fusions such as Gelu's check their values.
    """
    rng = np.random.default_rng(seed)
    changed = False
    for init in model.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT or int(np.prod(init.dims)) <= 1:
            continue
        values = numpy_helper.to_array(init)
        if values.size and np.all(values == values.flat[0]):
            scale = 0.1 * max(abs(float(values.flat[0])), 1.0)
            noisy = values + rng.normal(0.0, scale, values.shape).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(noisy, init.name))
            changed = True
    return changed


def _adopt_names(twin: onnx.ModelProto, real: onnx.ModelProto) -> bool:
    """Give ``twin``'s nodes and tensors the names of ``real``'s, position by position, when both
    have the same ops in the same order (ORT may number generated names differently); else False."""
    ops = lambda m: [(n.op_type, n.domain, len(n.input), len(n.output)) for n in m.graph.node]  # noqa: E731
    if ops(twin) != ops(real):
        return False
    renames: dict[str, str] = {}
    for twin_node, real_node in zip(twin.graph.node, real.graph.node):
        for old, new in zip(
            list(twin_node.input) + list(twin_node.output), list(real_node.input) + list(real_node.output)
        ):
            if renames.setdefault(old, new) != new:
                return False
    for twin_node, real_node in zip(twin.graph.node, real.graph.node):
        twin_node.name = real_node.name
        twin_node.input[:] = [renames.get(n, n) for n in twin_node.input]
        twin_node.output[:] = [renames.get(n, n) for n in twin_node.output]
    for init in twin.graph.initializer:
        init.name = renames.get(init.name, init.name)
    for value in list(twin.graph.input) + list(twin.graph.output):
        value.name = renames.get(value.name, value.name)
    return True


def _fingerprint_twin(
    model: onnx.ModelProto, optimized: OptimizedGraph, options: OrtOptions | None
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The original and optimized models to fingerprint: a twin with degenerate weights
    perturbed when ORT optimizes it into the same graph, else the models themselves."""
    from hase_dagster.core.ort_runtime import make_session

    optimized_model = onnx.load(str(optimized.optimized_path))
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    if not perturb_degenerate_initializers(twin):
        return model, optimized_model
    with tempfile.TemporaryDirectory() as tmp:
        twin_optimized_path = Path(tmp) / "twin.onnx"
        make_session(
            twin.SerializeToString(), optimized.ep, options, level="all", optimized_model_path=twin_optimized_path
        )
        twin_optimized = onnx.load(str(twin_optimized_path))
    if _adopt_names(twin_optimized, optimized_model):
        return twin, twin_optimized
    return model, optimized_model


def map_fusions(
    source_model: str | Path,
    optimized: OptimizedGraph,
    options: OrtOptions | None = None,
) -> FusionMap:
    """Map every node of ``optimized`` to the original ops of ``source_model`` it absorbed."""
    model = onnx.load(str(source_model))
    name_all_nodes(model)
    twin_model, optimized_model = _fingerprint_twin(model, optimized, options)
    perturbed = twin_model is not model
    model = twin_model
    original = _OriginalGraph(model)
    original_shapes = _float_tensor_shapes(model)
    graph_inputs = {i.name for i in model.graph.input}
    original_sizes = {
        name: _bytes(shape)
        for name, shape in original_shapes.items()
        if name in graph_inputs or (name in original.producer and original.producer[name] not in original.folded)
    }
    original_fp = run_fingerprints(model, original_sizes, optimized.ep, options=options)

    optimized_shapes = {
        info.name: info.shape
        for node in optimized.nodes
        for info in node.inputs + node.outputs
        if info.dtype == "float" and info.name not in node.initializer_inputs
    }
    optimized_sizes = {name: _bytes(shape) for name, shape in optimized_shapes.items()}
    optimized_fp = run_fingerprints(optimized_model, optimized_sizes, optimized.ep, options=options)
    matches = _match_tensors(
        optimized_fp, original_fp, optimized_shapes, original_shapes, original, TOLERANCE[optimized.ep]
    )

    claimed: set[int] = set()
    absorbed: dict[str, list[OriginalOp]] = {}
    for node in optimized.nodes:
        region = _region(node, matches, original) - claimed - original.folded
        claimed |= region
        absorbed[node.name] = [original.op(i) for i in sorted(region)]
    _attach_renamed_singletons(optimized.nodes, absorbed, original, claimed)
    compute_nodes = set(range(len(original.nodes))) - original.folded
    unmapped = [original.op(i) for i in sorted(compute_nodes - claimed) if original.nodes[i].op_type not in NO_OP_TYPES]
    return FusionMap(
        absorbed=absorbed,
        folded=[original.op(i) for i in sorted(original.folded)],
        unmapped=unmapped,
        matched_tensors=len(matches),
        fingerprinted_tensors=len(optimized_fp),
        perturbed_twin=perturbed,
    )


def _region(node: OptimizedNode, matches: dict[str, str], original: _OriginalGraph) -> set[int]:
    """Original nodes between the original counterparts of ``node``'s inputs and outputs."""
    weights = set(node.initializer_inputs)
    inputs = {matches[t.name] for t in node.inputs if t.name in matches and t.name not in weights}
    outputs = {matches[t.name] for t in node.outputs if t.name in matches}
    output_producers = {original.producer[t] for t in outputs if t in original.producer}
    activations = [t for t in node.inputs if t.name not in weights]
    if not output_producers or (activations and not inputs):
        # Without both ends matched the region is unknown: claim nothing rather than guess.
        return set()
    input_consumers = {c for t in inputs for c in original.consumers.get(t, [])}
    input_producers = {original.producer[t] for t in inputs if t in original.producer}
    upstream = original.ancestors(output_producers)
    if input_consumers:
        upstream &= original.descendants(input_consumers)
    return upstream - original.ancestors(input_producers)


def _attach_renamed_singletons(
    nodes: list[OptimizedNode],
    absorbed: dict[str, list[OriginalOp]],
    original: _OriginalGraph,
    claimed: set[int],
) -> None:
    """An optimized node whose values matched nothing but whose op type equals an unclaimed
    original op of the same type (e.g. a renamed Reshape) is that op."""
    unclaimed_by_type: dict[str, list[int]] = defaultdict(list)
    for i in sorted(set(range(len(original.nodes))) - claimed - original.folded):
        unclaimed_by_type[original.nodes[i].op_type].append(i)
    for node in nodes:
        if absorbed[node.name] or node.domain or not unclaimed_by_type.get(node.op_type):
            continue
        index = unclaimed_by_type[node.op_type].pop(0)
        claimed.add(index)
        absorbed[node.name] = [original.op(index)]
