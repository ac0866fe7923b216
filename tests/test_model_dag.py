from pathlib import Path

import networkx as nx
import pytest

from hase_dagster.analysis.analyze import analyze_model
from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.model_dag import (
    build_dag,
    critical_path,
    critical_path_ms,
    load_dag,
    save_dag,
    sequential_latency,
)
from hase_dagster.core.errors import HaseError


def _kernel(order: int, name: str, inputs: list[str], outputs: list[str]) -> Kernel:
    tensor = lambda n: TensorInfo(n, "float", (1, 4))  # noqa: E731
    return Kernel(
        "v",
        "cpu",
        order,
        name,
        "Relu",
        "Relu",
        "",
        [],
        [],
        {},
        [tensor(n) for n in inputs],
        [tensor(n) for n in outputs],
    )


def test_diamond_dag_sequential_and_critical_path(tmp_path: Path) -> None:
    kernels = [
        _kernel(0, "a", ["x"], ["t1"]),
        _kernel(1, "b", ["t1"], ["t2"]),
        _kernel(2, "c", ["t1"], ["t3"]),
        _kernel(3, "d", ["t2", "t3"], ["y"]),
    ]
    dag = build_dag("v", "cpu", kernels)
    assert set(dag.edges) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
    cost = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}.__getitem__
    assert sequential_latency(dag, cost) == 9.0
    assert critical_path(dag, cost) == (7.0, ["a", "b", "d"])
    # Without networkx, in any order of the kernels, the same length; a cycle is refused.
    assert critical_path_ms(kernels[::-1], {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}) == 7.0
    with pytest.raises(HaseError, match="cycle"):
        critical_path_ms([_kernel(0, "a", ["t2"], ["t1"]), _kernel(1, "b", ["t1"], ["t2"])], {"a": 1.0, "b": 1.0})
    loaded = load_dag(save_dag(dag, tmp_path / "dag.json"))
    assert set(loaded.edges) == set(dag.edges) and loaded.graph["sequential_order"] == ["a", "b", "c", "d"]


def test_resnet18_dag_has_residual_branches(resnet18_onnx: Path, tmp_path: Path) -> None:
    analysis = analyze_model(resnet18_onnx, "cpu", tmp_path / "opt.onnx")
    dag = analysis.dag
    assert nx.is_weakly_connected(dag) and dag.number_of_nodes() == len(analysis.kernels)
    # The three downsample convolutions run beside the main path.
    unit = lambda node: 1.0  # noqa: E731
    length, path = critical_path(dag, unit)
    assert length == pytest.approx(sequential_latency(dag, unit) - 3)
    by_order = {k.node_name: 1.0 + k.order % 7 for k in analysis.kernels}
    assert critical_path_ms(analysis.kernels, by_order) == pytest.approx(critical_path(dag, by_order.__getitem__)[0])
    assert dag.graph["sequential_order"] == [k.node_name for k in sorted(analysis.kernels, key=lambda k: k.order)]
    assert all(dag.nodes[a]["order"] < dag.nodes[b]["order"] for a, b in dag.edges)
