"""The graph ONNX Runtime really runs: optimize at ORT_ENABLE_ALL for one EP, then read every node.

Shapes come from ORT's own profiler (``input_type_shape`` / ``output_type_shape``), because ONNX
shape inference does not know contrib ops such as ``com.microsoft.nchwc.Conv``. The profile's
per-node times are kept as the in-graph time of each node.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

import onnx
from onnx import helper

from hase_dagster.core.dtypes import ort_name_of_onnx_type

if TYPE_CHECKING:  # imported where they run: TensorInfo's readers (static detection) need no ORT
    from hase_dagster.core.config import OrtOptions
    from hase_dagster.core.ort_runtime import EpName

PROFILE_RUNS = 3


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as ORT sees it: name, element type (e.g. ``float``) and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass
class OptimizedNode:
    """One node of the optimized graph, in ORT's execution order."""

    index: int
    name: str
    op_type: str
    domain: str
    attributes: dict[str, Any]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    initializer_inputs: list[str] = field(default_factory=list)
    in_graph_us: float | None = None
    provider: str = ""

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type


@dataclass
class OptimizedGraph:
    """The optimized model of one variant on one EP, with ORT's shapes for every node."""

    source_path: Path
    optimized_path: Path
    ep: EpName
    nodes: list[OptimizedNode]
    graph_inputs: list[str]
    graph_outputs: list[str]
    # From ORT's profile: do node executions ever overlap in time (parallel branches)?
    overlap: dict[str, int] = field(default_factory=dict)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this description as JSON (the ONNX file itself stays at ``optimized_path``)."""
        node = lambda n: {  # noqa: E731
            **{k: v for k, v in vars(n).items() if k not in ("inputs", "outputs")},
            "inputs": [t.to_dict() for t in n.inputs],
            "outputs": [t.to_dict() for t in n.outputs],
        }
        document = {
            "source_path": str(self.source_path),
            "optimized_path": str(self.optimized_path),
            "ep": self.ep,
            "graph_inputs": self.graph_inputs,
            "graph_outputs": self.graph_outputs,
            "overlap": self.overlap,
            "nodes": [node(n) for n in self.nodes],
        }
        path = Path(path)
        path.write_text(json.dumps(document, indent=1))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OptimizedGraph:
        """Read a description written by :meth:`save`."""
        document = json.loads(Path(path).read_text())
        tensor = lambda t: TensorInfo(t["name"], t["dtype"], tuple(t["shape"]))  # noqa: E731
        nodes = [
            OptimizedNode(
                **{**n, "inputs": [tensor(t) for t in n["inputs"]], "outputs": [tensor(t) for t in n["outputs"]]}
            )
            for n in document["nodes"]
        ]
        return cls(
            source_path=Path(document["source_path"]),
            optimized_path=Path(document["optimized_path"]),
            ep=document["ep"],
            nodes=nodes,
            graph_inputs=document["graph_inputs"],
            graph_outputs=document["graph_outputs"],
            overlap=document.get("overlap", {}),
        )


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as plain JSON-able values (tensors summarised by shape)."""
    values: dict[str, Any] = {}
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, onnx.TensorProto):
            value = {"tensor_shape": list(value.dims)}
        elif isinstance(value, list):
            value = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in value]
            if value and not isinstance(value[0], (int, float, str)):
                value = f"<{len(value)} {type(value[0]).__name__}>"
        elif not isinstance(value, (int, float, str)):
            value = f"<{type(value).__name__}>"
        values[attribute.name] = value
    return values


def name_all_nodes(model: onnx.ModelProto) -> None:
    """Give every node a unique name: the profiler reports nodes by name."""
    seen: set[str] = set()
    for index, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        while name in seen:
            name = f"{name}_{index}"
        node.name = name
        seen.add(name)


def _parse_type_shapes(entries: list[dict[str, list[int]]]) -> list[tuple[str, tuple[int, ...]]]:
    parsed = []
    for entry in entries:
        ((dtype, shape),) = entry.items()
        parsed.append((dtype, tuple(int(d) for d in shape)))
    return parsed


