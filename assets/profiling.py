"""Operator-level profiling (issue 14 A, group ``profiling``): where the time of a BERT or a zoo CNN
goes, per aten operator and category, on eager PyTorch and on ORT, one partition per configuration
(model x batch size x sequence length or image size), and a comparison across the grid.

The logic is in ``hase_dagster.measure.op_profile`` and ``hase_dagster.learn.profile_report``."""

import base64
import json
from pathlib import Path

import dagster as dg

from assets.analysis import POOL
from hase_dagster.analysis.op_models import ProfileConfig, all_keys, grid, parse_key
from resources.hase import HaseResource

GROUP = "profiling"
profiling_partitions = dg.StaticPartitionsDefinition(all_keys())


def profiling_dir(root: Path, device: str) -> Path:
    """Where the profiles of ``device`` live: one folder per configuration, and ``comparison/``."""
    return root / "profiling" / device


def twin_of(config: ProfileConfig) -> ProfileConfig:
    """The smallest configuration of the same model: its ORT fusion map stands in for larger ones."""
    return ProfileConfig(config.model, 1, min(config.size, 128) if config.kind == "bert" else config.size)


def _image_md(path: Path, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"


@dg.asset(
    partitions_def=profiling_partitions,
    group_name=GROUP,
    pool=POOL,
    kinds={"pytorch", "onnx"},
    check_specs=[dg.AssetCheckSpec("time_accounted", asset="operator_profile")],
    description="torch.profiler (CPU + CUDA activities, shapes, stacks) of one configuration: top aten operators by "
    "self and total time, category shares, their CUDA kernels, native_functions.yaml entries and ATen source files; "
    "the same model on ORT through Hase's kernel catalog; HolisticTraceAnalysis; a gzipped Chrome trace.",
)
def operator_profile(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    from hase_dagster.learn.profile_report import configuration_report, top_ops
    from hase_dagster.measure.op_profile import profile_configuration

    config = parse_key(context.partition_key)
    device = hase.profile().device
    if config not in grid(device):
        context.log.info(f"{config.key} is not in the {device} grid; profiling it all the same")
    root = profiling_dir(hase.paths().root, device)
    out_dir = root / config.key
    summary = profile_configuration(
        config,
        out_dir,
        hase.paths().root / "profiling" / "work" / device,
        device=device,
        twin=twin_of(config),
        # HTA's gap on CUDA-graph replays is checked once, on the smallest BERT configuration.
        with_cuda_graph=device == "cuda" and config == ProfileConfig("bert_base", 1, 128),
        log=context.log.info,
        keep_onnx=device != "cuda",  # the GPU grid's BERT-base files would fill GBs
    )
    report = configuration_report(summary)
    (out_dir / "report.md").write_text(report)
    shares = summary["categories"]
    accounted = abs(sum(shares.values()) - 1.0) < 1e-6 and summary["profiled_self_ms"] > 0
    ort = summary.get("ort", {})
    return dg.MaterializeResult(
        metadata={
            "device": summary["device_name"],
            "wall_ms": float(summary["wall_ms"]),
            "ort_wall_ms": float(ort.get("wall_ms", 0.0)),
            "top_3": ", ".join(f"{op} {100 * share:.1f}%" for op, share in top_ops(summary)),
            "categories": dg.MetadataValue.json({k: round(v, 4) for k, v in shares.items()}),
            "report": dg.MetadataValue.md(report),
            "report_path": dg.MetadataValue.path(str(out_dir / "report.md")),
            "trace": dg.MetadataValue.path(summary["trace"]),
            "seconds": float(summary["seconds"]),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="time_accounted",
                passed=bool(accounted and ort.get("kernels", 0) > 0),
                metadata={
                    "share_sum": float(sum(shares.values())),
                    "ort_kernels": int(ort.get("kernels", 0)),
                    "unattributed_cuda_kernels": int(summary["kernel_attribution"]["unmatched_kernels"]),
                },
            )
        ],
    )


@dg.asset(
    deps=[operator_profile],
    group_name=GROUP,
    kinds={"pytorch"},
    description="Every profiled configuration of the profile's device side by side: top 3 operators with shares, "
    "category shares (eager and ORT), and plots of category share against batch size and sequence length.",
)
def profiling_comparison(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    from hase_dagster.learn.profile_report import write_comparison

    device = hase.profile().device
    root = profiling_dir(hase.paths().root, device)
    report, plot, ui_plot = write_comparison(root, root / "comparison")
    configurations = sorted(p.parent.name for p in root.glob("*/summary.json"))
    context.log.info(f"{len(configurations)} configurations compared")
    text = report.read_text()
    if ui_plot.exists():  # the plot inline, not behind a link (the UI cannot open local files)
        text = text.replace(
            f"![category share vs batch size and sequence length]({plot.name})", _image_md(ui_plot, "category shares")
        )
    return dg.MaterializeResult(
        metadata={
            "configurations": dg.MetadataValue.json(configurations),
            "report": dg.MetadataValue.md(text),
            "plot": dg.MetadataValue.md(_image_md(ui_plot, "category share vs batch size and sequence length"))
            if ui_plot.exists()
            else "no configuration profiled yet",
            "report_path": dg.MetadataValue.path(str(report)),
            "summaries": dg.MetadataValue.json({p.parent.name: str(p) for p in sorted(root.glob("*/summary.json"))}),
            "top_3": dg.MetadataValue.json(
                {
                    json.loads(p.read_text())["config"]["key"]: json.loads(p.read_text())["top_self"][:3]
                    for p in sorted(root.glob("*/summary.json"))
                }
            ),
        }
    )


profiling_assets = [operator_profile, profiling_comparison]

profiling_job = dg.define_asset_job(
    "profiling_job",
    selection=dg.AssetSelection.assets(operator_profile),
    partitions_def=profiling_partitions,
    description="Profile one configuration (model x batch x sequence length / image size) on the profile's device.",
)

profiling_comparison_job = dg.define_asset_job(
    "profiling_comparison_job",
    selection=dg.AssetSelection.assets(profiling_comparison),
    description="Compare every profiled configuration of the profile's device.",
)
