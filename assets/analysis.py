"""The analysis half of the asset graph: zoo export, ORT graphs, kernel catalog, kernel models, DAGs.

Each asset is a thin wrapper: it reads its inputs from the data directory and the warehouse, calls
the domain code in ``hase_dagster``, and replaces its partition's rows.
"""

import functools
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pandas as pd

from assets.partitions import batch_size_of, batch_size_partitions
from hase_dagster.analysis.analyze import CatalogTask, catalog_variant, optimize_and_save, write_variant_kernels
from hase_dagster.analysis.catalog import load_catalog
from hase_dagster.analysis.kernel_models import inputs_path
from hase_dagster.analysis.model_dag import build_dag, save_dag
from hase_dagster.analysis.parallel import map_variants
from hase_dagster.analysis.zoo import ProbeFailure, export_or_skip_probe, export_precision_variant, variants
from resources.hase import HaseResource

GROUP = "analysis"
# One pool slot: DuckDB takes one writing process, and one accelerator is measured at a time.
POOL = "hase_accelerator"


def _markdown_table(frame: pd.DataFrame) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.to_markdown(index=False) if len(frame) else "_empty_")


def _variant_files(hase: HaseResource, batch_size: int) -> pd.DataFrame:
    files = hase.warehouse().query(
        "SELECT variant_id, path FROM model_files WHERE batch_size = ? ORDER BY variant_id", [batch_size]
    )
    if files.empty:
        raise dg.Failure(f"no ONNX models for batch size {batch_size}: materialize onnx_models first")
    return files


