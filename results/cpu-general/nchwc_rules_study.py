"""What ORT's NCHWc transformer does on this machine's CPU EP to one convolution and its consumer, over a grid of
input channels, output channels, groups and consumers: the facts CPU static detection has to reproduce (issue 11: the
fusion rules keep a convolution's own channel counts where ORT pads them to its block and reorders them back).

Each case is a 4-D input, one Conv (3x3, pad 1, weights and bias constant), then a consumer (Relu, Gelu, Add of the
input when shapes match, a Concat with the input, a GlobalAveragePool or nothing), optimized by ORT at ORT_ENABLE_ALL
with the optimized graph saved; the row reads off the saved graph: whether the Conv became an NCHWc Conv, its padded
output channels (the weight's first dim) and input channels, the ReorderInput/ReorderOutput nodes and the channels
they write, and where the consumer runs (before or after the ReorderOutput).

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


def main() -> int:
    print(f"ORT NCHWc block on this CPU: {nchwc_block_size()}\n")
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
