"""How long does a run wait under load? Synthetic models from 0.05 ms to about 50 ms, timed as a user
runs them (host clock, IO binding, ORT_ENABLE_ALL) at stress 0 / 0.25 / 0.5 / 0.75 / 1.0.

Issue 11 item 3: the time-slice wait depends on how many slice boundaries a run crosses and on the
co-tenant's share, not on the idle sum alone. The models:

- ``mm{n}x{k}``: a chain of ``k`` fp32 MatMuls of ``n x n`` (few, long kernels);
- ``adds{k}``: ``k`` Adds on a 64x64 tensor (many tiny kernels: launch-bound).

Run on the GPU host after the wheelhouse is installed (as ``run.sh`` does):
    PYTHONPATH=/tmp/site:$PWD python3 results/gpu-general/wait_study.py $OUT/wait_study.json [SECONDS_PER_CELL]
Every sample is kept (ms), so the summary can be recomputed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.core.config import TelemetryOptions
from hase_dagster.measure.load import under_load
from hase_dagster.measure.runner import ModelRunner

LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
MATMUL_CHAINS = ((256, 1), (1024, 1), (1024, 4), (2048, 2), (2048, 8), (4096, 2), (4096, 8), (4096, 24))
ADD_CHAINS = (10, 60, 240)


def _link(i: int, k: int) -> tuple[str, str]:
    """Input and output names of the ``i``-th of ``k`` chained nodes."""
    return ("x" if i == 0 else f"h{i}"), (f"h{i + 1}" if i < k - 1 else "y")


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    # IR 8 / opset 17: what the ORT releases in use (1.31) and the zoo exports load.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def matmul_chain(n: int, k: int) -> onnx.ModelProto:
    rng = np.random.default_rng(n + k)
    weights = [
        numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), f"w{i}")
        for i in range(k)
    ]
    nodes = [
        helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}" if i < k - 1 else "y"])
        for i in range(k)
    ]
    graph = helper.make_graph(
        nodes,
        f"mm{n}x{k}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        weights,
    )
    return _model(graph)


def add_chain(k: int) -> onnx.ModelProto:
    one = numpy_helper.from_array(np.ones((64, 64), np.float32), "one")
    nodes = [
        helper.make_node("Add", ["x" if i == 0 else f"h{i}", "one"], [f"h{i + 1}" if i < k - 1 else "y"])
        for i in range(k)
    ]
    graph = helper.make_graph(
        nodes,
        f"adds{k}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
        [one],
    )
    return _model(graph)


def summary(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples)
    return {
        "n": int(values.size),
        "mean_ms": float(values.mean()),
        "p50_ms": float(np.percentile(values, 50)),
        "p90_ms": float(np.percentile(values, 90)),
        "p99_ms": float(np.percentile(values, 99)),
        "min_ms": float(values.min()),
    }


def main() -> None:
    out = Path(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
    models = {f"mm{n}x{k}": matmul_chain(n, k) for n, k in MATMUL_CHAINS} | {
        f"adds{k}": add_chain(k) for k in ADD_CHAINS
    }
    results: dict = {"levels": list(LEVELS), "seconds_per_cell": seconds, "cells": []}
    with tempfile.TemporaryDirectory() as tmp:
        runners = {}
        for name, model in models.items():
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(model, str(path))
            runners[name] = ModelRunner(path, "cuda", level="all")
            for _ in range(5):
                runners[name].sample()
        for level in LEVELS:
            with under_load("cuda", level, TelemetryOptions()) as loaded:
                steady = loaded.stressor.steady_load
                for name, runner in runners.items():
                    for _ in range(5):
                        runner.sample()
                    samples: list[float] = []
                    start = time.perf_counter()
                    while len(samples) < 20 or (time.perf_counter() - start < seconds and len(samples) < 3000):
                        samples.append(runner.sample())
                    cell = {"model": name, "level": level, "steady_load": steady, **summary(samples)}
                    results["cells"].append(cell | {"samples": samples})
                    times = " ".join(f"{key} {value:.3f}" for key, value in cell.items() if key.endswith("_ms"))
                    print(f"{level:.2f} {name:12s} {times}", flush=True)
                out.write_text(json.dumps(results))
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