@dg.asset(
    partitions_def=batch_size_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"pytorch", "onnx", "duckdb"},
    description="Every zoo model x input size x precision of the profile, exported to ONNX (fp16 and int8 "
    "made from the fp32 file, with their top-1 agreement with it) and run once in ORT.",
)
def onnx_models(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    batch_size = batch_size_of(context)
    profile = hase.profile()
    paths = hase.paths()
    ep = profile.execution_provider
    zoo = variants(profile, batch_size)
    fp32 = [v for v in zoo if v.precision == "fp32"]
    export = functools.partial(export_or_skip_probe, out_dir=paths.models, opset=profile.opset, ep=ep)
    results = map_variants(export, fp32, profile.analysis_workers)
    failed = {r.variant_id: r.error for r in results if isinstance(r, ProbeFailure)}
    for variant_id, error in failed.items():
        context.log.warning(f"design-space probe {variant_id} left out of batch {batch_size}: {error}")
    if failed and len(failed) == len(fp32):
        raise dg.Failure(f"every model of batch {batch_size} failed to export; first: {next(iter(failed.values()))}")
    zoo = [v for v in zoo if v.variant_id not in failed]
    exported = {m.variant_id: m for m in results if not isinstance(m, ProbeFailure)}
    # fp16 and int8 variants are made from the fp32 files just written.
    lower = [(v, exported[v.fp32.variant_id].path) for v in zoo if v.precision != "fp32"]
    convert = functools.partial(export_precision_variant, out_dir=paths.models, ep=ep)
    exported |= {m.variant_id: m for m in map_variants(convert, lower, profile.analysis_workers)}
    rows = []
    for variant in zoo:
        model = exported[variant.variant_id]
        agreement = model.agreement.get("top1_agreement")
        context.log.info(
            f"exported {model.variant_id}: {model.size_bytes / 1e6:.1f} MB"
            + (f", top-1 agreement with fp32 {agreement}" if variant.precision != "fp32" else "")
        )
        rows.append(
            {
                "variant_id": model.variant_id,
                "model_name": model.model_name,
                "input_size": model.input_size,
                "batch_size": batch_size,
                "path": str(model.path),
                "size_bytes": model.size_bytes,
                "opset": model.opset,
                "inputs_json": json.dumps(model.inputs),
                "outputs_json": json.dumps(model.outputs),
                "run_id": context.run_id,
                "created_at": datetime.now(UTC).replace(tzinfo=None),
                "held_out": variant.model.held_out,
                "family": variant.model.family_name,
                "precision": variant.precision,
                "base_variant_id": variant.fp32.variant_id,
                "top1_agreement": agreement,
                "top1_rows": model.agreement.get("top1_rows"),
            }
        )
    frame = pd.DataFrame(rows)
    hase.warehouse().replace_partition("model_files", {"batch_size": batch_size}, frame)
    summary = frame[["variant_id", "precision", "size_bytes", "top1_agreement", "inputs_json", "outputs_json"]]
    left_out = pd.DataFrame([{"variant_id": k, "error": v} for k, v in failed.items()], columns=["variant_id", "error"])
    return dg.MaterializeResult(
        metadata={
            "profile": profile.name,
            "models": len(frame),
            "files": _markdown_table(summary),
            "probes_left_out": len(failed),
            "probes_left_out_why": _markdown_table(left_out),
        }
    )


@dg.asset(
    deps=[onnx_models],
    partitions_def=batch_size_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"onnx", "duckdb"},
    description="The graph ORT runs (ORT_ENABLE_ALL) on the EP that truly runs, every node with shapes.",
)
def optimized_graphs(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    batch_size = batch_size_of(context)
    profile = hase.profile()
    ep = profile.execution_provider
    paths = hase.paths()
    rows = []
    op_counts: Counter[str] = Counter()
    files = _variant_files(hase, batch_size)
    tasks = [
        (source, paths.optimized(ep) / f"{variant_id}.onnx") for variant_id, source in files.itertuples(index=False)
    ]
    graphs = map_variants(
        functools.partial(optimize_and_save, ep=ep, options=profile.ort), tasks, profile.analysis_workers
    )
    for variant_id, (_, target), graph in zip(files["variant_id"], tasks, graphs):
        for node in graph.nodes:
            op_counts[node.qualified_op] += 1
            rows.append(
                {
                    "variant_id": variant_id,
                    "ep": ep,
                    "batch_size": batch_size,
                    "node_index": node.index,
                    "node_name": node.name,
                    "op_type": node.op_type,
                    "domain": node.domain,
                    "provider": node.provider,
                    "attributes_json": json.dumps(node.attributes, default=str),
                    "input_shapes_json": json.dumps([t.to_dict() for t in node.inputs]),
                    "output_shapes_json": json.dumps([t.to_dict() for t in node.outputs]),
                    "in_graph_us": node.in_graph_us,
                    "optimized_path": str(target),
                    "run_id": context.run_id,
                }
            )
        context.log.info(f"{variant_id}: {len(graph.nodes)} nodes on {ep}")
    frame = pd.DataFrame(rows)
    hase.warehouse().replace_partition("optimized_nodes", {"batch_size": batch_size, "ep": ep}, frame)
    ops = pd.DataFrame(sorted(op_counts.items()), columns=["op", "nodes"])
    return dg.MaterializeResult(metadata={"ep": ep, "nodes": len(frame), "ops": _markdown_table(ops)})


@dg.asset(
    deps=[optimized_graphs],
    partitions_def=batch_size_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"onnx", "duckdb", "json"},
    check_specs=[dg.AssetCheckSpec("every_original_op_mapped", asset="kernel_catalog")],
    description="Every kernel ORT runs, named by the original ops it absorbed (Conv_Add_Relu, ...).",
)
def kernel_catalog(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    batch_size = batch_size_of(context)
    profile = hase.profile()
    ep = profile.execution_provider
    paths = hase.paths()
    rows = []
    families: Counter[str] = Counter()
    unmapped: dict[str, list[str]] = {}
    unfingerprinted: dict[str, int] = {}
    zoo = {v.variant_id: v for v in variants(profile, batch_size)}
    tasks = [
        CatalogTask(
            variant_id,
            Path(source),
            paths.optimized(ep) / f"{variant_id}.json",
            paths.catalogs(ep) / f"{variant_id}.json",
            # fp16/int8 variants are fingerprinted themselves: a batch-1 twin would be an fp32 export.
            twin=zoo[variant_id]
            if batch_size > 1 and variant_id in zoo and zoo[variant_id].precision == "fp32"
            else None,
        )
        for variant_id, source in _variant_files(hase, batch_size).itertuples(index=False)
    ]
    catalog = functools.partial(
        catalog_variant, fusion_dir=paths.fusion_maps(ep), opset=profile.opset, options=profile.ort
    )
    for task, (kernels, document, origin) in zip(tasks, map_variants(catalog, tasks, profile.analysis_workers)):
        variant_id = task.variant_id
        context.log.info(f"{variant_id}: fusion map {origin}")
        if document["unmapped_original_ops"]:
            # Fingerprints compare float32 values: an fp16 or int8 variant's tensors (float16, uint8)
            # never match, so its kernels keep ORT's op names (QLinearConv...) and the check covers fp32.
            if variant_id in zoo and zoo[variant_id].precision != "fp32":
                unfingerprinted[variant_id] = len(document["unmapped_original_ops"])
            else:
                unmapped[variant_id] = document["unmapped_original_ops"]
        for kernel in kernels:
            families[kernel.family] += 1
            entry = kernel.to_dict()
            rows.append(
                {
                    "variant_id": variant_id,
                    "ep": ep,
                    "batch_size": batch_size,
                    "kernel_order": kernel.order,
                    "node_name": kernel.node_name,
                    "family": kernel.family,
                    "instance_id": kernel.instance_id,
                    "precision": kernel.precision,
                    "op_type": kernel.op_type,
                    "domain": kernel.domain,
                    "absorbed_ops_json": json.dumps(kernel.absorbed_ops),
                    "attributes_json": json.dumps(kernel.attributes, default=str),
                    "inputs_json": json.dumps(entry["inputs"]),
                    "outputs_json": json.dumps(entry["outputs"]),
                    "flops": kernel.flops,
                    "input_bytes": kernel.input_bytes,
                    "output_bytes": kernel.output_bytes,
                    "weight_bytes": kernel.weight_bytes,
                    "in_graph_us": kernel.in_graph_us,
                    "run_id": context.run_id,
                }
            )
        context.log.info(f"{variant_id}: {len(kernels)} kernels, {dict(Counter(k.family for k in kernels))}")
    frame = pd.DataFrame(rows)
    hase.warehouse().replace_partition("kernels", {"batch_size": batch_size, "ep": ep}, frame)
    family_table = pd.DataFrame(families.most_common(), columns=["family", "kernels"])
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "kernels": len(frame),
            "families": len(families),
            "instances": int(frame["instance_id"].nunique()) if len(frame) else 0,
            "family_counts": _markdown_table(family_table),
            "kernels_per_precision": _markdown_table(
                frame.groupby("precision").size().reset_index(name="kernels") if len(frame) else frame
            ),
            "unfingerprinted_precision_variants": dg.MetadataValue.json(unfingerprinted),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="every_original_op_mapped",
                passed=not unmapped,
                metadata={"unmapped": dg.MetadataValue.json(unmapped)},
            )
        ],
    )


