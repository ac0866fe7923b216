"""A model variant as a DAG of kernels: which kernel feeds which, and how the DAG's latency combines.

With one CUDA stream or ORT's sequential executor, kernels run one after another in ORT's order,
so a model takes the sum of its kernels. Where branches may overlap (ORT's parallel executor),
the critical path, the longest chain of dependent kernels, bounds it from below.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.costs import tensor_bytes
from hase_dagster.core.errors import HaseError

if TYPE_CHECKING:  # imported where a DAG is built: a prediction needs only critical_path_ms
    import networkx as nx


def build_dag(variant_id: str, ep: str, kernels: list[Kernel]) -> nx.DiGraph:
    """Kernels as nodes (keyed by node name), tensors between them as edges."""
    import networkx as nx

    dag = nx.DiGraph(variant_id=variant_id, ep=ep)
    producer: dict[str, str] = {}
    for kernel in kernels:
        dag.add_node(
            kernel.node_name,
            order=kernel.order,
            family=kernel.family,
            instance_id=kernel.instance_id,
            flops=kernel.flops,
            in_graph_us=kernel.in_graph_us,
        )
        for tensor in kernel.outputs:
            producer[tensor.name] = kernel.node_name
    for kernel in kernels:
        for tensor in kernel.activations:
            source = producer.get(tensor.name)
            if source is not None and source != kernel.node_name:
                dag.add_edge(source, kernel.node_name, tensor=tensor.name, bytes=tensor_bytes(tensor))
    if not nx.is_directed_acyclic_graph(dag):
        raise ValueError(f"the kernel graph of {variant_id} has a cycle")
    dag.graph["sequential_order"] = sequential_order(dag)
    return dag


def sequential_order(dag: nx.DiGraph) -> list[str]:
    """The order ORT's sequential executor runs the kernels in (its node order)."""
    return sorted(dag.nodes, key=lambda n: dag.nodes[n]["order"])


def sequential_latency(dag: nx.DiGraph, latency: Callable[[str], float]) -> float:
    """Sum of kernel latencies: one stream, one kernel at a time."""
    return sum(latency(node) for node in dag.nodes)


def critical_path(dag: nx.DiGraph, latency: Callable[[str], float]) -> tuple[float, list[str]]:
    """Length and kernels of the longest dependent chain, when independent branches overlap."""
    import networkx as nx

    best: dict[str, tuple[float, str | None]] = {}
    for node in nx.topological_sort(dag):
        before = max(((best[p][0], p) for p in dag.predecessors(node)), default=(0.0, None))
        best[node] = (before[0] + latency(node), before[1])
    if not best:
        return 0.0, []
    end = max(best, key=lambda n: best[n][0])
    path: list[str] = []
    cursor: str | None = end
    while cursor is not None:
        path.append(cursor)
        cursor = best[cursor][1]
    return best[end][0], path[::-1]


def save_dag(dag: nx.DiGraph, path: str | os.PathLike[str]) -> Path:
    """Write the DAG as node-link JSON."""
    import networkx as nx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nx.node_link_data(dag, edges="edges"), indent=1, default=str))
    return path


def load_dag(path: str | os.PathLike[str]) -> nx.DiGraph:
    """Read a DAG written by :func:`save_dag`."""
    import networkx as nx

    data: dict[str, Any] = json.loads(Path(path).read_text())
    return nx.node_link_graph(data, edges="edges")


def critical_path_ms(kernels: list[Kernel], latency: Mapping[str, float]) -> float:
    """The length :func:`critical_path` gives for :func:`build_dag` of ``kernels`` with
    ``latency[node_name]`` per kernel, computed without building a networkx graph (a prediction
    pays neither its import nor its construction).

    Raises:
        HaseError: the kernels' tensors form a cycle (a faulty kernel list), so no path exists.
    """
    producer: dict[str, str] = {}
    for kernel in kernels:
        for tensor in kernel.outputs:
            producer[tensor.name] = kernel.node_name
    parents: dict[str, set[str]] = {kernel.node_name: set() for kernel in kernels}
    for kernel in kernels:
        for tensor in kernel.activations:
            source = producer.get(tensor.name)
            if source is not None and source != kernel.node_name:
                parents[kernel.node_name].add(source)
    children: dict[str, list[str]] = {node: [] for node in parents}
    for node, sources in parents.items():
        for source in sources:
            children[source].append(node)
    waiting = {node: len(sources) for node, sources in parents.items()}
    ready = [node for node, count in waiting.items() if count == 0]
    finish: dict[str, float] = {}
    while ready:
        node = ready.pop()
        finish[node] = max((finish[p] for p in parents[node]), default=0.0) + latency[node]
        for child in children[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(finish) != len(parents):
        stuck = sorted(node for node in parents if node not in finish)[:3]
        raise HaseError(f"the kernel graph has a cycle (through {stuck}): no critical path")
    return max(finish.values(), default=0.0)
