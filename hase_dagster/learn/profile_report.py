"""Reports of operator profiling (issue 14 A): markdown per configuration from its ``summary.json``
(:mod:`hase_dagster.measure.op_profile`), and a comparison across the grid with plots of each
category's share against batch size and sequence length."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hase_dagster.analysis.aten_ops import CATEGORIES

UI_PLOT_WIDTH_PX = 640  # what the Dagster UI's metadata dialog shows without scaling
# The runtime calls HTA 0.5.0's launch statistics take for kernel launches (get_cuda_kernel_launch_stats in
# hta/analyzers/cuda_kernel_analysis.py); cuLaunchKernel, cuLaunchKernelEx and cudaGraphLaunch are not
# among them (its symbol table's launch query adds cuLaunchKernel, not cuLaunchKernelEx).
HTA_LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC")
ORT_KERNEL_CATEGORY_NOTE = (
    "ORT's CUDA kernels are put in categories by kernel name, not by the node that launched them: "
    "cuDNN runs part of a Conv as CUTLASS GEMMs (counted matrix), its bias add as "
    "`op_generic_tensor_kernel` (elementwise) and its NCHW/NHWC conversions (memory), so on the CNNs "
    "convolution is undercounted. ORT's CUDA EP also runs fp32 MatMul/Conv in TF32 (`use_tf32` is on "
    "by default: `tensorop_s1688gemm`, `tf32f32` kernels) where eager PyTorch here runs matmuls in "
    "strict fp32 (`sgemm`)."
)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _ms(value: float) -> str:
    return f"{value:.3f}"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _launch(kernel: dict[str, Any]) -> str:
    grid, block = kernel.get("grid"), kernel.get("block")
    if grid is None and block is None:
        return "-"
    return f"grid {grid} block {block}"


def top_ops(summary: dict[str, Any], n: int = 3) -> list[tuple[str, float]]:
    """The ``n`` operators with the largest self time and their shares."""
    return [(r["op"], float(r["share"])) for r in summary["ops"][:n]]


def configuration_report(summary: dict[str, Any], top_n: int = 10) -> str:
    """The markdown report of one configuration: setup, totals, the top-N with shares, categories,
    CUDA kernels, ``native_functions.yaml`` entries and source files, the ORT side and HTA."""
    config, device = summary["config"], summary["device"]
    gpu = device == "cuda"
    self_key, total_key = ("self_device_ms", "total_device_ms") if gpu else ("self_cpu_ms", "total_cpu_ms")
    size = f"sequence length {config['size']}" if config["kind"] == "bert" else f"{config['size']} px"
    lines = [
        f"# Operator profile: {config['key']}",
        "",
        "## Setup",
        "",
        f"- model **{config['model']}** ({config['kind']}), batch {config['batch_size']}, {size}, fp32, random weights",
        f"- device: {summary['device_name']} ({device}), {summary['date']}; torch {summary['versions']['torch']}, "
        f"transformers {summary['versions']['transformers']}, HTA {summary['versions']['hta']}; "
        f"{summary['threads']} CPU threads",
        f"- `torch.profiler`: CPU{' + CUDA' if gpu else ''} activities, record_shapes, with_stack; "
        f"{summary['steps']} profiled forward passes after warm-up; times are per pass",
        f"- trace: `{Path(summary['trace']).name}` ({summary['trace_bytes'] / 1e6:.1f} MB gzipped; opens in "
        "Perfetto and chrome://tracing)",
        "",
        "## Totals",
        "",
        f"- wall time per forward pass (outside the profiler): **{_ms(summary['wall_ms'])} ms**",
        f"- summed {summary['time_basis']} of aten operators per pass: {_ms(summary['profiled_self_ms'])} ms",
    ]
    ort = summary.get("ort")
    if ort:
        ort_time = ort.get("device_ms") if gpu else ort["wall_ms"]
        lines.append(
            f"- ORT ({ort['ep']} EP, same model exported to ONNX): {_ms(ort['wall_ms'])} ms wall per run"
            + (f", {_ms(ort_time)} ms of CUDA kernels" if gpu and ort_time is not None else "")
            + f"; {ort['kernels']} kernels after ORT's fusions"
        )
    lines += ["", f"## Top {top_n} operators by {summary['time_basis']}", ""]
    rows = []
    for row in summary["ops"][:top_n]:
        rows.append(
            [
                f"`{row['op']}`",
                row["category"],
                f"{row['calls']:g}",
                _ms(row[self_key]),
                _pct(row["share"]),
                _ms(row[total_key]),
            ]
        )
    lines.append(_table(["operator", "category", "calls", "self ms", "share", "total ms"], rows))
    by_total = sorted(summary["ops"], key=lambda r: -r[total_key])[:top_n]
    lines += ["", f"## Top {top_n} by total time (self + the operators it calls)", ""]
    lines.append(
        _table(
            ["operator", "category", "total ms", "self ms"],
            [[f"`{r['op']}`", r["category"], _ms(r[total_key]), _ms(r[self_key])] for r in by_total],
        )
    )
    lines += ["", "## Categories (share of self time)", ""]
    lines.append(
        _table(
            ["category", "share", "ms"],
            [[c, _pct(summary["categories"][c]), _ms(summary["category_ms"][c])] for c in CATEGORIES],
        )
    )
    lines += ["", "## Kernels and sources of the top operators", ""]
    lines.append(
        "Source grades: **header** = declared in a header shipped in the torch wheel (found); **known** = the "
        "file in PyTorch's source tree (`aten/src/ATen/native/`, not shipped in the wheel; checked against the "
        "public tree); **inferred** = guessed from the dispatch function's name, not found anywhere."
    )
    for op in dict.fromkeys(summary["top_self"] + summary["top_total"]):
        detail = summary["op_details"].get(op)
        if not detail:
            continue
        lines += ["", f"### `{op}`", ""]
        native = detail.get("native_function")
        if native:
            lines.append(f"- `native_functions.yaml`: `{native['func']}`")
            dispatch = ", ".join(f"{k}: `{v}`" for k, v in native["dispatch"].items() if k in ("CPU", "CUDA"))
            if dispatch:
                lines.append(f"  - dispatch {dispatch}")
            if native.get("structured_delegate"):
                lines.append(f"  - structured delegate `{native['structured_delegate']}`")
        else:
            lines.append("- `native_functions.yaml`: no entry (not an ATen native function)")
        for source in detail["sources"]:
            lines.append(f"- source ({source['grade']}): `{source['path']}` (`{source['function']}`)")
        if gpu:
            kernels = detail.get("cuda_kernels") or []
            if not kernels:
                lines.append("- CUDA kernels: none launched (a view, or work done by a library call)")
            for kernel in kernels[:5]:
                lines.append(
                    f"- kernel `{kernel['kernel'][:110]}`: {kernel['launches']} launches, "
                    f"{kernel['device_us'] / summary['steps']:.1f} us per pass, {_launch(kernel)}"
                )
    if ort:
        lines += ["", f"## ORT ({ort['ep']} EP): Hase's kernel catalog", ""]
        lines.append(f"Node times: {ort['node_time_kind']}. Fusion map: {ort['fusion_map']}.")
        lines.append("")
        lines.append(
            _table(
                ["kernel family", "category", "kernels", "node us"],
                [
                    [f"`{f['family']}`", f["category"], f["kernels"], f"{f.get('node_us', 0.0):.0f}"]
                    for f in ort["families"][:15]
                ],
            )
        )
        if gpu and ort.get("cuda_kernels"):
            lines += ["", "CUDA kernels ORT ran (CUPTI, per run):", ""]
            lines.append(
                _table(
                    ["kernel", "category", "launches", "device us", "launch"],
                    [
                        [
                            f"`{k['kernel'][:90]}`",
                            k["category"],
                            f"{k['launches']:g}",
                            f"{k['device_us']:.1f}",
                            _launch(k),
                        ]
                        for k in ort["cuda_kernels"][:12]
                    ],
                )
            )
        lines += ["", "### Which aten operators ORT fused into which kernel family", ""]
        lines.append(
            "Joined on the module scope the ONNX export writes into node names: an aten operator called in module "
            "M is matched to the ORT kernels that absorbed a node of scope M of the op types it exports to. "
            "Unmapped calls left no node in their scope: folded at export (BatchNorm into the Conv before it, "
            "constant shapes) or written in the parent module's scope."
        )
        lines.append("")
        lines.append(
            _table(
                ["aten operator", "calls", "ORT kernel families (calls whose module holds one)", "unmapped"],
                [
                    [
                        f"`{m['op']}`",
                        m["calls"],
                        ", ".join(f"`{f}` ({n})" for f, n in sorted(m["families"].items(), key=lambda kv: -kv[1])),
                        m["unmapped_calls"],
                    ]
                    for m in ort["aten_to_families"][:15]
                ],
            )
        )
        lines += ["", "### Eager PyTorch against ORT, per category", ""]
        basis = "CUDA kernel time (CUPTI; ORT's kernels by name)" if gpu else "CPU time (ORT: its profiler per node)"
        lines.append(f"Basis: {basis}.")
        lines.append("")
        lines.append(
            _table(
                ["category", "PyTorch ms", "PyTorch share", "ORT ms", "ORT share"],
                [
                    [
                        c,
                        _ms(summary["category_ms"][c]),
                        _pct(summary["categories"][c]),
                        _ms(ort.get("category_ms", {}).get(c, 0.0)),
                        _pct(ort.get("categories", {}).get(c, 0.0)),
                    ]
                    for c in CATEGORIES
                ],
            )
        )
    if gpu and (ort or {}).get("categories"):
        lines += ["", ORT_KERNEL_CATEGORY_NOTE]
    lines += ["", "## HolisticTraceAnalysis", ""]
    lines += _hta_lines(summary.get("hta", {}))
    check = summary.get("cuda_graph_check")
    if check:
        lines += ["", "### HTA on a CUDA-graph replay (its known gap on inference traces)", ""]
        if "error" in check:
            lines.append(f"- capture failed: {check['error']}")
        else:
            lines.append(
                f"- kernels in the trace: {check['trace_kernels']}; attributed to an aten operator: "
                f"{check['kernels_attributed_to_an_aten_op']}; launch APIs seen: {check['launch_apis']}"
            )
            lines.append(
                f"- HTA kernel-breakdown rows: {check['hta_kernel_breakdown_rows']}; launch-stat rows: "
                f"{check['hta_launch_stats_rows']}; HTA errors: {check['hta_errors'] or 'none'}"
            )
    apis = summary.get("kernel_attribution", {}).get("launch_apis")
    if gpu and apis:
        covered = sum(n for api, n in apis.items() if api in HTA_LAUNCH_APIS)
        missed = {api: n for api, n in apis.items() if api not in HTA_LAUNCH_APIS}
        lines.append(
            f"- launches in the eager trace by API: {apis}; HTA 0.5.0's launch statistics match only "
            f"{', '.join(HTA_LAUNCH_APIS)} ({covered} of {sum(apis.values())} launches here; not matched: "
            f"{missed or 'none'}); its launch-stat rows: {summary.get('hta', {}).get('launch_stats_rows', '-')}"
        )
    return "\n".join(lines) + "\n"


def _hta_lines(hta: dict[str, Any]) -> list[str]:
    lines = []
    if not hta.get("ran"):
        return [f"- not run: {hta.get('error', 'unknown reason')}"]
    if hta.get("note"):
        lines.append(f"- {hta['note']}")
    temporal = hta.get("temporal_breakdown")
    if temporal:
        row = temporal[0]
        lines.append(
            "- temporal breakdown (rank 0): "
            + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
            + (f" ({hta['temporal_breakdown_note']})" if hta.get("temporal_breakdown_note") else "")
        )
    kernel_types = hta.get("kernel_type_breakdown")
    if kernel_types:
        lines.append(
            "- kernel types: "
            + ", ".join(
                f"{r.get('kernel_type')} {r.get('percentage', 0):.1f}%" for r in kernel_types if isinstance(r, dict)
            )
        )
    kernels = hta.get("kernel_breakdown")
    if "kernel_breakdown_rows" in hta and not kernels:
        lines.append("- kernel breakdown: no GPU kernel in the trace (0 rows)")
    if kernels:
        lines.append("- top kernels (HTA): " + "; ".join(f"`{str(r.get('name'))[:60]}`" for r in kernels[:3]))
    idle = hta.get("idle_time")
    if idle:
        lines.append(
            "- idle time: "
            + ", ".join(
                f"{r.get('idle_category')} {r.get('idle_time_ratio', 0):.2f}" for r in idle if isinstance(r, dict)
            )
        )
    if "launch_stats_rows" in hta:
        lines.append(
            f"- launch statistics: {hta['launch_stats_rows']} launch rows (kernel launches plus "
            "cudaMemcpyAsync/cudaMemsetAsync, which HTA counts too)"
        )
    for key, value in hta.items():
        if key.endswith("_rounded_error"):
            lines.append(f"- temporal breakdown with HTA's us rounding: failed ({value})")
        elif key.endswith("_error"):
            lines.append(f"- {key.removesuffix('_error')}: failed ({value})")
    return lines


# ----------------------------------------------------------------------------------------------
# Across the grid


def load_summaries(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every ``summary.json`` under ``root`` (one folder per configuration), by model, batch, size."""
    found = [json.loads(p.read_text()) for p in sorted(Path(root).glob("*/summary.json"))]
    return sorted(found, key=lambda s: (s["config"]["model"], s["config"]["batch_size"], s["config"]["size"]))