@dg.asset(
    deps=[kernel_catalog],
    partitions_def=batch_size_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"onnx", "duckdb"},
    description="One standalone, validated ONNX model per distinct kernel instance, with dummy inputs.",
)
def kernel_onnx(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    batch_size = batch_size_of(context)
    profile = hase.profile()
    ep = profile.execution_provider
    paths = hase.paths()
    written: dict[str, dict] = {}
    variant_ids = _variant_files(hase, batch_size)["variant_id"].tolist()
    tasks = [(paths.optimized(ep) / f"{v}.onnx", paths.catalogs(ep) / f"{v}.json") for v in variant_ids]
    write = functools.partial(write_variant_kernels, out_dir=paths.kernels(ep), ep=ep, options=profile.ort)
    for variant_id, kernels in zip(variant_ids, map_variants(write, tasks, profile.analysis_workers)):
        for instance_id, family, path in kernels:
            if instance_id in written:
                written[instance_id]["used_by"] += 1
                continue
            written[instance_id] = {
                "instance_id": instance_id,
                "ep": ep,
                "batch_size": batch_size,
                "family": family,
                "path": str(path),
                "inputs_path": str(inputs_path(path)) if inputs_path(path).exists() else "",
                "used_by": 1,
                "run_id": context.run_id,
            }
        context.log.info(f"{variant_id}: {len(written)} distinct kernel instances so far")
    frame = pd.DataFrame(list(written.values()))
    hase.warehouse().replace_partition("kernel_models", {"batch_size": batch_size, "ep": ep}, frame)
    per_family = frame.groupby("family").size().reset_index(name="instances") if len(frame) else frame
    return dg.MaterializeResult(
        metadata={
            "ep": ep,
            "kernel_models": len(frame),
            "directory": str(paths.kernels(ep)),
            "instances_per_family": _markdown_table(per_family),
        }
    )


@dg.asset(
    deps=[kernel_catalog],
    partitions_def=batch_size_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"networkx", "duckdb", "json"},
    description="Per model variant, the DAG of kernels joined by tensors, with ORT's sequential order.",
)
def model_dags(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    batch_size = batch_size_of(context)
    ep = hase.profile().execution_provider
    paths = hase.paths()
    rows = []
    summary = []
    for variant_id, _ in _variant_files(hase, batch_size).itertuples(index=False):
        _, kernels = load_catalog(paths.catalogs(ep) / f"{variant_id}.json")
        dag = build_dag(variant_id, ep, kernels)
        save_dag(dag, paths.dags(ep) / f"{variant_id}.json")
        for source, target, data in dag.edges(data=True):
            rows.append(
                {
                    "variant_id": variant_id,
                    "ep": ep,
                    "batch_size": batch_size,
                    "src_kernel": source,
                    "dst_kernel": target,
                    "tensor": data["tensor"],
                    "bytes": data["bytes"],
                    "run_id": context.run_id,
                }
            )
        summary.append({"variant_id": variant_id, "kernels": dag.number_of_nodes(), "edges": dag.number_of_edges()})
    frame = pd.DataFrame(rows)
    hase.warehouse().replace_partition("dag_edges", {"batch_size": batch_size, "ep": ep}, frame)
    return dg.MaterializeResult(
        metadata={"ep": ep, "edges": len(frame), "dags": _markdown_table(pd.DataFrame(summary))}
    )


analysis_assets = [onnx_models, optimized_graphs, kernel_catalog, kernel_onnx, model_dags]
