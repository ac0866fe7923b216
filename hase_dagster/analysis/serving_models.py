"""Zoo models exported with a dynamic batch dimension, for serving (the planner and the executor run
them at every batch size a dynamic batcher forms). Weights are random; nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hase_dagster.analysis.zoo import build_torch_model, trace_to_onnx
from hase_dagster.core.config import ZooModel
from hase_dagster.core.errors import HaseError
from hase_dagster.core.ort_runtime import make_session
from hase_dagster.core.serving_spec import PlanSpec

# The proof's pair (issue 16): a CNN and a small text encoder.
SERVING_MODELS: dict[str, tuple[ZooModel, int]] = {
    "resnet18": (ZooModel(name="resnet18"), 224),
    "resnet18_112": (ZooModel(name="resnet18"), 112),
    "encoder_small": (
        ZooModel(
            name="encoder_small", kind="transformer_encoder", d_model=256, nhead=4, dim_feedforward=1024, num_layers=4
        ),
        64,
    ),
    "encoder_base": (
        ZooModel(name="encoder_base", kind="transformer_encoder", d_model=768, nhead=12, num_layers=4),
        128,
    ),
}


def export_dynamic_batch(model: ZooModel, size: int, path: Path, opset: int = 17) -> Path:
    """Export ``model`` (image side or sequence length ``size``) with a symbolic batch dimension to
    ``path``, checked by ORT runs at batch 1 and 3 on the CPU; written under a temporary name first.

    Raises:
        HaseError: the exported file does not run at both batch sizes.
    """
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    module = build_torch_model(model)
    if model.kind == "transformer_encoder":
        example = torch.randn(2, size, model.d_model)
    else:
        example = torch.randn(2, 3, size, size)
    partial = path.with_suffix(".onnx.partial")
    trace_to_onnx(module, example, partial, opset, dynamic_batch=True)
    try:
        session = make_session(partial, "cpu")
        for batch in (1, 3):
            shape = [batch, *example.shape[1:]]
            (output,) = session.run(None, {"input": np.zeros(shape, dtype=np.float32)})
            if output.shape[0] != batch:
                raise HaseError(f"{model.name} exported with a fixed batch: output {output.shape} for batch {batch}")
    except Exception:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)
    return path


def export_serving_models(names: list[str], out_dir: Path) -> list[Path]:
    """Export the named :data:`SERVING_MODELS` to ``out_dir/<name>.onnx`` (kept when already there)."""
    unknown = [n for n in names if n not in SERVING_MODELS]
    if unknown:
        raise HaseError(f"unknown serving models {unknown}; known: {', '.join(SERVING_MODELS)}")
    paths = []
    for name in names:
        path = out_dir / f"{name}.onnx"
        if not path.exists():
            model, size = SERVING_MODELS[name]
            export_dynamic_batch(model, size, path)
        paths.append(path)
    return paths


def ensure_models(spec: PlanSpec) -> list[Path]:
    """Export each model of ``spec`` that names a serving model (``export``) and whose file is missing."""
    written = []
    for model in spec.models:
        if model.path.exists():
            continue
        if model.export is None:
            raise HaseError(f"{model.name}: no such ONNX file {model.path} (and no `export:` to make it)")
        if model.export not in SERVING_MODELS:
            raise HaseError(f"{model.name}: unknown serving model {model.export!r}; known: {', '.join(SERVING_MODELS)}")
        zoo, size = SERVING_MODELS[model.export]
        written.append(export_dynamic_batch(zoo, size, model.path))
    return written
