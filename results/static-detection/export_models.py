"""Export every architecture of the H100 tables (profiles gpu, gpu_general, gpu_small_batch) once,
with a dynamic batch axis, into a git-ignored cache, so the benchmarks can re-create each
variant's original ONNX at any batch size without tracing it again at that batch.

Usage: .venv/bin/python results/static-detection/export_models.py [--static]
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import yaml

from hase_dagster.analysis.zoo import build_torch_model
from hase_dagster.core.config import ZooModel

CACHE = Path(".hase_data/static_detection/models")


def architectures() -> list[tuple[ZooModel, int]]:
    """(model, input size or sequence length) of every variant in the three GPU profiles."""
    config = yaml.safe_load(Path("hase.yaml").read_text())
    seen: dict[str, tuple[ZooModel, int]] = {}
    for name in ("gpu", "gpu_general", "gpu_small_batch"):
        profile = config["profiles"][name]
        for entry in profile["models"]:
            model = ZooModel(**entry)
            sizes = profile["sequence_lengths"] if model.kind == "transformer_encoder" else profile["input_sizes"]
            for size in sizes:
                prefix = "s" if model.kind == "transformer_encoder" else "i"
                seen.setdefault(f"{model.name}_{prefix}{size}", (model, size))
    return list(seen.values())


def export(model: ZooModel, size: int, path: Path) -> None:
    import torch

    module = build_torch_model(model)
    if model.kind == "transformer_encoder":
        example = torch.randn(1, size, model.d_model)
    else:
        example = torch.randn(1, 3, size, size)
    torch.backends.mha.set_fastpath_enabled(False)
    partial = path.with_suffix(".partial")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            str(partial),
            opset_version=17,
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            do_constant_folding=True,
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )
    partial.replace(path)


def main() -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    for model, size in architectures():
        prefix = "s" if model.kind == "transformer_encoder" else "i"
        path = CACHE / f"{model.name}_{prefix}{size}.onnx"
        if path.exists():
            continue
        start = time.perf_counter()
        export(model, size, path)
        print(f"{path.name}: {time.perf_counter() - start:.1f} s", flush=True)


def export_static(variant_id: str, out_dir: Path) -> Path:
    """Export one variant at its own batch size (no dynamic axis), as the zoo asset does: for
    architectures whose dynamic-batch export computes shapes at run time (Shape/Gather chains
    the static export folds), so node names and ops match the tables."""
    import pandas as pd

    from hase_dagster.analysis.zoo import ModelVariant, export_variant

    files = pd.read_parquet("results/gpu-general/tables/model_files.parquet").set_index("variant_id")
    row = files.loc[variant_id]
    config = yaml.safe_load(Path("hase.yaml").read_text())
    entries = [e for name in ("gpu", "gpu_general", "gpu_small_batch") for e in config["profiles"][name]["models"]]
    model = ZooModel(**next(e for e in entries if e["name"] == row.model_name))
    path = out_dir / f"{variant_id}.onnx"
    if not path.exists():
        export_variant(ModelVariant(model, int(row.input_size), int(row.batch_size)), out_dir, int(row.opset))
    return path


STATIC_ARCHITECTURES = ("transformer_encoder", "vit_b_16", "shufflenet_v2_x1_0", "nas_s103", "nas_s201")


def main_static() -> None:
    import pandas as pd

    out_dir = CACHE.parent / "static_models"
    files = pd.read_parquet("results/gpu-general/tables/model_files.parquet").sort_values("batch_size")
    for row in files.itertuples():
        if row.model_name in STATIC_ARCHITECTURES:
            start = time.perf_counter()
            export_static(row.variant_id, out_dir)
            print(f"{row.variant_id}: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main_static() if "--static" in sys.argv else main()
