"""Time 20 single-op ONNX models on the CPU EP (1 thread) with inputs of different sign and order patterns
(uniform noise, noise averaged over 3 x 3, all positive, sorted): which kernels' time depends on the data.

    .venv/bin/python results/cpu/prelu-feeds/data_dependence_ops.py > results/cpu/prelu-feeds/data-dependence-ops.txt
"""

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from scipy.ndimage import uniform_filter

shape = [1, 64, 56, 56]


def mk(nodes, inits=(), out_shape=None, extra_inputs=()):
    X = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [X, *extra_inputs], [Y], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


T = lambda name, arr: helper.make_tensor(
    name, TensorProto.FLOAT if arr.dtype == np.float32 else TensorProto.INT64, arr.shape, arr.ravel().tolist()
)
cases = {
    "MaxPool3x3": mk([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]),
    "MaxPool2s2": mk([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]),
    "GlobalMaxPool": mk([helper.make_node("GlobalMaxPool", ["x"], ["y"])]),
    "ReduceMax": mk([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1])]),
    "ArgMax": mk([helper.make_node("ArgMax", ["x"], ["a"], axis=1), helper.make_node("Cast", ["a"], ["y"], to=1)]),
    "Softmax": mk([helper.make_node("Softmax", ["x"], ["y"], axis=1)]),
    "Clip": mk(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [T("lo", np.array(0, np.float32)), T("hi", np.array(0.5, np.float32))],
    ),
    "Where>0": mk(
        [helper.make_node("Greater", ["x", "z"], ["c"]), helper.make_node("Where", ["c", "x", "z"], ["y"])],
        [T("z", np.array(0, np.float32))],
    ),
    "Max2": mk([helper.make_node("Max", ["x", "z"], ["y"])], [T("z", np.array(0, np.float32))]),
    "Relu6-Clip": mk(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [T("lo", np.array(0, np.float32)), T("hi", np.array(6, np.float32))],
    ),
    "HardSwish": mk([helper.make_node("HardSwish", ["x"], ["y"])]),
    "Gelu-erf": mk(
        [
            helper.make_node("Div", ["x", "r"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Mul", ["x", "e"], ["y"]),
        ],
        [T("r", np.array(1.41, np.float32))],
    ),
    "Round": mk([helper.make_node("Round", ["x"], ["y"])]),
    "Floor": mk([helper.make_node("Floor", ["x"], ["y"])]),
    "Mod": mk([helper.make_node("Mod", ["x", "m"], ["y"], fmod=1)], [T("m", np.array(0.3, np.float32))]),
    "Pow": mk([helper.make_node("Pow", ["x", "p"], ["y"])], [T("p", np.array(2.0, np.float32))]),
    "Sqrt": mk([helper.make_node("Sqrt", ["x"], ["y"])]),
    "Log": mk([helper.make_node("Log", ["x"], ["y"])]),
    "Exp": mk([helper.make_node("Exp", ["x"], ["y"])]),
    "TopK": mk([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)], [T("k", np.array([5], np.int64))]),
}
rng = np.random.default_rng(0)
u = rng.uniform(-1, 1, shape).astype(np.float32)
feeds = {
    "uniform": u,
    "smooth3": uniform_filter(u, size=(1, 1, 3, 3), mode="wrap").astype(np.float32),
    "positive": np.abs(u),
    "sorted": np.sort(u, axis=-1),
}
so = ort.SessionOptions()
so.intra_op_num_threads = 1
for name, m in cases.items():
    try:
        s = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
    except Exception as e:
        print(name, "ERR", str(e)[:80])
        continue
    r = {}
    for k, x in feeds.items():
        for _ in range(3):
            s.run(None, {"x": x})
        t0 = time.perf_counter()
        n = 15
        for _ in range(n):
            s.run(None, {"x": x})
        r[k] = (time.perf_counter() - t0) / n * 1000
    mx = max(r.values())
    mn = min(r.values())
    print(f"{name:12s} " + " ".join(f"{k} {v:.3f}" for k, v in r.items()) + f"  max/min {mx / mn:.2f}")
