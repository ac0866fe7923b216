"""Fusion rules of the profile's execution provider, learned from the kernel catalog, and the
check that the kernel lists they derive agree with the fingerprinted ones."""

import json
from pathlib import Path

import dagster as dg
import onnx
import onnxruntime

from assets.analysis import kernel_catalog
from hase_dagster.analysis.catalog import load_catalog
from hase_dagster.analysis.fusion_rules import learn_rules
from hase_dagster.analysis.kernel_agreement import agreement_check, compare_kernels
from hase_dagster.analysis.static_detect import detect_kernels
from hase_dagster.core.ort_runtime import device_name
from resources.hase import HaseResource


@dg.asset(
    deps=[kernel_catalog],
    group_name="analysis",
    kinds={"onnx", "json"},
    check_specs=[dg.AssetCheckSpec("rule_kernels_match_fingerprints", asset="fusion_rules")],
    description="Fusion rules (pattern of original ops -> kernel) of the profile's EP, ORT version and device, "
    "learned from every cataloged variant; static kernel detection uses them without the EP.",
)
def fusion_rules(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    ep = hase.profile().execution_provider
    paths = hase.paths()
    # Rules are learned from fingerprinted catalogs: fp16 and int8 variants are not fingerprinted (their
    # tensors are not float32), so their kernels absorb nothing a rule could learn from.
    files = hase.warehouse().query(
        """SELECT DISTINCT variant_id, path FROM model_files WHERE coalesce(precision, 'fp32') = 'fp32'
           ORDER BY variant_id"""
    )
    cases = []
    for variant_id, path in files.itertuples(index=False):
        catalog = paths.catalogs(ep) / f"{variant_id}.json"
        if catalog.exists() and Path(path).exists():
            cases.append((variant_id, path, load_catalog(catalog)[1]))
    if not cases:
        # Tables imported from another machine (`hase import-tables`) have kernels but neither
        # catalogs nor ONNX files here: nothing to learn from, and the rest of the learning
        # stage must still run.
        reason = f"no kernel catalogs with their ONNX models under {paths.root} for {ep}: nothing to learn from"
        context.log.warning(reason)
        return dg.MaterializeResult(
            metadata={"rules": 0, "variants": 0, "skipped": reason},
            check_results=[
                dg.AssetCheckResult(
                    check_name="rule_kernels_match_fingerprints", passed=False, metadata={"skipped": reason}
                )
            ],
        )
    version = onnxruntime.__version__
    rules = learn_rules(((onnx.load(str(p)), k) for _, p, k in cases), ep, version, device_name(ep))
    target = rules.save(paths.root / "fusion_rules" / f"{ep}-ort{version}.fusion_rules.json")
    agreements = [compare_kernels(v, k, detect_kernels(p, rules, v).kernels) for v, p, k in cases]
    passed, report = agreement_check(agreements)
    # Every disagreement goes to a file beside the rules; the check's metadata keeps counts (a
    # failed check's metadata is printed by `hase materialize`).
    report_path = target.with_suffix(".agreement.json")
    report_path.write_text(json.dumps(report, indent=1))
    counts = {
        variant: {side: len(kernels) for side, kernels in sides.items()}
        for variant, sides in report["disagreements"].items()
    }
    context.log.info(f"{len(rules.rules)} rules; rule-derived kernels identical: {report['share']:.1%}")
    return dg.MaterializeResult(
        metadata={"path": str(target), "rules": len(rules.rules), "variants": len(cases), "ort_version": version},
        check_results=[
            dg.AssetCheckResult(
                check_name="rule_kernels_match_fingerprints",
                passed=passed,
                metadata={
                    "identical_share": report["share"],
                    "disagreeing_kernels": dg.MetadataValue.json(counts),
                    "report": str(report_path),
                },
            )
        ],
    )


static_detection_assets = [fusion_rules]
