"""Extend the shipped CUDA fusion rules with the fusions ORT makes of hand-written modules (issue 11, set AG).

The teacher: ``hand_ops_set.py``'s networks of seeds 1001-1024 at batch 16 and 1001-1012 at batch 1 (none of set AG's
seeds 901-912), whose catalogs ORT's CUDA EP made on an H200 (``teach_run.sh``, committed in ``hand-ops-teacher/``).
The models are exported again here from their seeds (the graph is the seed's; weights do not matter to a rule).
Rules are learned from them (``analysis.fusion_rules.learn_rules``) and the shipped file is extended with the
patterns it has no rule for (``analysis.fusion_rules.extended``). Then set AG's kernels at batch 16, detected
statically, are compared with ORT's catalogs of them (``hand-ops-teacher/cat-ag``), before and after.

    .venv/bin/python results/static-detection/learn_extra_rules.py [--write]   # --write replaces the shipped file
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from hase_dagster.analysis.catalog import kernel_from_dict
from hase_dagster.analysis.fusion_rules import FusionRules, extended, learn_rules
from hase_dagster.analysis.kernel_agreement import compare_kernels
from hase_dagster.analysis.static_detect import detect_in_model

HERE = Path(__file__).resolve().parent
TEACHER = HERE / "hand-ops-teacher"
SHIPPED = HERE / "h100-cuda-ort1.31.1.fusion_rules.json"
GENERATOR = HERE.parent / "cpu-general" / "hand_ops_set.py"
# catalog folder: (seeds, batch size) of its models
TEACHER_SETS = {"cat-b16": ("1001-1024", 16), "cat-b1": ("1001-1012", 1)}
CHECK_SET = ("cat-ag", "901-912", 16)


def export(folder: Path, seeds: str, batch: int) -> None:
    """``hand_ops_set.py``'s networks of ``seeds`` at ``batch`` into ``folder``."""
    command = [sys.executable, str(GENERATOR), str(folder), "--seeds", seeds, "--batch-sizes", str(batch)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def examples(catalogs: Path, models: Path) -> list[tuple[onnx.ModelProto, list]]:
    """(model, ORT's kernels) of every catalog in ``catalogs``."""
    out = []
    for path in sorted(catalogs.glob("*.json")):
        kernels = [kernel_from_dict(path.stem, "cuda", k) for k in json.loads(path.read_text())["kernels"]]
        out.append((onnx.load(str(models / f"{path.stem}.onnx")), kernels))
    return out


def agreement(rules: FusionRules, pairs: list[tuple[onnx.ModelProto, list]]) -> tuple[int, int]:
    """(kernels detected as ORT ran them, the larger of the two lists' lengths), summed over ``pairs``."""
    same = total = 0
    for model, truth in pairs:
        found = compare_kernels(truth[0].variant_id, truth, detect_in_model(model, rules, truth[0].variant_id).kernels)
        same, total = same + found.identical, total + max(found.fingerprinted, found.derived)
    return same, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace {SHIPPED.name} with the extended rules")
    args = parser.parse_args()
    base = FusionRules.load(SHIPPED)
    if any(e.get("source") == "hand_ops_set" for e in base.provenance.get("extensions", [])):
        raise SystemExit(f"{SHIPPED.name} is extended already")
    with tempfile.TemporaryDirectory() as tmp:
        teacher = []
        for folder, (seeds, batch) in TEACHER_SETS.items():
            export(Path(tmp) / folder, seeds, batch)
            teacher += examples(TEACHER / folder, Path(tmp) / folder)
        extra = learn_rules(teacher, "cuda", base.ort_version, "NVIDIA H200")
        rules = extended(base, extra, "hand_ops_set")
        folder, seeds, batch = CHECK_SET
        export(Path(tmp) / folder, seeds, batch)
        check = examples(TEACHER / folder, Path(tmp) / folder)
        for name, candidate in (("shipped", base), ("extended", rules)):
            same, total = agreement(candidate, check)
            print(
                f"set AG at batch {batch}, {name} rules: {same} of {total} kernels as ORT ran them ({same / total:.1%})"
            )
    print("added:", ", ".join(rules.provenance["extensions"][-1]["families"]))
    if args.write:
        rules.save(SHIPPED)
        print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
