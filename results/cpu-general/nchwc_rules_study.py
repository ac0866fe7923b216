"""What ORT's NCHWc transformer does on this machine's CPU EP to one convolution and its consumer, over a grid of
input channels, output channels, groups and consumers: the facts CPU static detection has to reproduce (issue 11: the
fusion rules keep a convolution's own channel counts where ORT pads them to its block and reorders them back).

Each case is a 4-D input, one Conv (3x3, pad 1, weights and bias constant), then a consumer (Relu, Gelu, Add of the
input when shapes match, a Concat with the input, a GlobalAveragePool or nothing), optimized by ORT at ORT_ENABLE_ALL
with the optimized graph saved; the row reads off the saved graph: whether the Conv became an NCHWc Conv, its padded
output channels (the weight's first dim) and input channels, the ReorderInput/ReorderOutput nodes and the channels
they write, and where the consumer runs (before or after the ReorderOutput).

A second table (``graph_cases``) takes small graphs at a channel count C (24: not a multiple of the block; 32: one):
chains of two or three convolutions (1x1, 3x3, depthwise between), Add and Concat of two convolutions' outputs,
BatchNormalization, Resize, MaxPool, AveragePool, GlobalMaxPool, unary activations, Mul, Transpose and an SE gate
(GlobalAveragePool > Conv > Relu > Conv > Sigmoid > Mul) after a convolution, and a classifier head. Each optimized
node is listed in order as ``index:op[details]<-producers`` (``in`` the graph input), so where every ReorderInput and
ReorderOutput lands, and which ops run in the nchwc domain, can be read off.

    .venv/bin/python results/cpu-general/nchwc_rules_study.py > results/cpu-general/nchwc-rules/cases.md
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from hase_dagster.core.ort_runtime import MAX_IR_VERSION, make_session, nchwc_block_size  # noqa: E402

SIDE = 14
INPUT_CHANNELS = (3, 4, 8, 12, 16, 24, 32, 56, 64)
OUTPUT_CHANNELS = (4, 8, 12, 16, 24, 32, 56, 64)
CONSUMERS = ("none", "Relu", "Gelu", "Add", "Concat", "GlobalAveragePool")


def case_model(c_in: int, c_out: int, groups: int, consumer: str) -> onnx.ModelProto | None:
    """One Conv and its consumer, or None where the grid point is not a valid convolution or consumer."""
    if c_in % groups or c_out % groups or (consumer == "Add" and c_in != c_out):
        return None
    rng = np.random.default_rng(0)
    values = rng.standard_normal(c_out * c_in // groups * 9).astype(np.float32).tolist()
    weight = helper.make_tensor("w", onnx.TensorProto.FLOAT, [c_out, c_in // groups, 3, 3], values)
    bias = helper.make_tensor("b", onnx.TensorProto.FLOAT, [c_out], [0.1] * c_out)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=groups)]
    out_channels, out_side = c_out, SIDE
    if consumer == "none":
        nodes.append(helper.make_node("Identity", ["c"], ["y"]))
    elif consumer == "Gelu":
        nodes.append(helper.make_node("Gelu", ["c"], ["y"], domain="com.microsoft"))
    elif consumer == "Add":
        nodes.append(helper.make_node("Add", ["c", "x"], ["y"]))
    elif consumer == "Concat":
        nodes.append(helper.make_node("Concat", ["c", "x"], ["y"], axis=1))
        out_channels = c_out + c_in
    elif consumer == "GlobalAveragePool":
        nodes.append(helper.make_node("GlobalAveragePool", ["c"], ["y"]))
        out_side = 1
    else:
        nodes.append(helper.make_node(consumer, ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c_in, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, out_channels, out_side, out_side])],
        [weight, bias],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = MAX_IR_VERSION
    return model


def describe(model: onnx.ModelProto) -> dict[str, str]:
    """ORT's optimized graph of ``model`` in a few words (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "o.onnx"
        make_session(model.SerializeToString(), "cpu", optimized_model_path=optimized)
        graph = onnx.load(str(optimized)).graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    ops = []
    conv = "NCHW"
    for n in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Conv" and n.domain == "com.microsoft.nchwc":
            w = dims.get(n.input[1], ["?"])
            activation = f" act {attrs['activation'].decode()}" if "activation" in attrs else ""
            conv = f"NCHWc out {w[0]} in {w[1]}{activation}"
            ops.append("NchwcConv")
        elif n.op_type in ("ReorderInput", "ReorderOutput"):
            ops.append(f"{n.op_type}({attrs.get('channels', '')})")
        else:
            ops.append(n.op_type if not n.domain else f"{n.domain.split('.')[-1]}.{n.op_type}")
    return {"conv": conv, "nodes": " > ".join(ops)}


