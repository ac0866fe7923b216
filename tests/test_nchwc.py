"""ORT's NCHWc layout in CPU static detection (``analysis/nchwc_layout.py``): the rules on synthetic kernels at block
8, and a small network's reorders against this machine's ORT where it blocks NCHWc as the shipped cpu bundle's CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.kernel_agreement import kernel_key
from hase_dagster.analysis.nchwc_layout import NCHWC_DOMAIN, nchwc_layout
from hase_dagster.learn.bundles import read_bundle

REPO = Path(__file__).resolve().parents[1]
SIDE = 14


def _map(name: str, channels: int, side: int = SIDE) -> TensorInfo:
    return TensorInfo(name, "float", (1, channels, side, side))


def _conv(x: str, y: str, c_in: int, c_out: int, group: int = 1, family: str = "Conv") -> Kernel:
    """A 3x3 convolution kernel as static detection lists it (nodes named after their outputs)."""
    return Kernel(
        variant_id="v", ep="cpu", order=0, node_name=y, family=family, op_type="Conv", domain=NCHWC_DOMAIN,
        absorbed_ops=[y], absorbed_op_types=["Conv"], attributes={"group": group},
        inputs=[_map(x, c_in), TensorInfo(f"w_{y}", "float", (c_out, c_in // group, 3, 3)),
                TensorInfo(f"b_{y}", "float", (c_out,))],
        outputs=[_map(y, c_out)], weight_names=[f"w_{y}", f"b_{y}"],
    )  # fmt: skip


def _op(op_type: str, inputs: list[TensorInfo], output: TensorInfo, **attributes: object) -> Kernel:
    return Kernel(
        variant_id="v", ep="cpu", order=0, node_name=output.name, family=op_type, op_type=op_type, domain="",
        absorbed_ops=[output.name], absorbed_op_types=[op_type], attributes=dict(attributes), inputs=inputs,
        outputs=[output],
    )  # fmt: skip


def _summary(kernels: list[Kernel]) -> list[str]:
    """Each kernel as ``op:input shapes->output shapes`` (activations only)."""
    shapes = lambda ts: "+".join("x".join(map(str, t.shape[1:2])) for t in ts)  # noqa: E731
    return [
        f"{k.op_type}:{shapes([t for t in k.inputs if t.name not in k.weight_names])}->{shapes(k.outputs)}"
        for k in kernels
    ]


def test_a_chain_of_nchwc_convolutions_is_reordered_in_once_and_out_before_an_nchw_consumer() -> None:
    """Block 8: 12 channels read by a group-1 convolution are reordered in (padded to 16), a chain of convolutions
    (depthwise between) passes NCHWc tensors, a convolution of fewer input channels than the block reads NCHW, and an
    NCHW consumer (LeakyRelu) and the graph output get a ReorderOutput back to the original channels."""
    kernels = [
        _conv("x", "a", 12, 12),
        _conv("a", "b", 12, 12, group=12),
        _conv("b", "c", 12, 4),
        _conv("c", "d", 4, 12),
        _op("LeakyRelu", [_map("d", 12)], _map("y", 12)),
        _conv("d", "z", 12, 20),
    ]
    laid = nchwc_layout(kernels, 8, graph_outputs={"y", "z"})
    assert _summary(laid) == [
        "ReorderInput:12->16", "Conv:16->16", "Conv:16->16", "Conv:16->8", "ReorderOutput:8->4", "Conv:4->16",
        "ReorderOutput:16->12", "LeakyRelu:12->12", "Conv:16->24", "ReorderOutput:24->20",
    ]  # fmt: skip
    outputs = [k for k in laid if k.op_type == "ReorderOutput"]
    assert [k.attributes for k in outputs] == [{"channels_last": 0, "channels": c} for c in (4, 12, 20)]
    assert all(k.family == k.op_type and k.domain == NCHWC_DOMAIN for k in laid if k.op_type.startswith("Reorder"))
    assert [k.order for k in laid] == list(range(len(laid)))
    # The DAG holds: every kernel reads what an earlier one wrote (or the graph input).
    written = {"x"} | {f"{p}_{k.node_name}" for k in laid for p in ("w", "b")}
    for kernel in laid:
        assert all(t.name in written for t in kernel.inputs), kernel.node_name
        written |= {t.name for t in kernel.outputs}


def test_pools_unary_ops_and_sums_run_on_the_nchwc_tensor_where_ort_keeps_it() -> None:
    """Block 8: MaxPool of 16 channels runs as an nchwc op on the NCHWc tensor, of 12 it runs NCHW after a
    ReorderOutput; Relu and an Add of two NCHWc tensors of one shape stay NCHWc (padded); a Concat of channels not a
    multiple of the block reads NCHW; a global pool of an NCHW tensor a node wrote stays NCHW, with no ReorderInput."""
    kernels = [
        _conv("x", "a", 3, 16),
        _op("MaxPool", [_map("a", 16)], _map("p", 16, 7), kernel_shape=[3, 3]),
        _conv("x", "b", 3, 12),
        _op("Relu", [_map("b", 12)], _map("r", 12)),
        _op("Add", [_map("r", 12), _map("b", 12)], _map("s", 12)),
        _op("MaxPool", [_map("s", 12)], _map("q", 12, 7), kernel_shape=[3, 3]),
        _op("Concat", [_map("p", 16, 7), _map("q", 12, 7)], _map("c", 28, 7), axis=1),
        _op("LeakyRelu", [_map("c", 28, 7)], _map("l", 28, 7)),
        _op("GlobalAveragePool", [_map("l", 28, 7)], _map("g", 28, 1)),
    ]
    kernels[-1].domain = NCHWC_DOMAIN  # as the rules may list it
    laid = nchwc_layout(kernels, 8, graph_outputs={"g"})
    assert _summary(laid) == [
        "Conv:3->16", "MaxPool:16->16", "Conv:3->16", "Relu:16->16", "Add:16+16->16", "ReorderOutput:16->12",
        "MaxPool:12->12", "ReorderOutput:16->16", "Concat:16+12->28", "LeakyRelu:28->28", "GlobalAveragePool:28->28",
    ]  # fmt: skip
    domains = {k.node_name: k.domain for k in laid}
    assert domains["p"] == NCHWC_DOMAIN and domains["q"] == "" and domains["g"] == ""


def test_the_rules_own_reorders_and_a_reshape_after_a_convolution_are_replaced() -> None:
    """Reorders the fusion rules' inserts add, and an inserted Reshape of a convolution's output, are dropped; their
    consumers read the tensors again; the fused kernel's consumers read its last node's output (``nodes``)."""
    conv = _conv("x", "a", 16, 16, family="Conv_Relu")
    conv.absorbed_ops, conv.absorbed_op_types = ["a", "relu"], ["Conv", "Relu"]
    reorder = _op("ReorderOutput", [_map("a", 16)], _map("a#1", 16))
    reorder.node_name = "ReorderOutput_inserted_a"
    reshape = _op("Reshape", [TensorInfo("gemm_output", "float", (16, 196))], _map("relu_out#2", 16))
    reshape.node_name = "Reshape_inserted_a"
    gelu = _op("Gelu", [_map("relu_out#2", 16)], _map("y", 16))
    nodes = {"a": (["x"], ["a"]), "relu": (["a"], ["relu_out"]), "y": (["relu_out"], ["y"])}
    laid = nchwc_layout([conv, reorder, reshape, gelu], 8, nodes=nodes, graph_outputs={"y"})
    assert _summary(laid) == ["ReorderInput:16->16", "Conv:16->16", "Gelu:16->16", "ReorderOutput:16->16"]
    assert laid[2].inputs[0].name == laid[1].outputs[0].name
    assert nchwc_layout([conv], 0) == [conv]


def _network(path: Path) -> None:
    """Convolutions of 3, 24, 8 and 32 channels (depthwise between), a residual Add, a MaxPool of 24 channels, a
    GlobalAveragePool of 32 and a classifier head."""
    rng = np.random.default_rng(0)
    initializers: list[onnx.TensorProto] = []

    def weight(*shape: int) -> str:
        name = f"w{len(initializers)}"
        values = (rng.standard_normal(int(np.prod(shape))) * 0.1).tolist()
        initializers.append(helper.make_tensor(name, onnx.TensorProto.FLOAT, shape, values))
        return name

    def conv(x: str, y: str, c_in: int, c_out: int, k: int = 3, group: int = 1) -> onnx.NodeProto:
        return helper.make_node(
            "Conv", [x, weight(c_out, c_in // group, k, k), weight(c_out)], [y], pads=[k // 2] * 4, group=group
        )

    nodes = [
        conv("x", "a0", 3, 24), helper.make_node("Relu", ["a0"], ["a"]),
        conv("a", "b", 24, 24, group=24), conv("b", "c", 24, 8, 1), conv("c", "d", 8, 24),
        helper.make_node("Add", ["a", "d"], ["e"]),
        helper.make_node("MaxPool", ["e"], ["f"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        conv("f", "g", 24, 32, 1), helper.make_node("GlobalAveragePool", ["g"], ["h"]),
        helper.make_node("Flatten", ["h"], ["i"]),
        helper.make_node("Gemm", ["i", weight(10, 32), weight(10)], ["y"], transB=1),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "reorders", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 28, 28])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])], initializers,
    )  # fmt: skip
    from hase_dagster.core.ort_runtime import MAX_IR_VERSION

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = MAX_IR_VERSION
    onnx.save(model, str(path))


def test_static_cpu_reorders_match_this_machines_ort_where_the_block_is_the_bundles(tmp_path: Path) -> None:
    """The shipped cpu bundle's static detection lists the ReorderInput/ReorderOutput kernels (family, shapes) this
    machine's ORT runs for a small network, and its nchwc pools, where this machine's ORT blocks NCHWc as the
    bundle's CPU did (before the layout pass static detection listed none of them right)."""
    from hase_dagster.core.ort_runtime import nchwc_block_size

    bundle = read_bundle(REPO / "results" / "bundles" / "cpu")
    if nchwc_block_size() != bundle.document["nchwc_block"]:
        pytest.skip("this machine's ORT blocks NCHWc otherwise than the bundle's CPU")
    path = tmp_path / "reorders_b1.onnx"
    _network(path)
    static, _ = bundle.kernels(path, 1)
    ort = bundle._ort_kernels(path, 1, None)

    def reorders(kernels: list[Kernel]) -> list[str]:
        return sorted(
            f"{k.domain}|{kernel_key(k)}"
            for k in kernels
            if k.op_type in ("ReorderInput", "ReorderOutput") or k.op_type.endswith("Pool")
        )

    assert reorders(static) == reorders(ort)
    assert any(k.op_type == "ReorderOutput" for k in ort) and any(k.op_type == "ReorderInput" for k in ort)


