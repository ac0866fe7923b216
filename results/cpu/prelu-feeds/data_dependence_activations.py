"""Time 12 activations on the CPU EP (1 thread), fed noise of both signs and of one sign: only PRelu moves.

    .venv/bin/python results/cpu/prelu-feeds/data_dependence_activations.py \
        > results/cpu/prelu-feeds/data-dependence-activations.txt
"""

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

shape = [1, 56, 128, 128]


def model(op, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    inits = []
    ins = ["x"]
    if op == "PRelu":
        inits = [helper.make_tensor("s", TensorProto.FLOAT, [56, 1, 1], [0.25] * 56)]
        ins = ["x", "s"]
    n = helper.make_node(op, ins, ["y"], **attrs)
    g = helper.make_graph([n], "g", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


rng = np.random.default_rng(0)
xn = rng.standard_normal(shape).astype(np.float32)
xp = np.abs(xn)
for op, attrs in [
    ("PRelu", {}),
    ("LeakyRelu", {"alpha": 0.1}),
    ("Relu", {}),
    ("Elu", {}),
    ("Selu", {}),
    ("HardSigmoid", {}),
    ("Sigmoid", {}),
    ("Tanh", {}),
    ("Softplus", {}),
    ("Abs", {}),
    ("Sign", {}),
    ("Erf", {}),
]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model(op, **attrs), so, providers=["CPUExecutionProvider"])
    r = []
    for x in (xn, xp):
        for _ in range(3):
            s.run(None, {"x": x})
        t0 = time.perf_counter()
        for _ in range(20):
            s.run(None, {"x": x})
        r.append((time.perf_counter() - t0) / 20 * 1000)
    print(f"{op:12s} normal {r[0]:.3f} ms  positive {r[1]:.3f} ms  ratio {r[0] / r[1]:.1f}")