def read_profile(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Per node name: shapes and median kernel time (us) from an ORT profile JSON file (:func:`node_profile`)."""
    return node_profile(json.loads(Path(path).read_text()))


def node_profile(events: list[dict[str, Any]], skip_runs: int = 1) -> dict[str, dict[str, Any]]:
    """Per node name, in order of first execution: op type, provider, input and output shapes, and the median time
    (us) of its executions after the first ``skip_runs`` (kept all where it ran no more often).

    Args:
        events: an ORT profile's events (a Chrome trace's event list).
        skip_runs: executions of each node left out: the first runs include one-off allocations and searches.

    Returns:
        Node name to ``op_type``, ``provider``, ``inputs``, ``outputs``, ``median_us`` and ``executions`` (kept).
    """
    durations: dict[str, list[float]] = defaultdict(list)
    info: dict[str, dict[str, Any]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node_name = name[: -len("_kernel_time")]
        args = event.get("args", {})
        durations[node_name].append(float(event.get("dur", 0)))
        info[node_name] = {
            "op_type": args.get("op_name", ""),
            "inputs": _parse_type_shapes(args.get("input_type_shape", [])),
            "outputs": _parse_type_shapes(args.get("output_type_shape", [])),
            "provider": args.get("provider", ""),
        }
    for node_name, values in durations.items():
        kept = values[skip_runs:] if len(values) > skip_runs else values
        info[node_name]["median_us"] = median(kept)
        info[node_name]["executions"] = len(kept)
    return info


def profile_overlap(path: str | os.PathLike[str]) -> dict[str, int]:
    """How many node executions started before the previous one ended, in an ORT profile.

    Zero means ORT ran the nodes one after another (the sequential executor); then a model's time
    is the sum of its kernels. On CUDA these are host-side launch intervals on one stream.
    """
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in json.loads(Path(path).read_text())
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
    )
    overlapping = 0
    running_end = float("-inf")
    for start, end in spans:
        if start < running_end:
            overlapping += 1
        running_end = max(running_end, end)
    return {"node_executions": len(spans), "overlapping_executions": overlapping}


def optimize_and_profile(
    source: str | os.PathLike[str],
    optimized_path: str | os.PathLike[str],
    ep: EpName,
    options: OrtOptions | None = None,
) -> OptimizedGraph:
    """Optimize ``source`` with ORT_ENABLE_ALL on ``ep``, save it, and read every node's shapes.

    The saved graph is then run with optimizations disabled (it is already optimized) and ORT's
    profiler on, so shapes, providers and times are those of exactly the saved nodes.
    """
    from hase_dagster.core.ort_runtime import load_onnx, make_session, quick_search, random_inputs

    source = Path(source)
    optimized_path = Path(optimized_path)
    optimized_path.parent.mkdir(parents=True, exist_ok=True)
    load_onnx(source)  # a clear error for a file that is not ONNX
    partial = optimized_path.with_suffix(".partial.onnx")
    make_session(source, ep, options, level="all", optimized_model_path=partial)
    model = onnx.load(str(partial))
    partial.unlink()
    name_all_nodes(model)
    model.ir_version = min(model.ir_version, 10)
    onnx.save(model, str(optimized_path))
    with tempfile.TemporaryDirectory() as tmp:
        # Shapes and node order are wanted here, not speed: no exhaustive cuDNN search.
        session = make_session(
            optimized_path, ep, quick_search(options), level="disable", profile_prefix=Path(tmp) / "p"
        )
        feeds = random_inputs(session)
        for _ in range(PROFILE_RUNS):
            session.run(None, feeds)
        profile_file = session.end_profiling()
        profile = read_profile(profile_file)
        overlap = profile_overlap(profile_file)
        graph_inputs = {
            arg.name: TensorInfo(
                arg.name, arg.type.removeprefix("tensor(").removesuffix(")"), tuple(feeds[arg.name].shape)
            )
            for arg in session.get_inputs()
        }
    return OptimizedGraph(
        source_path=source,
        optimized_path=optimized_path,
        ep=ep,
        nodes=_nodes_with_shapes(model, profile, graph_inputs),
        graph_inputs=[i.name for i in model.graph.input],
        graph_outputs=[o.name for o in model.graph.output],
        overlap=overlap,
    )


def _tensor_table(
    model: onnx.ModelProto, profile: dict[str, dict[str, Any]], graph_inputs: dict[str, TensorInfo]
) -> dict[str, TensorInfo]:
    """Every tensor's type and shape: initializers from the model, node outputs from the profile.

    Node inputs are not read from the profile: ORT leaves pre-packed weights (MatMul, Gemm) out
    of ``input_type_shape``, so its list does not line up with the node's inputs.
    """
    table = dict(graph_inputs)
    for init in model.graph.initializer:
        table[init.name] = TensorInfo(init.name, ort_name_of_onnx_type(init.data_type), tuple(init.dims))
    for node in model.graph.node:
        seen = profile.get(node.name)
        outputs = [o for o in node.output if o]
        if seen is not None and len(seen["outputs"]) == len(outputs):
            for name, (dtype, shape) in zip(outputs, seen["outputs"]):
                table[name] = TensorInfo(name, dtype, shape)
    return table


def _nodes_with_shapes(
    model: onnx.ModelProto, profile: dict[str, dict[str, Any]], graph_inputs: dict[str, TensorInfo]
) -> list[OptimizedNode]:
    initializers = {init.name for init in model.graph.initializer}
    table = _tensor_table(model, profile, graph_inputs)
    unknown = lambda name: TensorInfo(name, "", ())  # noqa: E731 - ORT did not report it
    nodes = []
    for index, node in enumerate(model.graph.node):
        seen = profile.get(node.name)
        present_inputs = [name for name in node.input if name]
        nodes.append(
            OptimizedNode(
                index=index,
                name=node.name,
                op_type=node.op_type,
                domain=node.domain,
                attributes=attribute_values(node),
                inputs=[table.get(n) or unknown(n) for n in present_inputs],
                outputs=[table.get(n) or unknown(n) for n in node.output if n],
                initializer_inputs=[n for n in present_inputs if n in initializers],
                in_graph_us=None if seen is None else seen["median_us"],
                provider="" if seen is None else seen["provider"],
            )
        )
    return nodes
