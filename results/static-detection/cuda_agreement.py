"""Kernel-list agreement on the CUDA EP, computed here from the committed H100 tables.

The original ONNX of every variant is re-created from the dynamic-batch exports of
``export_models.py`` (batch set, then ONNX shape inference); the fingerprinted kernels come from
``results/gpu-general/tables/kernels.parquet``. Rules are learned without the held-out
(never-seen) variants, then applied to every variant.

Usage: .venv/bin/python results/static-detection/cuda_agreement.py [--leave-one-family-out]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import onnx
import pandas as pd

from hase_dagster.analysis.fusion_rules import FusionRules, learn_rules
from hase_dagster.analysis.kernel_agreement import compare_kernels
from hase_dagster.analysis.static_detect import detect_in_model
from hase_dagster.learn.training import kernel_from_row

HERE = Path(__file__).parent
TABLES = Path("results/gpu-general/tables")
CACHE = Path(".hase_data/static_detection/models")
ORT_VERSION = "1.31.1"
DEVICE = "NVIDIA H100 80GB HBM3"
RULES_FILE = HERE / f"h100-cuda-ort{ORT_VERSION}.fusion_rules.json"


def load_cases() -> tuple[pd.DataFrame, dict[str, list]]:
    files = pd.read_parquet(TABLES / "model_files.parquet")
    rows = pd.read_parquet(TABLES / "kernels.parquet").sort_values(["variant_id", "kernel_order"])
    kernels: dict[str, list] = {}
    for row in rows.to_dict("records"):
        kernels.setdefault(row["variant_id"], []).append(kernel_from_row(row))
    return files, kernels


_MODELS: dict[str, onnx.ModelProto] = {}


def model_of(row: pd.Series) -> onnx.ModelProto:
    """The variant's original model: its architecture's export with the batch dimension set."""
    static = CACHE.parent / "static_models" / f"{row.variant_id}.onnx"
    if static.exists():  # exported at its batch size (architectures with run-time shape chains)
        if row.variant_id not in _MODELS:
            _MODELS[row.variant_id] = onnx.load(str(static))
        return _MODELS[row.variant_id]
    prefix = "s" if row.model_name == "transformer_encoder" else "i"
    arch = f"{row.model_name}_{prefix}{row.input_size}"
    if arch not in _MODELS:
        _MODELS[arch] = onnx.load(str(CACHE / f"{arch}.onnx"))
    model = onnx.ModelProto()
    model.CopyFrom(_MODELS[arch])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = int(row.batch_size)
    for output in model.graph.output:
        output.type.tensor_type.shape.dim[0].dim_value = int(row.batch_size)
    return model


def evaluate(rules: FusionRules, files: pd.DataFrame, kernels: dict[str, list], subset: pd.DataFrame) -> list[dict]:
    out = []
    for row in subset.itertuples():
        start = time.perf_counter()
        detection = detect_in_model(model_of(row), rules, row.variant_id)
        seconds = time.perf_counter() - start
        agreement = compare_kernels(row.variant_id, kernels[row.variant_id], detection.kernels)
        out.append(
            {
                "variant_id": row.variant_id,
                "held_out": bool(row.held_out),
                "family": row.family,
                "fingerprinted": agreement.fingerprinted,
                "derived": agreement.derived,
                "identical": agreement.identical,
                "share": agreement.share,
                "families_identical": agreement.families_identical,
                "only_fingerprinted": agreement.only_fingerprinted,
                "only_derived": agreement.only_derived,
                "covered_share": detection.coverage["covered_share"],
                "uncovered_patterns": detection.coverage["uncovered_patterns"],
                "detect_seconds": seconds,
            }
        )
    return out


def summary(results: list[dict]) -> dict:
    total = sum(max(r["fingerprinted"], r["derived"]) for r in results)
    identical = sum(r["identical"] for r in results)
    return {
        "variants": len(results),
        "kernels_fingerprinted": sum(r["fingerprinted"] for r in results),
        "kernels_derived": sum(r["derived"] for r in results),
        "identical": identical,
        "share": identical / total if total else 1.0,
        "family_share": sum(r["families_identical"] for r in results)
        / max(sum(r["fingerprinted"] for r in results), 1),
        "variants_all_identical": sum(1 for r in results if r["identical"] == r["fingerprinted"] == r["derived"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leave-one-family-out", action="store_true")
    args = parser.parse_args()
    files, kernels = load_cases()
    files = files[files.variant_id.isin(kernels)]
    family = files.family.fillna(files.model_name.map(lambda n: "residual_cnn" if n.startswith("resnet") else None))
    files = files.assign(family=family.fillna(files.model_name))
    train = files[~files.held_out]
    start = time.perf_counter()
    rules = learn_rules(((model_of(r), kernels[r.variant_id]) for r in train.itertuples()), "cuda", ORT_VERSION, DEVICE)
    learn_seconds = time.perf_counter() - start
    rules.provenance["held_out_variants_excluded"] = sorted(files[files.held_out].variant_id)
    rules.provenance["tables"] = str(TABLES)
    rules.save(RULES_FILE)
    results = evaluate(rules, files, kernels, files)
    report: dict = {
        "learn_seconds": learn_seconds,
        "rules": len(rules.rules),
        "train": summary([r for r in results if not r["held_out"]]),
        "held_out": summary([r for r in results if r["held_out"]]),
        "all": summary(results),
        "per_variant": results,
    }
    if args.leave_one_family_out:
        lofo = {}
        for name in sorted(files.family.unique()):
            keep = files[(files.family != name)]
            learned = learn_rules(
                ((model_of(r), kernels[r.variant_id]) for r in keep.itertuples()), "cuda", ORT_VERSION, DEVICE
            )
            lofo[name] = summary(evaluate(learned, files, kernels, files[files.family == name]))
            print(name, lofo[name], flush=True)
        report["leave_one_family_out"] = lofo
    (HERE / "cuda_agreement.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: report[k] for k in ("learn_seconds", "rules", "train", "held_out", "all")}, indent=1))


if __name__ == "__main__":
    main()
