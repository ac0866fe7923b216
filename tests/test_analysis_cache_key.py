"""The analysis cache is keyed by a graph's structure: retrained weights hit it, a changed graph does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from hase_dagster.learn.sweep import AnalysisCache, graph_structure_digest


def test_new_weights_share_the_key_and_a_changed_graph_does_not(resnet18_onnx: Path) -> None:
    model = onnx.load(str(resnet18_onnx))
    digest = graph_structure_digest(model)

    retrained = onnx.load(str(resnet18_onnx))
    rng = np.random.default_rng(0)
    changed = 0
    for i, tensor in enumerate(retrained.graph.initializer):
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32 and values.size > 64:
            retrained.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(rng.normal(size=values.shape).astype(np.float32), tensor.name)
            )
            changed += 1
    assert changed > 10
    assert graph_structure_digest(retrained) == digest

    strided = onnx.load(str(resnet18_onnx))
    conv = next(n for n in strided.graph.node if n.op_type == "Conv")
    next(a for a in conv.attribute if a.name == "strides").ints[:] = [1, 1]
    assert graph_structure_digest(strided) != digest

    # A small tensor's values are structure (a scalar a fusion may test, a shape).
    small = onnx.load(str(resnet18_onnx))
    small.graph.initializer.append(numpy_helper.from_array(np.array([1.0], dtype=np.float32), "scale"))
    other = onnx.load(str(resnet18_onnx))
    other.graph.initializer.append(numpy_helper.from_array(np.array([0.0], dtype=np.float32), "scale"))
    assert graph_structure_digest(small) != graph_structure_digest(other)

    assert AnalysisCache.key(digest, 1, "cpu") != AnalysisCache.key(digest, 4, "cpu")
    assert AnalysisCache.key(digest, 1, "cpu") != AnalysisCache.key(digest, 1, "cuda")
