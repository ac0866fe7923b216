"""dm_nfnet_f0 through the CPU catalog twice: as it is, and with a stand-in for the CUDA EP that refuses the unoptimized
graph while a training-mode BatchNormalization is in it (the H200's failure of 2026-11-29), so the fingerprint run
folds the constant nodes first. Prints both kernel counts and whether the kernel families agree.

    PYTHONPATH=/tmp/timm-site .venv/bin/python results/cpu-general/timm_set.py /tmp/nf --batch-sizes 1 \
        --jobs 1 dm_nfnet_f0
    .venv/bin/python results/gpu-general/user-kernels-am/fold_check.py /tmp/nf/dm_nfnet_f0_i192_b1.onnx
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import onnx

from hase_dagster.analysis.analyze import analyze_model
from hase_dagster.core import ort_runtime
from hase_dagster.core.errors import ModelLoadError


def trains_batch_norm(model: onnx.ModelProto) -> bool:
    return any(
        node.op_type == "BatchNormalization"
        and any(attribute.name == "training_mode" and attribute.i for attribute in node.attribute)
        for node in model.graph.node
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    args = parser.parse_args()
    real_make_session = ort_runtime.make_session
    refused = []

    def refusing(source, ep, *rest, level="all", **kwargs):
        if level == "disable":
            loaded = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(str(source))
            if loaded.graph.input and trains_batch_norm(loaded):  # the constants alone still run
                refused.append(level)
                raise ModelLoadError("stand-in: Training mode does not support BN opset 14")
        return real_make_session(source, ep, *rest, level=level, **kwargs)

    with tempfile.TemporaryDirectory() as tmp:
        start = time.time()
        plain = analyze_model(args.model, "cpu", Path(tmp) / "plain.opt.onnx")
        seconds = time.time() - start
        print(f"as it is: {len(plain.kernels)} kernels, {len(plain.fusion.unmapped)} unmapped, {seconds:.1f} s")
        ort_runtime.make_session = refusing
        start = time.time()
        folded = analyze_model(args.model, "cpu", Path(tmp) / "folded.opt.onnx")
        print(
            f"refused {len(refused)} time(s), then folded: {len(folded.kernels)} kernels, "
            f"{len(folded.fusion.unmapped)} unmapped, {time.time() - start:.1f} s"
        )
    same = sorted(k.family for k in plain.kernels) == sorted(k.family for k in folded.kernels)
    print(f"same kernel families: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