def share_plot(summaries: list[dict[str, Any]], path: str | os.PathLike[str], width_px: int = 1200) -> Path:
    """Category share against batch size (one panel per model and size) and against sequence length
    (one panel per BERT batch size): stacked bars, one colour per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, str, list[dict[str, Any]]]] = []
    by_batch: dict[tuple[str, int], list[dict[str, Any]]] = {}
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for s in summaries:
        c = s["config"]
        by_batch.setdefault((c["model"], c["size"]), []).append(s)
        if c["kind"] == "bert":
            by_seq.setdefault(c["batch_size"], []).append(s)
    for (model, size), group in sorted(by_batch.items()):
        panels.append((f"{model} {'seq' if group[0]['config']['kind'] == 'bert' else 'px'} {size}", "batch", group))
    for batch, group in sorted(by_seq.items()):
        if len(group) > 1:
            panels.append((f"bert batch {batch}", "seq", group))
    columns = 2 if width_px < 900 else 3
    rows = max(1, -(-len(panels) // columns))
    dpi = 100
    fig, axes = plt.subplots(rows, columns, figsize=(width_px / dpi, 2.6 * rows + 0.8), dpi=dpi, squeeze=False)
    colors = plt.get_cmap("tab10")
    for ax, (title, axis, group) in zip(axes.flat, panels):
        key = "batch_size" if axis == "batch" else "size"
        group = sorted(group, key=lambda s: s["config"][key])
        xs = [str(s["config"][key]) for s in group]
        bottom = [0.0] * len(group)
        for i, category in enumerate(CATEGORIES):
            values = [100 * s["categories"][category] for s in group]
            ax.bar(xs, values, bottom=bottom, color=colors(i), label=category)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("batch size" if axis == "batch" else "sequence length", fontsize=8)
        ax.set_ylabel("% of self time", fontsize=8)
        ax.set_ylim(0, 100)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08 if rows == 1 else 0.05, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def comparison_report(summaries: list[dict[str, Any]], plot_name: str = "category_shares.png") -> str:
    """Markdown across configurations: totals, top-3 operators with shares, category shares, ORT."""
    if not summaries:
        return "# Operator profiling across the grid\n\nNo configuration profiled yet.\n"
    first = summaries[0]
    lines = [
        "# Operator profiling across the grid",
        "",
        f"Device: {first['device_name']} ({first['device']}); {len(summaries)} configurations; "
        f"shares are of {first['time_basis']} of aten operators.",
        "",
        f"![category share vs batch size and sequence length]({plot_name})",
        "",
        "## Top 3 operators per configuration",
        "",
    ]
    rows = []
    for s in summaries:
        ort = s.get("ort") or {}
        gpu = s["device"] == "cuda"
        timing = [_ms(s["wall_ms"]), _ms(ort["wall_ms"]) if ort.get("wall_ms") is not None else "-"]
        if gpu:  # kernel time beside wall time: eager is host-bound where the two differ
            timing += [_ms(s["profiled_self_ms"]), _ms(ort["device_ms"]) if ort.get("device_ms") is not None else "-"]
        rows.append(
            [
                s["config"]["key"],
                *timing,
                "; ".join(f"`{op.removeprefix('aten::')}` {_pct(share)}" for op, share in top_ops(s)),
            ]
        )
    header = ["configuration", "eager wall ms", "ORT wall ms"]
    if first["device"] == "cuda":
        header += ["eager kernels ms", "ORT kernels ms"]
    lines.append(_table([*header, "top 3 (share of self time)"], rows))
    lines += ["", "## Category shares (PyTorch eager)", ""]
    lines.append(
        _table(
            ["configuration", *CATEGORIES],
            [[s["config"]["key"], *[_pct(s["categories"][c]) for c in CATEGORIES]] for s in summaries],
        )
    )
    with_ort = [s for s in summaries if s.get("ort", {}).get("categories")]
    if with_ort:
        lines += ["", "## Category shares (ORT, same model)", ""]
        if first["device"] == "cuda":
            lines += [ORT_KERNEL_CATEGORY_NOTE, ""]
        lines.append(
            _table(
                ["configuration", *CATEGORIES],
                [[s["config"]["key"], *[_pct(s["ort"]["categories"][c]) for c in CATEGORIES]] for s in with_ort],
            )
        )
    return "\n".join(lines) + "\n"


def write_comparison(root: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """Write ``comparison.md``, ``category_shares.png`` and a 640 px copy for the UI under ``out_dir``."""
    summaries = load_summaries(root)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = share_plot(summaries, out / "category_shares.png") if summaries else out / "category_shares.png"
    ui = share_plot(summaries, out / "category_shares-ui.png", width_px=UI_PLOT_WIDTH_PX) if summaries else plot
    report = out / "comparison.md"
    report.write_text(comparison_report(summaries, plot.name))
    return report, plot, ui


def regenerate(root: str | os.PathLike[str], traces: str | os.PathLike[str] | None = None) -> list[Path]:
    """Rewrite every configuration's ``report.md`` and the comparison under ``root`` from the saved
    ``summary.json`` files, without a GPU.

    Args:
        root: the folder of one device's configurations (``results/profiling/h100``).
        traces: a folder with ``<key>/trace.json.gz`` (the run's full output); where a summary records
            a failed HTA temporal breakdown, HTA is run again on that trace and ``summary.json`` updated.

    Returns:
        The reports written.
    """
    from hase_dagster.measure.op_profile import retry_temporal_breakdown

    written = []
    for path in sorted(Path(root).glob("*/summary.json")):
        summary = json.loads(path.read_text())
        hta = summary.get("hta") or {}
        trace = Path(traces) / path.parent.name / "trace.json.gz" if traces else None
        if "temporal_breakdown_error" in hta and trace is not None and trace.exists():
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copy(trace, Path(tmp) / "rank-0.json.gz")
                retry_temporal_breakdown(tmp, hta)
            path.write_text(json.dumps(summary, indent=1, default=str))
        report = path.parent / "report.md"
        report.write_text(configuration_report(summary))
        written.append(report)
    comparison = write_comparison(root, Path(root) / "comparison")
    return [*written, comparison[0]]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=regenerate.__doc__.splitlines()[0] if regenerate.__doc__ else None)
    parser.add_argument("root")
    parser.add_argument("--traces", default=None)
    arguments = parser.parse_args()
    for report in regenerate(arguments.root, arguments.traces):
        print(report)
