"""Kernel-list agreement on the CPU EP, on this machine's fingerprinted catalogs (the CPU profile's
`make run` data directory): rules learned without the profile's held-out models, then applied
to every variant.

Usage: .venv/bin/python results/static-detection/cpu_agreement.py DATA_DIR
       .venv/bin/python results/static-detection/cpu_agreement.py DATA_DIR --rules RULES.json --out REPORT.json
(the second checks a rules file as it is: nothing learned, the committed rules and report left alone)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import onnx
import onnxruntime

from hase_dagster.analysis.catalog import load_catalog
from hase_dagster.analysis.fusion_rules import FusionRules, learn_rules
from hase_dagster.analysis.kernel_agreement import compare_kernels
from hase_dagster.analysis.static_detect import detect_kernels
from hase_dagster.core.config import load_config

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="?", default=Path(".hase_data"))
    parser.add_argument("--rules", type=Path, default=None, help="check this rules file instead of learning one")
    parser.add_argument("--out", type=Path, default=HERE / "cpu_agreement.json", help="where the report goes")
    args = parser.parse_args()
    data = args.data
    profile = load_config().profiles["cpu"]
    held_out = {m.name for m in profile.models if m.held_out}
    cases = []
    for catalog in sorted((data / "catalogs" / "cpu").glob("*.json")):
        document, kernels = load_catalog(catalog)
        model_path = data / "models" / f"{document['variant_id']}.onnx"
        name = document["variant_id"].rsplit("_", 2)[0]
        cases.append((document["variant_id"], model_path, kernels, name in held_out))
    version = onnxruntime.__version__
    start = time.perf_counter()
    if args.rules is not None:
        rules = FusionRules.load(args.rules)
    else:
        rules = learn_rules(((onnx.load(str(p)), k) for _, p, k, h in cases if not h), "cpu", version, "2-core VM CPU")
        rules.provenance["held_out_variants_excluded"] = sorted(v for v, _, _, h in cases if h)
        rules.save(HERE / f"cpu-ort{version}.fusion_rules.json")
    learn_seconds = time.perf_counter() - start
    results = []
    for variant_id, path, kernels, held in cases:
        started = time.perf_counter()
        detection = detect_kernels(path, rules, variant_id)
        seconds = time.perf_counter() - started
        a = compare_kernels(variant_id, kernels, detection.kernels)
        results.append(
            {
                "variant_id": variant_id,
                "held_out": held,
                "fingerprinted": a.fingerprinted,
                "derived": a.derived,
                "identical": a.identical,
                "share": a.share,
                "only_fingerprinted": a.only_fingerprinted,
                "only_derived": a.only_derived,
                "covered_share": detection.coverage["covered_share"],
                "uncovered_patterns": detection.coverage["uncovered_patterns"],
                "detect_seconds": seconds,
            }
        )

    def summary(rows: list[dict]) -> dict:
        total = sum(max(r["fingerprinted"], r["derived"]) for r in rows)
        return {
            "variants": len(rows),
            "kernels_fingerprinted": sum(r["fingerprinted"] for r in rows),
            "identical": sum(r["identical"] for r in rows),
            "share": sum(r["identical"] for r in rows) / total if total else 1.0,
        }

    report = {
        "data_dir": str(data),
        "rules_file": str(args.rules) if args.rules is not None else "learned here",
        "ort_version": version,
        "learn_seconds": learn_seconds,
        "rules": len(rules.rules),
        "train": summary([r for r in results if not r["held_out"]]),
        "held_out": summary([r for r in results if r["held_out"]]),
        "all": summary(results),
        "per_variant": results,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("learn_seconds", "rules", "train", "held_out", "all")}, indent=1))


if __name__ == "__main__":
    main()