def _repghost_block(path: Path) -> None:
    """RepGhostNet's block as timm exports it: a 1x1 convolution and Relu, then the sum of a depthwise 3x3
    convolution of that and a BatchNorm of it (the re-parameterisable branch), Relu, and a 1x1 convolution."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.primary = nn.Sequential(nn.Conv2d(16, 24, 1), nn.BatchNorm2d(24), nn.ReLU())
            self.cheap = nn.Sequential(nn.Conv2d(24, 24, 3, 1, 1, groups=24), nn.BatchNorm2d(24))
            self.fusion_bn = nn.BatchNorm2d(24)
            self.out = nn.Conv2d(24, 16, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.primary(x)
            return self.out(torch.relu(self.cheap(y) + self.fusion_bn(y))) + x

    from hase_dagster.analysis.zoo import trace_to_onnx

    trace_to_onnx(nn.Sequential(Block(), Block()).eval(), torch.randn(1, 16, 28, 28), path, 17)


def test_a_reorder_pass_whose_renaming_makes_a_cycle_keeps_the_padded_kernels(tmp_path: Path) -> None:
    """RepGhostNet's BatchNorm branch: the rules' templates wire its fused kernels so that the reorder pass's renaming
    made a cycle (set Z on this VM: "the kernel graph has a cycle", no prediction); the padded kernels come back
    instead, in an order that runs, and the network is predicted."""
    from hase_dagster.analysis.model_dag import critical_path_ms
    from hase_dagster.analysis.nchwc_layout import has_cycle

    bundle = read_bundle(REPO / "results" / "bundles" / "cpu")
    path = tmp_path / "repghost_b1.onnx"
    _repghost_block(path)
    kernels, _ = bundle.kernels(path, 1)
    assert not has_cycle(kernels)
    assert critical_path_ms(kernels, {k.node_name: 1.0 for k in kernels}) > 0
    assert any(k.op_type == "Conv" and k.outputs[0].shape[1] == 32 for k in kernels)  # 24 padded to the block
