"""The device profile as markdown with PNG plots: peak TFLOPS per precision against size, Hase's
Triton GEMM against cuBLAS (and why it falls short where it does), bandwidth, overheads and the
measured time slices."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from hase_dagster.measure.device_profile import SKINNY_M


def _table(rows: list[dict[str, Any]], columns: list[str], digits: int = 2) -> str:
    frame = pd.DataFrame(rows)
    present = [c for c in columns if c in frame.columns]
    if frame.empty or not present:
        return "_none_"
    try:
        return frame[present].round(digits).to_markdown(index=False)
    except ImportError:  # pandas writes markdown through tabulate; without it, a plain text table
        return "```\n" + frame[present].round(digits).to_string(index=False) + "\n```"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plotting() -> bool:
    """Whether matplotlib is installed: without it the report has its tables and no plots."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _gemm_plot(rows: list[dict[str, Any]], path: Path, title: str, unit: float, label: str) -> None:
    plt = _plt()
    kinds = sorted({r["kind"] for r in rows})
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        frame = pd.DataFrame([r for r in rows if r["kind"] == kind and r.get("tflops") is not None])
        if frame.empty:
            continue
        group = ["dtype", "threads"] if "threads" in frame.columns and frame["threads"].notna().any() else ["dtype"]
        if "library" in frame.columns and frame["library"].nunique() > 1:
            group = ["library", *group]
        for key, part in frame.groupby(group):
            name = " ".join(str(k) + (" thr" if g == "threads" else "") for g, k in zip(group, key))
            part = part.sort_values("n")
            ax.plot(part["n"], part["tflops"] * unit, marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N = K" + (f" (M = {SKINNY_M})" if kind == "skinny" else " (= M)"))
        ax.set_ylabel(label)
        ax.set_title(f"{title}: {kind}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _triton_plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    frame = pd.DataFrame([r for r in rows if r.get("pct_of_cublas") is not None])
    if frame.empty:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for (dtype, kind), part in frame.groupby(["dtype", "kind"]):
        part = part.sort_values("n")
        style = "-" if kind == "square" else "--"
        left.plot(part["n"], part["pct_of_cublas"], style, marker="o", label=f"{dtype} {kind}")
        line = right.plot(part["n"], part["tflops"], style, marker="o", label=f"Triton {dtype} {kind}")
        right.plot(part["n"], part["cublas_tflops"], style, marker="x", alpha=0.5, color=line[0].get_color())
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N = K")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    left.axhline(100, color="k", lw=0.8)
    left.set_ylabel("Triton as % of cuBLAS")
    right.set_ylabel("TFLOPS (x: cuBLAS)")
    left.set_title("Hase's Triton GEMM against cuBLAS")
    right.set_title("Achieved TFLOPS")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bandwidth_plot(rows: list[dict[str, Any]], peak: float | None, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [f"{r['kernel']} ({r['library']})" for r in rows]
    ax.bar(labels, [r["gbps"] for r in rows])
    if peak:
        ax.axhline(peak, color="r", lw=1, label=f"peak {peak:.0f} GB/s (NVML)")
        ax.legend()
    ax.set_ylabel("GB/s")
    ax.set_title("Memory bandwidth")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _timeslice_plot(timeslice: dict[str, Any], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, scenario in timeslice.get("scenarios", {}).items():
        gaps = scenario.get("gaps") if isinstance(scenario, dict) else None
        if gaps:
            ax.bar(name, gaps["median_us"] / 1e3, yerr=[[0], [max(gaps["p90_us"] - gaps["median_us"], 0) / 1e3]])
    ax.set_ylabel("co-tenant slice, ms (median, bar to p90)")
    ax.set_title("GPU time slices seen by the probe")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def occupancy(row: dict[str, Any], gpu: dict[str, Any]) -> dict[str, Any]:
    """Programs per SM the chosen Triton config allows (registers, shared memory, threads), the
    grid's tiles and waves over the SMs, and the share of the last wave that is full."""
    config, resources = row.get("config") or {}, row.get("resources") or {}
    if not config:
        return {}
    threads = 32 * config["num_warps"]
    limits = [gpu.get("max_threads_per_sm", 2048) // threads]
    if resources.get("registers"):
        limits.append(gpu.get("registers_per_sm", 65536) // (resources["registers"] * threads))
    if resources.get("shared_bytes") and gpu.get("shared_memory_per_sm"):
        limits.append(gpu["shared_memory_per_sm"] // max(resources["shared_bytes"], 1))
    per_sm = max(min(limits), 0)
    tiles = math.ceil(row["m"] / config["BLOCK_M"]) * math.ceil(row["n"] / config["BLOCK_N"])
    slots = per_sm * gpu["sm_count"]
    waves = tiles / slots if slots else float("inf")
    return {
        "programs_per_sm": per_sm,
        "tiles": tiles,
        "waves": waves,
        "last_wave_full_pct": 100.0 * (waves / math.ceil(waves)) if waves and math.isfinite(waves) else None,
        "sms_busy_pct": 100.0 * min(tiles, gpu["sm_count"]) / gpu["sm_count"],
    }


def intensity(row: dict[str, Any]) -> float:
    """FLOPs per byte of the GEMM's compulsory traffic (A and B read once, C written once)."""
    width = 2 if row["dtype"] in ("fp16", "bf16") else 4
    return float(row["flops"] / ((row["m"] * row["k"] + row["k"] * row["n"] + row["m"] * row["n"]) * width))


def explain(row: dict[str, Any], gpu: dict[str, Any], ridge: float | None) -> str:
    """Why a Triton row reaches what it does, from its own numbers: how much of the GPU its grid
    fills, whether the shape is memory-bound on this device, registers spilled."""
    reasons = []
    occ = occupancy(row, gpu)
    if occ:
        if occ["sms_busy_pct"] < 100:
            reasons.append(f"{occ['tiles']} tiles for {gpu['sm_count']} SMs ({occ['sms_busy_pct']:.0f}% of SMs busy)")
        elif occ["last_wave_full_pct"] is not None and occ["last_wave_full_pct"] < 75:
            reasons.append(f"{occ['waves']:.2f} waves: the last one {occ['last_wave_full_pct']:.0f}% full")
        reasons.append(f"{occ['programs_per_sm']} program(s)/SM")
    if ridge and intensity(row) < ridge:
        reasons.append(f"memory-bound ({intensity(row):.0f} FLOP/B < ridge {ridge:.0f})")
    spills = (row.get("resources") or {}).get("spills")
    if spills:
        reasons.append(f"{spills} registers spilled")
    return "; ".join(reasons)


def _ridge(document: dict[str, Any], dtype: str) -> float | None:
    peaks = document.get("peaks", {})
    flops, bandwidth = peaks.get("tflops", {}).get(dtype), peaks.get("bandwidth_gbps")
    return flops * 1e12 / (bandwidth * 1e9) if flops and bandwidth else None


def _triton_section(document: dict[str, Any], lines: list[str]) -> None:
    rows = document.get("triton") or []
    gpu = document.get("gpu", {})
    table = []
    for row in rows:
        config = row.get("config") or {}
        occ = occupancy(row, gpu) if gpu else {}
        table.append(
            {
                **row,
                "tiles": "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) if config else "",
                "warps/stages": f"{config['num_warps']}/{config['num_stages']}" if config else "",
                "regs": (row.get("resources") or {}).get("registers"),
                "smem_KiB": ((row.get("resources") or {}).get("shared_bytes") or 0) / 1024 or None,
                "waves": occ.get("waves"),
                "why": explain(row, gpu, _ridge(document, row["dtype"])) if gpu and "error" not in row else "",
            }
        )
    lines += [
        "## Hase's Triton GEMM against cuBLAS",
        "",
        "Autotuned tiles (`hase_dagster/measure/triton_kernels.py`); both timed by the event timer on the same "
        "inputs; `pct_of_cublas` = cuBLAS ms / Triton ms x 100.",
        "",
        "![Triton vs cuBLAS](triton_vs_cublas.png)",
        "",
        _table(
            table,
            [
                "dtype",
                "kind",
                "m",
                "n",
                "k",
                "tflops",
                "cublas_tflops",
                "pct_of_cublas",
                "tiles",
                "warps/stages",
                "regs",
                "smem_KiB",
                "waves",
                "tune_s",
                "max_rel_error",
                "why",
                "error",
            ],
        ),  # fmt: skip
        "",
    ]
    done = [r for r in rows if r.get("pct_of_cublas") is not None]
    if done:
        lines += [
            "The bar (HookAnalyzer's, on an edge GPU): 70% of cuBLAS on small matrices (N <= 1024) and 15% on "
            "large ones, at every size; judged per precision on its worst row.",
            "",
        ]
    for dtype in dict.fromkeys(r["dtype"] for r in done):
        for label, large, bar in (("small (<= 1024)", False, 70.0), ("large (> 1024)", True, 15.0)):
            part = [r for r in done if r["dtype"] == dtype and (max(r["m"], r["n"]) > 1024) == large]
            if part:
                worst = min(part, key=lambda r: r["pct_of_cublas"])
                lines.append(
                    f"- {dtype} {label}: worst {worst['pct_of_cublas']:.0f}% of cuBLAS ({worst['kind']} "
                    f"{worst['m']}x{worst['n']}x{worst['k']}); the bar is {bar:.0f}%: "
                    f"{'met' if worst['pct_of_cublas'] >= bar else 'NOT met'} over {len(part)} rows"
                )
    if done:
        lines.append("")
    pipelining = document.get("pipelining") or []
    if pipelining:
        lines += [
            "Pipelining: the best tiles of the largest square size again with `num_stages=1` (no K-slice in "
            "flight while the tensor cores work) against their tuned stages.",
            "",
            _table(
                [{**p, **{k: v for k, v in p["config"].items()}} for p in pipelining],
                [
                    "dtype",
                    "m",
                    "BLOCK_M",
                    "BLOCK_N",
                    "BLOCK_K",
                    "num_warps",
                    "num_stages",
                    "ms_stages_1",
                    "ms_stages_2",
                    "ms_stages_3",
                    "ms_stages_4",
                    "ms_stages_5",
                ],
                digits=4,
            ),  # fmt: skip
            "",
        ]


def _timeslice_section(document: dict[str, Any], lines: list[str]) -> None:
    timeslice = document.get("timeslice")
    if not timeslice:
        return
    rows = []
    for name, scenario in timeslice["scenarios"].items():
        if "error" in scenario:
            rows.append({"co-tenant": name, "error": scenario["error"]})
            continue
        gaps, runs = scenario.get("gaps") or {}, scenario.get("probe_runs") or {}
        rows.append(
            {
                "co-tenant": name,
                "window_ms": scenario["window_ms"],
                "switches": gaps.get("count", 0),
                "slice_median_us": gaps.get("median_us"),
                "slice_p10_us": gaps.get("p10_us"),
                "slice_p90_us": gaps.get("p90_us"),
                "slice_max_us": gaps.get("max_us"),
                "probe_run_median_us": runs.get("median_us"),
                "probe_duty_share": scenario["probe_duty_share"],
            }
        )
    lines += [
        "## Time slices",
        "",
        f"A one-warp probe kernel reads `%globaltimer` back to back for {timeslice['duration_s']} s; a jump over "
        f"{timeslice['threshold_us']} us is a time another context held the GPU (`hase_dagster/measure/timeslice.py`).",
        "",
        "![time slices](timeslice.png)",
        "",
        _table(
            rows,
            [
                "co-tenant",
                "window_ms",
                "switches",
                "slice_median_us",
                "slice_p10_us",
                "slice_p90_us",
                "slice_max_us",
                "probe_run_median_us",
                "probe_duty_share",
                "error",
            ],
        ),  # fmt: skip
        "",
    ]


def write_report(document: dict[str, Any], folder: Path) -> Path:
    """Write ``report.md`` and its plots for a profile document into ``folder``; return its path."""
    device = document["device"]
    peaks = document.get("peaks", {})
    plots = _plotting()
    lines = [
        f"# Device profile: {document.get('device_name', device)} ({device})",
        "",
        f"Measured {document.get('date')} on {document.get('environment', {}).get('host')}"
        f"{' (quick)' if document.get('quick') else ''} in {document.get('seconds')} s; "
        f"environment `{document.get('environment')}`.",
        "",
        "## Peaks (roofline figures, `hase_dagster.measure.device_profile.load_roofline`)",
        "",
        _table(
            [{"precision": k, "TFLOPS": v} for k, v in sorted(peaks.get("tflops", {}).items())],
            ["precision", "TFLOPS"],
            3,
        ),
        "",
        f"Best bandwidth: {peaks.get('bandwidth_gbps') or float('nan'):.1f} GB/s"
        + (f"; HBM peak (NVML) {peaks['hbm_peak_gbps']:.0f} GB/s" if peaks.get("hbm_peak_gbps") else ""),
        "",
    ]
    if not plots:
        lines += ["_Plots skipped: matplotlib is not installed here._", ""]
    if document.get("errors"):
        lines += ["## Steps that failed", "", *[f"- {k}: {v}" for k, v in document["errors"].items()], ""]
    gemm = document.get("gemm") or []
    if gemm:
        unit, label = (1e3, "GFLOPS") if device == "cpu" else (1.0, "TFLOPS")
        if plots:
            _gemm_plot(gemm, folder / "gemm_tflops.png", "GEMM", unit, label)
        frame = [{**r, "gflops": r["tflops"] * 1e3} if r.get("tflops") is not None else r for r in gemm]
        lines += [
            "## GEMM" + (" (torch and numpy, fp32)" if device == "cpu" else " (cuBLAS through torch)"),
            "",
            "![GEMM throughput](gemm_tflops.png)",
            "",
            _table(
                frame,
                ["library", "dtype", "kind", "m", "n", "k", "threads", "ms", "tflops", "gflops", "covered", "error"],
                digits=4,
            ),
            "",
        ]
    if document.get("triton"):
        if plots:
            _triton_plot(document["triton"], folder / "triton_vs_cublas.png")
        _triton_section(document, lines)
    if document.get("timer_check"):
        lines += [
            "## The event timer against CUPTI",
            "",
            "CUDA events around the calls (behind a sleep kernel) vs torch.profiler's CUPTI kernel records of the "
            "same calls: the sum of kernel durations, and the span from the first kernel's start to the last "
            "one's end.",
            "",
            _table(
                document["timer_check"],
                [
                    "dtype",
                    "m",
                    "event_ms",
                    "cupti_kernel_sum_ms",
                    "cupti_span_ms",
                    "kernels_per_call",
                    "event_vs_kernel_sum_pct",
                    "event_vs_span_pct",
                    "error",
                ],
                digits=4,
            ),  # fmt: skip
            "",
        ]
    bandwidth = document.get("bandwidth") or []
    if bandwidth:
        peak = document.get("memory", {}).get("peak_gbps")
        if plots:
            _bandwidth_plot(bandwidth, peak, folder / "bandwidth.png")
        lines += [
            "## Memory bandwidth",
            "",
            "STREAM bytes (copy and scale: 2 arrays, triad a = b + s c: 3)"
            + (f"; peak from NVML: {document['memory']}" if peak else "")
            + ".",
            "",
            "![bandwidth](bandwidth.png)",
            "",
            _table(bandwidth, ["kernel", "library", "bytes", "ms", "gbps", "pct_of_peak"], digits=3),
            "",
        ]
    overheads = document.get("overheads") or {}
    if overheads:
        lines += ["## Overheads", ""]
        if overheads.get("launch"):
            lines += [
                _table(
                    overheads["launch"], ["kernel", "host_enqueue_us", "device_us", "round_trip_us", "covered", "error"]
                ),
                "",
            ]
        if overheads.get("ort"):
            lines += [_table(overheads["ort"], ["what", "ep", "median_us", "p90_us", "runs"]), ""]
    if document.get("timeslice"):
        if plots:
            _timeslice_plot(document["timeslice"], folder / "timeslice.png")
        _timeslice_section(document, lines)
    path = folder / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
