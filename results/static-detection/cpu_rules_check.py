"""How far a CPU fusion-rules file agrees with the fingerprinted kernels of a `make run` data directory, without
learning anything (``cpu_agreement.py`` learns rules from the directory and overwrites the committed file).

Prints the identical share over every variant and the six variants that agree least, each with one kernel only
fingerprinted and one only derived.

    .venv/bin/python results/static-detection/cpu_rules_check.py \\
        results/static-detection/cpu-ort1.31.1.fusion_rules.json DATA_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from hase_dagster.analysis.catalog import load_catalog
from hase_dagster.analysis.fusion_rules import FusionRules
from hase_dagster.analysis.kernel_agreement import compare_kernels
from hase_dagster.analysis.static_detect import detect_kernels


def main() -> int:
    rules, data = FusionRules.load(sys.argv[1]), Path(sys.argv[2])
    total = identical = 0
    rows = []
    for catalog in sorted((data / "catalogs" / "cpu").glob("*.json")):
        document, kernels = load_catalog(catalog)
        variant = document["variant_id"]
        detection = detect_kernels(data / "models" / f"{variant}.onnx", rules, variant)
        agreement = compare_kernels(variant, kernels, detection.kernels)
        total += max(agreement.fingerprinted, agreement.derived)
        identical += agreement.identical
        rows.append((agreement.share, variant, agreement.only_fingerprinted[:1], agreement.only_derived[:1]))
    print(f"identical: {identical} of {total} ({identical / total:.1%})")
    for share, variant, fingerprinted, derived in sorted(rows)[:6]:
        print(f"{variant}: {share:.0%}; only fingerprinted {fingerprinted}, only derived {derived}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