class Net:
    """A small graph under construction: nodes, constant initializers, the input's channels and side."""

    def __init__(self, c_in: int, side: int = SIDE) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.c_in, self.side = c_in, side
        self.rng = np.random.default_rng(0)

    def const(self, shape: list[int], value: float | None = None) -> str:
        """A new float initializer of ``shape`` (random, or all ``value``); its name."""
        name = f"t{len(self.initializers)}"
        size = int(np.prod(shape))
        values = [value] * size if value is not None else self.rng.standard_normal(size).astype(np.float32).tolist()
        self.initializers.append(helper.make_tensor(name, onnx.TensorProto.FLOAT, shape, values))
        return name

    def op(self, op_type: str, inputs: list[str], domain: str = "", **attributes: object) -> str:
        """A new node reading ``inputs``; its (one) output's name."""
        out = f"v{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], domain=domain or None, **attributes))
        return out

    def conv(self, x: str, c_in: int, c_out: int, k: int = 3, group: int = 1) -> str:
        """A Conv with constant weights and bias, ``k`` x ``k``, same padding."""
        w = self.const([c_out, c_in // group, k, k])
        b = self.const([c_out], 0.1)
        return self.op("Conv", [x, w, b], pads=[k // 2] * 4, group=group, kernel_shape=[k, k])

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        """The graph with input ``in`` and ``outputs`` (shapes left to ORT)."""
        graph = helper.make_graph(
            self.nodes, "case",
            [helper.make_tensor_value_info("in", onnx.TensorProto.FLOAT, [1, self.c_in, self.side, self.side])],
            [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
            self.initializers,
        )  # fmt: skip
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = MAX_IR_VERSION
        return model


def graph_case(name: str, c: int) -> onnx.ModelProto:
    """The small graph ``name`` (see the module docstring) at channel count ``c``."""
    n = Net(c)
    x = "in"
    if name == "1x1 > 3x3":
        outs = [n.conv(n.conv(x, c, c, 1), c, c)]
    elif name == "3x3 > dw3x3 > 1x1":
        outs = [n.conv(n.conv(n.conv(x, c, c), c, c, group=c), c, c, 1)]
    elif name == "1x1(3->C) > dw3x3 > 1x1":
        n = Net(3)
        outs = [n.conv(n.conv(n.conv(x, 3, c, 1), c, c, group=c), c, c, 1)]
    elif name == "3x3 > 1x1(C->8) > 3x3(8->C)":
        outs = [n.conv(n.conv(n.conv(x, c, c), c, 8, 1), 8, c)]
    elif name == "Add(conv, conv(conv))":
        a = n.conv(x, c, c, 1)
        outs = [n.op("Add", [a, n.conv(a, c, c)])]
    elif name == "Add(conv, conv) > Relu > conv":
        outs = [n.conv(n.op("Relu", [n.op("Add", [n.conv(x, c, c, 1), n.conv(x, c, c)])]), c, c, 1)]
    elif name == "Concat(conv, conv) > conv":
        outs = [n.conv(n.op("Concat", [n.conv(x, c, c, 1), n.conv(x, c, c)], axis=1), 2 * c, c, 1)]
    elif name == "Concat(conv 16, conv 32) > conv":
        outs = [n.conv(n.op("Concat", [n.conv(x, c, 16, 1), n.conv(x, c, 32)], axis=1), 48, c, 1)]
    elif name == "conv > Relu > BatchNormalization > conv":
        a = n.op("Relu", [n.conv(x, c, c)])
        bn = n.op("BatchNormalization", [a, n.const([c], 1.0), n.const([c], 0.0), n.const([c], 0.0), n.const([c], 1.0)])
        outs = [n.conv(bn, c, c, 1)]
    elif name in ("MaxPool", "AveragePool"):
        outs = [n.conv(n.op(name, [n.conv(x, c, c)], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4), c, c, 1)]
    elif name in ("MaxPool of input", "AveragePool of input"):
        pooled = n.op(name.split()[0], [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
        outs = [n.conv(pooled, c, c, 1)]
    elif name in ("GlobalAveragePool of input", "GlobalMaxPool of input"):
        outs = [n.conv(n.op(name.split()[0], [x]), c, c, 1)]
    elif name == "GlobalMaxPool":
        outs = [n.op("GlobalMaxPool", [n.conv(x, c, c)])]
    elif name == "Resize x2 nearest":
        scales = n.const([4])
        n.initializers[-1] = helper.make_tensor(scales, onnx.TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
        outs = [n.conv(n.op("Resize", [n.conv(x, c, c), "", scales], mode="nearest"), c, c, 1)]
    elif name == "Resize x2 linear":
        scales = n.const([4])
        n.initializers[-1] = helper.make_tensor(scales, onnx.TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
        outs = [n.conv(n.op("Resize", [n.conv(x, c, c), "", scales], mode="linear"), c, c, 1)]
    elif name in ("Sigmoid", "Tanh", "HardSigmoid", "LeakyRelu", "HardSwish", "Gelu", "Relu"):
        a = n.conv(x, c, c)  # two uses: the activation is not fused into the convolution
        act = n.op(name, [a], domain="com.microsoft" if name == "Gelu" else "")
        outs = [n.conv(n.op("Add", [a, act]), c, c, 1)]
    elif name == "Mul(conv, conv)":
        outs = [n.conv(n.op("Mul", [n.conv(x, c, c, 1), n.conv(x, c, c)]), c, c, 1)]
    elif name == "Transpose NHWC":
        outs = [n.op("Transpose", [n.conv(x, c, c)], perm=[0, 2, 3, 1])]
    elif name == "SE gate":
        a = n.op("Relu", [n.conv(x, c, c)])
        g = n.op("Sigmoid", [n.conv(n.op("Relu", [n.conv(n.op("GlobalAveragePool", [a]), c, 8, 1)]), 8, c, 1)])
        outs = [n.conv(n.op("Mul", [a, g]), c, c, 1)]
    elif name == "head: GlobalAveragePool > Flatten > Gemm":
        pooled = n.op("GlobalAveragePool", [n.conv(x, c, c)])
        outs = [n.op("Gemm", [n.op("Flatten", [pooled]), n.const([10, c]), n.const([10], 0.0)], transB=1)]
    else:
        raise ValueError(name)
    return n.model(outs)


GRAPH_CASES = (
    "1x1 > 3x3", "3x3 > dw3x3 > 1x1", "1x1(3->C) > dw3x3 > 1x1", "3x3 > 1x1(C->8) > 3x3(8->C)",
    "Add(conv, conv(conv))", "Add(conv, conv) > Relu > conv", "Concat(conv, conv) > conv",
    "Concat(conv 16, conv 32) > conv", "conv > Relu > BatchNormalization > conv", "MaxPool", "AveragePool",
    "GlobalMaxPool", "MaxPool of input", "AveragePool of input", "GlobalAveragePool of input",
    "GlobalMaxPool of input", "Resize x2 nearest", "Resize x2 linear", "Relu", "Sigmoid", "Tanh", "HardSigmoid",
    "LeakyRelu", "HardSwish", "Gelu", "Mul(conv, conv)", "Transpose NHWC", "SE gate",
    "head: GlobalAveragePool > Flatten > Gemm",
)  # fmt: skip


def describe_nodes(model: onnx.ModelProto) -> str:
    """ORT's optimized graph of ``model`` node by node: ``index:op[details]<-producers``."""
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "o.onnx"
        make_session(model.SerializeToString(), "cpu", optimized_model_path=optimized)
        graph = onnx.load(str(optimized)).graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    producer = {"in": "in"}
    parts = []
    for index, n in enumerate(graph.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        short = n.op_type if not n.domain else f"{n.domain.split('.')[-1]}.{n.op_type}"
        details = []
        if n.op_type in ("Conv", "FusedConv"):
            w = dims.get(n.input[1], ["?", "?"])
            details.append(f"w {w[0]}x{w[1]}")
            if attrs.get("group", 1) != 1:
                details.append(f"g {attrs['group']}")
            if "activation" in attrs:
                details.append(attrs["activation"].decode())
            if len(n.input) > 3 and n.input[3]:
                details.append("sum")
        elif n.op_type == "ReorderOutput":
            details.append(f"{attrs.get('channels', '')}" + (" last" if attrs.get("channels_last") else ""))
        elif n.op_type == "ReorderInput" and attrs.get("channels_last"):
            details.append("last")
        sources = [producer.get(name, "") for name in n.input if name and name not in dims]
        parts.append(f"{index}:{short}" + (f"[{', '.join(details)}]" if details else "") + f"<-{','.join(sources)}")
        for name in n.output:
            producer[name] = str(index)
    return " ".join(parts)


def main() -> int:
    print(f"ORT NCHWc block on this CPU: {nchwc_block_size()}\n")
    print("## Small graphs\n\n| graph | C | optimized nodes |\n|---|---|---|")
    for name, c in itertools.product(GRAPH_CASES, (24, 32)):
        print(f"| {name} | {c} | {describe_nodes(graph_case(name, c))} |")
    print("\n## One convolution and its consumer\n")
    print("| in | out | groups | consumer | conv | nodes |\n|---|---|---|---|---|---|")
    for c_in, c_out, consumer in itertools.product(INPUT_CHANNELS, OUTPUT_CHANNELS, CONSUMERS):
        for groups in sorted({1, c_in} if c_in == c_out else {1}):
            model = case_model(c_in, c_out, groups, consumer)
            if model is None:
                continue
            found = describe(model)
            print(f"| {c_in} | {c_out} | {groups} | {consumer} | {found['conv']} | {found['nodes']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
