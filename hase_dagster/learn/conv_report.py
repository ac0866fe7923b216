"""The convolution comparison's report (issue 14 B): a table, a log-scale plot of time per
implementation per case, and findings read off the rows: which implementation wins where, what
compiling costs against what it saves per call, and where cuDNN changes algorithm.

Also the command line the GPU host runs without Dagster (``results/conv-implementations/run.sh``)::

    python -m hase_dagster.learn.conv_report measure --device cuda --grid full --precisions fp32 --out DIR
    python -m hase_dagster.learn.conv_report report DIR

``measure`` resumes from ``DIR/rows.jsonl`` and exits 3 when its ``--budget-s`` ran out first.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from hase_dagster.core.errors import HaseError
from hase_dagster.measure.conv_impls import (
    CHANNEL_CONFIGS,
    IMPLEMENTATIONS,
    PRECISIONS,
    REFERENCE,
    TOLERANCE,
    algorithm_of,
    environment,
    grid,
    read_rows,
    run_grid,
)

UI_PLOT_WIDTH_PX = 640
TABLE_COLUMNS = [
    "case",
    "precision",
    "implementation",
    "device_ms",
    "host_ms",
    "kernel_ms",
    "first_call_s",
    "compile_s",
    "tflops",
    "pct_of_conv2d",
    "peak_mem_mb",
    "rel_err",
    "correct",
    "algorithm",
]


@dataclass
class ConvReport:
    """What the report found: the frame with derived columns, winners per case and precision, the
    rows that failed their check, and the files written."""

    frame: pd.DataFrame
    winners: pd.DataFrame
    failures: list[dict[str, Any]]
    findings: list[str]
    markdown: Path
    plot: Path | None
    ui_plot: Path | None
    summary: dict[str, Any] = field(default_factory=dict)

    def ui_plot_markdown(self) -> str:
        """The UI-sized plot as an inline markdown image (Dagster shows it in the metadata panel)."""
        if self.ui_plot is None:
            return "_no plot (matplotlib missing)_"
        encoded = base64.b64encode(self.ui_plot.read_bytes()).decode()
        return f"![time per implementation per case](data:image/png;base64,{encoded})"


def frame_of(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a frame with ``pct_of_conv2d`` (conv2d's time over this one's, x100: above 100 is
    faster than the reference) per case and precision."""
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    ok = frame["status"] == "ok"
    ref = frame[ok & (frame["implementation"] == REFERENCE)].set_index(["case", "precision"])["device_ms"]
    keys = list(zip(frame["case"], frame["precision"]))
    ref_ms = [ref.get(k, math.nan) for k in keys]
    frame["pct_of_conv2d"] = [
        100.0 * r / d if s == "ok" and d and not math.isnan(r) else math.nan
        for r, d, s in zip(ref_ms, frame["device_ms"], frame["status"])
    ]
    if "kernels" in frame.columns:  # names read again: rows measured before a naming rule was added
        frame["algorithm"] = [
            algorithm_of(k) if isinstance(k, list) else a for k, a in zip(frame["kernels"], frame["algorithm"])
        ]
    order = {name: i for i, name in enumerate(IMPLEMENTATIONS)}
    frame["_impl"] = frame["implementation"].map(order)
    frame["_prec"] = frame["precision"].map({p: i for i, p in enumerate(PRECISIONS)})
    frame["_cfg"] = frame["config"].map({c: i for i, c in enumerate(CHANNEL_CONFIGS)})
    frame = frame.sort_values(["_prec", "_cfg", "size", "kernel", "_impl"]).drop(columns=["_impl", "_prec", "_cfg"])
    return frame.reset_index(drop=True)


def winners_of(frame: pd.DataFrame) -> pd.DataFrame:
    """Per case and precision the fastest correct implementation (device time), the runner-up and
    the margin, and conv2d's algorithm there."""
    out = []
    if frame.empty:
        return pd.DataFrame()
    good = frame[(frame["status"] == "ok") & (frame["correct"] == True)]  # noqa: E712
    for (precision, case), part in good.groupby(["precision", "case"], sort=False):
        ranked = part.sort_values("device_ms")
        best = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        ref = part[part["implementation"] == REFERENCE]
        out.append(
            {
                "precision": precision,
                "case": case,
                "config": best["config"],
                "winner": best["implementation"],
                "winner_ms": best["device_ms"],
                "runner_up": second["implementation"] if second is not None else None,
                "margin_x": (second["device_ms"] / best["device_ms"]) if second is not None else None,
                "conv2d_ms": float(ref["device_ms"].iloc[0]) if len(ref) else math.nan,
                "conv2d_algorithm": ref["algorithm"].iloc[0] if len(ref) else None,
            }
        )
    return pd.DataFrame(out)


def check_failures(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows that ran and gave a wrong result (shape, or error over the precision's tolerance)."""
    if frame.empty:
        return []
    bad = frame[(frame["status"] == "ok") & (frame["correct"] != True)]  # noqa: E712
    return [
        {
            "implementation": r["implementation"],
            "case": r["case"],
            "precision": r["precision"],
            "shape_ok": bool(r["shape_ok"]),
            "rel_err": float(r["rel_err"]),
            "tolerance": float(r["tolerance"]),
        }
        for _, r in bad.iterrows()
    ]


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def findings_of(frame: pd.DataFrame, winners: pd.DataFrame) -> list[str]:
    """Plain sentences read off the rows: winners by precision and channel configuration, compile
    cost against savings per call, overhead at tiny sizes, im2col's memory, cuDNN's algorithm changes."""
    notes: list[str] = []
    if frame.empty or winners.empty:
        return ["No implementation ran correctly: nothing to compare."]
    for precision, part in winners.groupby("precision", sort=False):
        counts = part["winner"].value_counts()
        text = ", ".join(f"{name} {n}" for name, n in counts.items())
        by_config = []
        for config, cpart in part.groupby("config", sort=False):
            top = cpart["winner"].value_counts()
            by_config.append(f"{config}: {top.index[0]} ({top.iloc[0]}/{len(cpart)})")
        notes.append(
            f"**{precision}**: fastest per case (of {len(part)}): {text}. By channels: {'; '.join(by_config)}."
        )
    ok = frame[(frame["status"] == "ok")]
    # Compile time against run time: how many calls repay compiling, against eager im2col and conv2d.
    for compiled, eager in (("im2col_torch_compile", "im2col_torch"), ("conv_jax", None), ("im2col_jax", None)):
        rows = ok[ok["implementation"] == compiled]
        if rows.empty:
            continue
        pays = []
        for _, r in rows.iterrows():
            base = ok[(ok["case"] == r["case"]) & (ok["precision"] == r["precision"])]
            against = eager or REFERENCE
            other = base[base["implementation"] == against]
            if other.empty or not r["compile_s"]:
                continue
            saved_ms = float(other["device_ms"].iloc[0]) - float(r["device_ms"])
            pays.append(math.inf if saved_ms <= 0 else r["compile_s"] / (saved_ms / 1e3))
        finite = [p for p in pays if math.isfinite(p)]
        median_compile = float(rows["compile_s"].median())
        against = eager or REFERENCE
        if pays:
            median_calls = _fmt(float(pd.Series(finite).median())) if finite else ""
            payback = f"; where faster, compiling pays back after {median_calls} calls (median)." if finite else "."
            notes.append(
                f"**{compiled}** compiles in {median_compile:.2f} s (median, first call minus a steady one) and is "
                f"faster than {against} in {len(finite)} of {len(pays)} cases{payback}"
            )
    # Overhead: at tiny channel counts host time over device time.
    # Overhead, in the first precision measured (fp32 where it ran).
    first = next((p for p in PRECISIONS if p in set(ok["precision"])), None)
    tiny = ok[(ok["config"] == "tiny") & (ok["precision"] == first)]
    if not tiny.empty and tiny["kernel_ms"].notna().any():
        ratio = (tiny["host_ms"] / tiny["kernel_ms"]).groupby(tiny["implementation"]).median().sort_values()
        notes.append(
            f"**tiny** (batch 2, 4->8 channels, {first}) is overhead: host time per call over GPU kernel time, median: "
            + ", ".join(f"{k} {v:.1f}x" for k, v in ratio.items())
            + "."
        )
    elif not tiny.empty:
        speed = tiny.groupby("implementation")["device_ms"].median().sort_values()
        notes.append(
            f"**tiny** (batch 2, 4->8 channels, {first}) measures per-call overhead: median ms per call "
            + ", ".join(f"{k} {v:.3f}" for k, v in speed.items())
            + "."
        )
    # Memory: the im2col buffer against conv2d's need.
    big = ok[ok["im2col_mb"].notna()].sort_values("im2col_mb")
    if not big.empty:
        r = big.iloc[-1]
        ref = ok[(ok["case"] == r["case"]) & (ok["precision"] == r["precision"]) & (ok["implementation"] == REFERENCE)]
        ref_mem = ref["peak_mem_mb"].iloc[0] if len(ref) else None
        if ref_mem is not None and isinstance(ref_mem, float) and math.isnan(ref_mem):
            ref_mem = None
        notes.append(
            f"**memory**: im2col materializes C*k*k copies of the input; at {r['case']} {r['precision']} the "
            f"column matrix is {r['im2col_mb']:.1f} MB"
            + (f" against {_fmt(ref_mem)} MB for conv2d's whole call" if ref_mem is not None else "")
            + "."
        )
    # cuDNN's algorithm (by its kernel names) along the grid, where it changes.
    ref_rows = ok[ok["implementation"] == REFERENCE]
    for precision, part in ref_rows.groupby("precision", sort=False):
        changes = []
        previous = None
        for _, r in part.iterrows():
            algo = r["algorithm"]
            if previous is not None and algo != previous[1] and previous[0] == r["config"]:
                changes.append(f"{previous[1]} -> {algo} at {r['case']}")
            previous = (r["config"], algo)
        algos = part["algorithm"].value_counts()
        if algos.empty:
            continue
        notes.append(
            f"**conv2d's algorithm ({precision})** by its top kernel: "
            + ", ".join(f"{a} {n}" for a, n in algos.items())
            + (f"; changes along the grid: {'; '.join(changes)}" if changes else "; the same across the grid")
            + "."
        )
    return notes


def _plot(frame: pd.DataFrame, path: Path, width_px: int | None = None) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ok = frame[frame["status"] == "ok"]
    precisions = [p for p in PRECISIONS if p in set(ok["precision"])]
    if not precisions:
        return None
    cases = list(dict.fromkeys(ok["case"]))
    dpi = 100
    width = (width_px / dpi) if width_px else max(8.0, 0.45 * len(cases) + 3)
    fig, axes = plt.subplots(len(precisions), 1, figsize=(width, 3.2 * len(precisions)), squeeze=False, dpi=dpi)
    markers = "osD^vx*"
    for ax, precision in zip(axes[:, 0], precisions):
        part = ok[ok["precision"] == precision]
        for i, name in enumerate(IMPLEMENTATIONS):
            rows = part[part["implementation"] == name].set_index("case")
            if rows.empty:
                continue
            xs = [cases.index(c) for c in rows.index]
            wrong = rows["correct"] != True  # noqa: E712
            ax.plot(xs, rows["device_ms"], marker=markers[i % len(markers)], linestyle="", label=name, markersize=5)
            if wrong.any():
                ax.plot([cases.index(c) for c in rows.index[wrong]], rows["device_ms"][wrong], "rx", markersize=10)
        ax.set_yscale("log")
        ax.set_ylabel(f"{precision}: ms per call")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, rotation=70, fontsize=6 if width_px else 7)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6, ncol=3)
    device = str(ok["device"].iloc[0])
    axes[0, 0].set_title(f"Convolution implementations on {device}: device time per call (log scale; red x: wrong)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(
    rows: list[dict[str, Any]],
    out_dir: Path,
    env: dict[str, Any] | None = None,
    command: str | None = None,
) -> ConvReport:
    """Write ``report.md``, ``conv_implementations.png`` (and a 640 px copy for the UI) and
    ``rows.csv`` into ``out_dir``; return what they say."""
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = frame_of(rows)
    winners = winners_of(frame)
    failures = check_failures(frame)
    findings = findings_of(frame, winners)
    plot = _plot(frame, out_dir / "conv_implementations.png") if not frame.empty else None
    ui_plot = (
        _plot(frame, out_dir / "conv_implementations-ui.png", width_px=UI_PLOT_WIDTH_PX) if not frame.empty else None
    )
    if not frame.empty:
        frame.drop(columns=["kernels"], errors="ignore").to_csv(out_dir / "rows.csv", index=False)
    env = env or {}
    lines = [
        "# Convolution implementations compared (issue 14 B)",
        "",
        f"Written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. "
        + ", ".join(f"{k}: {v}" for k, v in env.items() if v is not None),
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += [
        "Grid: input size x kernel x channel configuration (stride 1, 'same' padding, no bias): "
        + "; ".join(f"**{k}** {v.why}" for k, v in CHANNEL_CONFIGS.items())
        + ". Device time: CUDA events (torch, ORT) or CUPTI kernel time (JAX) on a GPU, wall time on a CPU "
        "(1 thread for every implementation). pct_of_conv2d: conv2d's time over this one's (above 100: faster). "
        "Correctness: max |y - ref| / max |ref| against float64 conv2d of the same rounded inputs, within "
        + ", ".join(f"{p} {t:g}" for p, t in TOLERANCE.items())
        + ".",
        "",
        "## Findings",
        "",
        *[f"- {note}" for note in findings],
        "",
        "## Correctness",
        "",
    ]
    if failures:
        lines += [f"**{len(failures)} rows FAILED their check:**", "", pd.DataFrame(failures).to_markdown(index=False)]
    else:
        checked = int((frame["status"] == "ok").sum()) if not frame.empty else 0
        lines.append(f"All {checked} rows that ran match conv2d within their precision's tolerance.")
    if not frame.empty:
        skipped = frame[frame["status"] != "ok"][["implementation", "precision", "status", "error"]].drop_duplicates(
            ["implementation", "precision", "status"]
        )
        if len(skipped):
            lines += ["", "Not run (one line per implementation and precision):", "", skipped.to_markdown(index=False)]
    lines += ["", "## Winner per case", ""]
    lines.append(winners.round(4).to_markdown(index=False) if not winners.empty else "_none_")
    lines += ["", "## Every row", ""]
    if not frame.empty:
        table = frame[frame["status"] == "ok"][[c for c in TABLE_COLUMNS if c in frame.columns]]
        lines.append(table.round(5).to_markdown(index=False))
        kernels = frame[(frame["status"] == "ok") & frame["kernels"].notna()]
        if len(kernels):
            lines += ["", "## Top kernels per call (profiler)", ""]
            for _, r in kernels.iterrows():
                if not r["kernels"]:
                    continue
                names = "; ".join(f"`{k['name'][:90]}` {k['ms']:.4f} ms x{k['per_call']:g}" for k in r["kernels"][:3])
                lines.append(f"- {r['precision']} {r['case']} {r['implementation']}: {names}")
    if plot is not None:
        lines += ["", f"![time per implementation per case]({plot.name})"]
    markdown = out_dir / "report.md"
    markdown.write_text("\n".join(lines) + "\n")
    summary = {
        "rows": int(len(frame)),
        "ran": int((frame["status"] == "ok").sum()) if not frame.empty else 0,
        "failed_checks": len(failures),
        "winners": winners["winner"].value_counts().to_dict() if not winners.empty else {},
    }
    return ConvReport(frame, winners, failures, findings, markdown, plot, ui_plot, summary)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hase_dagster.learn.conv_report", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    measure = sub.add_parser("measure", help="measure the grid (resumes from OUT/rows.jsonl), then write the report")
    measure.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    measure.add_argument("--grid", choices=["full", "small", "tiny"], default="small")
    measure.add_argument("--precisions", default="fp32", help="comma-separated: fp32,tf32,fp16,bf16")
    measure.add_argument("--implementations", default="", help="comma-separated (default: all)")
    measure.add_argument("--budget-s", type=float, default=None, help="start no new case after this many seconds")
    measure.add_argument("--out", type=Path, required=True)
    report = sub.add_parser("report", help="write the report of a folder's rows.jsonl")
    report.add_argument("out", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``measure`` (exit 0 complete, 3 when the budget ran out) or ``report``; bad input
    prints one ``hase: error:`` line and exits 2."""
    args = _parse(argv)
    try:
        env_path = args.out / "environment.json"
        if args.command == "measure":
            precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
            names = [n.strip() for n in args.implementations.split(",") if n.strip()] or None
            if args.budget_s is not None and args.budget_s <= 0:
                raise HaseError(f"--budget-s must be positive, got {args.budget_s}")
            _, complete = run_grid(grid(args.grid), precisions, args.device, args.out, names, deadline_s=args.budget_s)
            env = environment(args.device)
            env_path.write_text(json.dumps(env, indent=1))
        else:
            if not (args.out / "rows.jsonl").exists():
                raise HaseError(f"{args.out}: no rows.jsonl to report on")
            complete = True
            env = json.loads(env_path.read_text()) if env_path.exists() else {}
        rows = read_rows(args.out / "rows.jsonl")
        command = "python -m hase_dagster.learn.conv_report " + " ".join(sys.argv[1:] if argv is None else argv)
        result = write_report(rows, args.out, env, command)
    except HaseError as exc:
        print(f"hase: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hase: error: interrupted", file=sys.stderr)
        return 2
    print(f"{result.markdown}: {result.summary}")
    return 0 if complete else 3


if __name__ == "__main__":
    sys.exit(main())
