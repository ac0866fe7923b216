"""Operator-level profiling of one configuration (issue 14 A): ``torch.profiler`` on the eager
PyTorch model, the same model exported to ONNX and run by ORT (Hase's kernel catalog, CUPTI on a
GPU), and HolisticTraceAnalysis on the trace.

Everything lands in one folder per configuration: ``trace.json.gz`` (Chrome/Perfetto), the ORT
trace ``ort_trace.json.gz`` on a GPU, and ``summary.json``, which :mod:`hase_dagster.learn.profile_report`
turns into markdown.
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import json
import os
import platform
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from hase_dagster.analysis.aten_ops import (
    CATEGORIES,
    categorize,
    family_category,
    native_function,
    native_functions_path,
    source_locations,
)
from hase_dagster.analysis.op_models import ProfileConfig, build_model, example_inputs, export_onnx, scope_of

SUMMARY = "summary.json"
TRACE = "trace.json.gz"
ORT_TRACE = "ort_trace.json.gz"
LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")

# ONNX op types an aten operator becomes in the TorchScript export (to find its ORT kernel within
# its module's scope).
ATEN_TO_ONNX: dict[str, set[str]] = {
    "linear": {"MatMul", "Gemm", "Add"},
    "addmm": {"MatMul", "Gemm", "Add"},
    "matmul": {"MatMul"},
    "mm": {"MatMul", "Gemm"},
    "bmm": {"MatMul"},
    "layer_norm": {"LayerNormalization"},
    "native_layer_norm": {"LayerNormalization"},
    "gelu": {"Erf", "Div", "Mul", "Add"},
    "scaled_dot_product_attention": {"MatMul", "Softmax", "Mul", "Div", "Add", "Sqrt", "Transpose"},
    "softmax": {"Softmax"},
    "_softmax": {"Softmax"},
    "embedding": {"Gather"},
    "index_select": {"Gather"},
    "add": {"Add"},
    "mul": {"Mul"},
    "div": {"Div"},
    "tanh": {"Tanh"},
    "view": {"Reshape"},
    "reshape": {"Reshape"},
    "transpose": {"Transpose"},
    "permute": {"Transpose"},
    "conv2d": {"Conv"},
    "convolution": {"Conv"},
    "relu": {"Relu"},
    "hardtanh": {"Clip"},
    "max_pool2d": {"MaxPool"},
    "adaptive_avg_pool2d": {"GlobalAveragePool", "ReduceMean"},
    "flatten": {"Flatten"},
}


def device_of(requested: str | None = None) -> str:
    """``cuda`` when torch sees a GPU (or ``requested``), else ``cpu``."""
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _write_gz(source: Path, target: Path) -> None:
    with source.open("rb") as raw, gzip.open(target, "wb", compresslevel=6) as packed:
        shutil.copyfileobj(raw, packed)


# ----------------------------------------------------------------------------------------------
# PyTorch: torch.profiler


def profile_eager(
    module: Any,
    inputs: dict[str, Any],
    device: str,
    trace_path: Path,
    warmup: int = 3,
    active: int = 5,
    call: Callable[[], Any] | None = None,
) -> tuple[Any, float]:
    """Profile ``active`` forward passes (after ``warmup``) with CPU (+CUDA) activities, shapes and
    stacks; write the Chrome trace gzipped to ``trace_path``. Each pass is one profiler step
    (``ProfilerStep#N``), which HTA reads. Returns the profiler and the wall time per pass (ms,
    timed outside the profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    run = call or (lambda: module(**inputs))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.inference_mode():
        for _ in range(warmup):
            run()
        _sync(device)
        started = time.perf_counter()
        for _ in range(active):
            run()
        _sync(device)
        wall_ms = (time.perf_counter() - started) * 1e3 / active
        with profile(
            activities=activities,
            record_shapes=True,
            with_stack=True,
            schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
        ) as prof:
            for _ in range(active + 1):
                run()
                _sync(device)
                prof.step()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        _write_gz(raw, trace_path)
    return prof, wall_ms


def op_table(prof: Any, device: str, steps: int) -> list[dict[str, Any]]:
    """Per aten operator (summed over calls), per profiled pass: calls, self and total CPU time,
    self and total device time (ms), and its category. Only ``aten::`` operators: runtime calls and
    annotations are not operators."""
    rows = []
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        rows.append(
            {
                "op": event.key,
                "category": categorize(event.key),
                "calls": event.count / steps,
                "self_cpu_ms": event.self_cpu_time_total / 1e3 / steps,
                "total_cpu_ms": event.cpu_time_total / 1e3 / steps,
                "self_device_ms": getattr(event, "self_device_time_total", 0.0) / 1e3 / steps,
                "total_device_ms": getattr(event, "device_time_total", 0.0) / 1e3 / steps,
            }
        )
    self_key = "self_device_ms" if device == "cuda" else "self_cpu_ms"
    rows.sort(key=lambda r: -r[self_key])
    return rows


def category_shares(rows: list[dict[str, Any]], key: str, category_of: str = "category") -> dict[str, float]:
    """Each category's share of the summed ``key`` over ``rows`` (0..1, every category present)."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for row in rows:
        totals[row[category_of]] = totals.get(row[category_of], 0.0) + float(row[key])
    whole = sum(totals.values())
    return {c: (v / whole if whole > 0 else 0.0) for c, v in totals.items()}


def _load_trace(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle).get("traceEvents", [])


def kernels_by_op(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The CUDA kernels of each aten operator, read from a Chrome trace.

    Each kernel is matched to its launch (``args.correlation``), and the launch to the operators
    open on its thread at that moment: ``self`` counts it for the innermost operator only,
    ``inclusive`` for every enclosing one (so ``aten::linear`` lists ``aten::addmm``'s GEMM).
    Per kernel name: launches, device time (us), and the grid/block of the first launch.

    Returns ``{"self": {op: {kernel: {...}}}, "inclusive": {...}, "launch_apis": {name: count},
    "kernels": n, "unmatched_kernels": n}``.
    """
    launches: dict[Any, dict[str, Any]] = {}
    kernels = []
    ops_by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    api_counts: dict[str, int] = defaultdict(int)
    for event in events:
        if event.get("ph") != "X":
            continue
        cat = event.get("cat", "")
        if cat == "cpu_op":
            ops_by_tid[event.get("tid")].append(event)
        elif cat in ("cuda_runtime", "cuda_driver"):
            correlation = (event.get("args") or {}).get("correlation")
            if correlation is not None:
                launches[correlation] = event
            if any(event.get("name", "").startswith(n) for n in LAUNCH_NAMES):
                api_counts[event["name"]] += 1
        elif cat == "kernel":
            kernels.append(event)
    # Per thread: operators sorted by start (outer before inner at equal starts), each with its
    # parent (operators nest). The operators open at time t are the last one starting before t or
    # one of its ancestors, and all of that one's ancestors: a walk up, not a scan.
    ordered: dict[Any, list[dict[str, Any]]] = {}
    parents: dict[Any, list[int]] = {}
    starts: dict[Any, list[float]] = {}
    for tid, ops in ops_by_tid.items():
        ops = sorted(ops, key=lambda e: (e["ts"], -e.get("dur", 0)))
        parent, stack = [-1] * len(ops), list[int]()
        for i, op in enumerate(ops):
            while stack and ops[stack[-1]]["ts"] + ops[stack[-1]].get("dur", 0) <= op["ts"]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
        ordered[tid], parents[tid], starts[tid] = ops, parent, [e["ts"] for e in ops]
    own: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    inclusive: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    unmatched = 0

    def add(table: dict[str, dict[str, Any]], kernel: dict[str, Any]) -> None:
        args = kernel.get("args") or {}
        entry = table.setdefault(
            kernel["name"],
            {"launches": 0, "device_us": 0.0, "grid": args.get("grid"), "block": args.get("block")},
        )
        entry["launches"] += 1
        entry["device_us"] += float(kernel.get("dur", 0.0))

    for kernel in kernels:
        launch = launches.get((kernel.get("args") or {}).get("correlation"))
        if launch is None or launch.get("tid") not in ordered:
            unmatched += 1
            continue
        tid, t = launch["tid"], launch["ts"]
        ops, parent = ordered[tid], parents[tid]
        index = bisect.bisect_right(starts[tid], t) - 1
        while index >= 0 and not ops[index]["ts"] <= t <= ops[index]["ts"] + ops[index].get("dur", 0):
            index = parent[index]
        enclosing = []  # from the innermost outwards
        seen: set[str] = set()
        while index >= 0:
            enclosing.append(ops[index])
            index = parent[index]
        aten = [op for op in enclosing if op.get("name", "").startswith("aten::")]
        if not aten:
            unmatched += 1
            continue
        # ``enclosing`` runs from the innermost outwards (latest start first).
        add(own[aten[0]["name"]], kernel)
        for op in aten:
            if op["name"] not in seen:
                seen.add(op["name"])
                add(inclusive[op["name"]], kernel)
    return {
        "self": dict(own),
        "inclusive": dict(inclusive),
        "launch_apis": dict(api_counts),
        "kernels": len(kernels),
        "unmatched_kernels": unmatched,
    }


# Kernel names (CUDA) -> category, for ORT's kernels and as a cross-check of eager PyTorch's.
_KERNEL_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("fmha", "flash", "attention", "softmax", "Softmax")),
    ("convolution", ("conv", "Conv", "implicit_gemm", "winograd", "fprop", "dgrad", "depthwise")),
    ("normalization", ("LayerNorm", "layer_norm", "layernorm", "batch_norm", "BatchNorm", "bn_fw", "Normalization")),
    ("matrix", ("gemm", "Gemm", "GEMM", "cutlass", "sm90_xmma", "sm80_xmma", "cublas", "Matmul", "matmul")),
    ("activation", ("gelu", "Gelu", "relu", "Relu", "tanh", "Tanh", "clamp", "Clip", "hardtanh")),
    ("embedding", ("gather", "Gather", "index_select", "indexSelect", "embedding")),
    ("memory", ("copy", "Copy", "transpose", "Transpose", "nchwToNhwc", "nhwcToNchw", "Memcpy", "memcpy", "cat")),
    ("elementwise", ("elementwise", "Elementwise", "ElementWise", "vectorized", "Add", "Mul", "Div", "Where")),
)


def kernel_category(name: str) -> str:
    """The category of a CUDA kernel from its name (first matching pattern group), else ``other``."""
    for category, patterns in _KERNEL_PATTERNS:
        if any(p in name for p in patterns):
            return category
    return "other"


# ----------------------------------------------------------------------------------------------
# Which module each aten operator runs in (to join with the ONNX export's scopes)


@contextlib.contextmanager
def _module_annotations(module: Any) -> Iterator[None]:
    """Every submodule's forward inside a ``module::<path>`` profiler annotation."""
    import torch

    handles, open_ranges = [], []
    for path, sub in module.named_modules():

        def pre(_mod: Any, _args: Any, path: str = path) -> None:
            scope = torch.profiler.record_function(f"module::{path}")
            scope.__enter__()
            open_ranges.append(scope)

        def post(_mod: Any, _args: Any, _out: Any) -> None:
            open_ranges.pop().__exit__(None, None, None)

        handles.append(sub.register_forward_pre_hook(pre))
        handles.append(sub.register_forward_hook(post))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def aten_ops_by_module(module: Any, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """One forward pass on the CPU thread's profiler with every module annotated: per (innermost
    module path, aten operator) the number of calls. Operators called by other operators are left
    out (their caller stands for them)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), _module_annotations(module), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(**inputs)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "modules.json"
        prof.export_chrome_trace(str(raw))
        events = _load_trace(raw)
    spans = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")),
        key=lambda e: (e.get("tid"), e["ts"], -e.get("dur", 0)),
    )
    counts: dict[tuple[str, str], int] = defaultdict(int)
    stack: list[dict[str, Any]] = []
    current_tid = None
    for event in spans:
        if event.get("tid") != current_tid:
            stack, current_tid = [], event.get("tid")
        while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) <= event["ts"]:
            stack.pop()
        name = event.get("name", "")
        if name.startswith("aten::") and not any(s["name"].startswith("aten::") for s in stack):
            modules = [s["name"].removeprefix("module::") for s in stack if s["name"].startswith("module::")]
            counts[(modules[-1] if modules else "", name)] += 1
        stack.append(event)
    return [{"module": m, "op": op, "calls": n} for (m, op), n in sorted(counts.items())]


def map_aten_to_families(by_module: list[dict[str, Any]], kernels: list[Any]) -> list[dict[str, Any]]:
    """Which Hase kernel families (ORT's kernels) each aten operator ended up in.

    An aten operator called in module ``M`` is matched to the ORT kernels that absorbed an original
    ONNX node of scope ``M`` whose op type is one that operator exports to (:data:`ATEN_TO_ONNX`),
    else to any kernel of scope ``M``. Operators with no node left in their scope were folded away
    at export (BatchNorm into Conv, constant shapes).

    Returns per aten operator: calls and ``{family: ORT kernels}``.
    """
    from hase_dagster.analysis.aten_ops import base_name

    by_scope: dict[str, list[tuple[str, str]]] = defaultdict(list)  # scope -> (op type, family)
    for kernel in kernels:
        for node_name, op_type in zip(kernel.absorbed_ops, kernel.absorbed_op_types):
            by_scope[scope_of(node_name)].append((op_type, kernel.family))
    out: dict[str, dict[str, Any]] = {}
    for row in by_module:
        op, scope = row["op"], row["module"]
        wanted = ATEN_TO_ONNX.get(base_name(op))
        candidates = by_scope.get(scope, [])
        matched = [family for op_type, family in candidates if wanted and op_type in wanted] or [
            family for _, family in candidates
        ]
        entry = out.setdefault(op, {"op": op, "calls": 0, "families": defaultdict(int), "unmapped_calls": 0})
        entry["calls"] += row["calls"]
        if matched:
            for family in set(matched):
                entry["families"][family] += row["calls"]
        else:
            entry["unmapped_calls"] += row["calls"]
    return [{**e, "families": dict(e["families"])} for e in sorted(out.values(), key=lambda e: -e["calls"])]


# ----------------------------------------------------------------------------------------------
# ORT: the same model, exported, through Hase's analysis


def ort_side(
    config: ProfileConfig,
    device: str,
    work: Path,
    twin: ProfileConfig | None,
    runs: int = 10,
    log: Callable[[str], None] = print,
    keep_onnx: bool = True,
) -> tuple[dict[str, Any], list[Any]]:
    """Export ``config`` to ONNX, optimize it for the EP, build Hase's kernel catalog (fusion map
    cached by graph structure, fingerprinted on ``twin``, a smaller configuration of the same model)
    and time its kernels: ORT's profiler per node on the CPU EP; CUPTI device time of every CUDA
    kernel (``torch.profiler`` around ORT runs with IO binding) on the CUDA EP, whose own node
    times are host-side launches.

    Returns the ORT document for ``summary.json`` and the catalog's kernels. With ``keep_onnx`` off,
    the exported and optimized files of ``config`` are removed afterwards (not the twin's).
    """
    from hase_dagster.analysis.catalog import build_catalog
    from hase_dagster.analysis.fusion_reuse import map_fusions_reusing
    from hase_dagster.analysis.graph import optimize_and_profile
    from hase_dagster.core.config import OrtOptions, TimingOptions
    from hase_dagster.measure.runner import ModelRunner

    ep: Literal["cpu", "cuda"] = "cuda" if device == "cuda" else "cpu"
    options = OrtOptions(intra_op_num_threads=1)
    models = work / "onnx"
    source = models / f"{config.key}.onnx"
    started = time.perf_counter()
    if not source.exists():
        export_onnx(config, source, device=device)
    log(f"{config.key}: exported to ONNX in {time.perf_counter() - started:.1f} s")
    optimized = optimize_and_profile(source, work / "optimized" / ep / f"{config.key}.onnx", ep, options)

    def build_twin() -> tuple[Path, Any]:
        assert twin is not None
        twin_source = models / f"{twin.key}.onnx"
        if not twin_source.exists():
            export_onnx(twin, twin_source, device=device)
        return twin_source, optimize_and_profile(twin_source, work / "optimized" / ep / f"{twin.key}.onnx", ep, options)

    fusion, origin = map_fusions_reusing(
        source, optimized, work / "fusion_maps", options, build_twin if twin and twin != config else None
    )
    kernels = build_catalog(config.key, optimized, fusion)
    log(f"{config.key}: {len(kernels)} ORT kernels on {ep} (fusion map: {origin})")
    # The saved optimized graph, not re-optimized: the nodes timed are exactly the catalog's.
    runner = ModelRunner(optimized.optimized_path, ep, options, level="disable")
    timing = runner.time(TimingOptions(warmup=3, min_loops=runs, max_loops=runs, min_seconds=0.0, max_seconds=60.0))
    families: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        entry = families.setdefault(
            kernel.family,
            {"family": kernel.family, "category": family_category(kernel.family, kernel.op_type), "kernels": 0},
        )
        entry["kernels"] += 1
        entry["node_us"] = entry.get("node_us", 0.0) + float(kernel.in_graph_us or 0.0)
    document: dict[str, Any] = {
        "ep": ep,
        "onnx": str(source),
        "fusion_map": origin,
        "kernels": len(kernels),
        "wall_ms": timing.mean_ms,
        "wall_median_ms": timing.median_ms,
        "node_time_kind": "ORT profiler per node (CPU: the work itself)"
        if ep == "cpu"
        else "ORT profiler per node (CUDA EP: host-side launch time, not GPU time)",
        "families": sorted(families.values(), key=lambda f: -f.get("node_us", 0.0)),
    }
    if ep == "cpu":
        rows = [{"category": f["category"], "ms": f["node_us"] / 1e3} for f in families.values()]
        document["categories"] = category_shares(rows, "ms")
        document["category_ms"] = {c: document["categories"][c] * sum(r["ms"] for r in rows) for c in CATEGORIES}
    else:
        document.update(_ort_cuda_kernels(runner, work / ORT_TRACE, runs))
    del runner
    if not keep_onnx and (twin is None or config != twin):
        # BERT-base is 440 MB per export and again per optimized graph: the GPU grid keeps only the twin's.
        source.unlink(missing_ok=True)
        Path(optimized.optimized_path).unlink(missing_ok=True)
        document["onnx"] = f"{source} (removed after profiling)"
    return document, kernels


def _ort_cuda_kernels(runner: Any, trace_path: Path, runs: int) -> dict[str, Any]:
    """CUPTI view of ORT's CUDA kernels (``torch.profiler`` sees them: same process, same context):
    per kernel name launches and device time per run, and the categories by kernel name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            runner.run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "ort.json"
        prof.export_chrome_trace(str(raw))
        _write_gz(raw, trace_path)
        events = _load_trace(raw)
    names: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("cat") == "kernel":
            args = event.get("args") or {}
            entry = names.setdefault(
                event["name"],
                {
                    "kernel": event["name"],
                    "category": kernel_category(event["name"]),
                    "launches": 0,
                    "device_us": 0.0,
                    "grid": args.get("grid"),
                    "block": args.get("block"),
                },
            )
            entry["launches"] += 1
            entry["device_us"] += float(event.get("dur", 0.0))
    rows = [{**v, "launches": v["launches"] / runs, "device_us": v["device_us"] / runs} for v in names.values()]
    rows.sort(key=lambda r: -r["device_us"])
    total_ms = sum(r["device_us"] for r in rows) / 1e3
    shares = category_shares([{"category": r["category"], "us": r["device_us"]} for r in rows], "us")
    return {
        "device_ms": total_ms,
        "cuda_kernels": rows,
        "categories": shares,
        "category_ms": {c: shares[c] * total_ms for c in CATEGORIES},
        "trace": str(trace_path),
    }


# ----------------------------------------------------------------------------------------------
# HolisticTraceAnalysis


def hta_analysis(trace_path: Path, device: str) -> dict[str, Any]:
    """HTA's temporal breakdown, kernel breakdown, idle time and launch statistics of one trace.

    HTA analyses GPU traces: on a trace without GPU kernels (the CPU profile) it is still tried, and
    what it says (or why it fails) is recorded instead of numbers.
    """
    result: dict[str, Any] = {"ran": False}
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        return {**result, "error": f"holistictraceanalysis not importable: {exc}"}
    with tempfile.TemporaryDirectory() as tmp:
        # HTA reads every trace file of a folder, one per rank.
        shutil.copy(trace_path, Path(tmp) / "rank-0.json.gz")
        try:
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                analyzer = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
        except Exception as exc:  # HTA asserts and raises several types on traces it cannot parse
            return {**result, "error": f"HTA could not load the trace: {type(exc).__name__}: {exc}"}
        result["ran"] = True
        breakdown: dict[str, Any] = {}

        def kernel_breakdown(part: int) -> Any:
            if "value" not in breakdown:
                breakdown["value"] = analyzer.get_gpu_kernel_breakdown(visualize=False)
            return breakdown["value"][part]

        for name, call in (
            ("temporal_breakdown", lambda: analyzer.get_temporal_breakdown(visualize=False)),
            ("kernel_type_breakdown", lambda: kernel_breakdown(0)),
            ("kernel_breakdown", lambda: kernel_breakdown(1)),
            ("idle_time", lambda: analyzer.get_idle_time_breakdown(visualize=False)[0]),
            ("launch_stats", lambda: analyzer.get_cuda_kernel_launch_stats(visualize=False)),
        ):
            try:
                with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                    value = call()
                result[f"{name}_rows"] = _rows(value)
                result[name] = _jsonable(value)
            except Exception as exc:
                result[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
        if "temporal_breakdown_error" in result:
            retry_temporal_breakdown(tmp, result)
    if device != "cuda":
        result["note"] = (
            "CPU-only trace: HTA's analyses are of GPU streams (kernels, idle GPU time, launches), so they "
            "have nothing to measure here; what it returned or raised is recorded as is."
        )
    return result


def retry_temporal_breakdown(trace_dir: str, result: dict[str, Any]) -> None:
    """Retry HTA's temporal breakdown with its ns rounding off, in place in ``result``.

    HTA 0.5.0 rounds every event's start up and its end down to whole microseconds, so a kernel
    shorter than 1 us that crosses no microsecond boundary (cuBLAS's split-K memsets, small elementwise
    kernels of an inference trace) gets a duration of -1 us; the merged busy time of all kernels then
    falls below that of the computation kernels alone and ``get_temporal_breakdown`` fails its
    ``non_compute_time >= 0`` assertion. Unrounded times (``HTA_DISABLE_NS_ROUNDING=1``) keep them
    non-negative; the first error stays recorded under ``temporal_breakdown_rounded_error``.
    """
    from hta.trace_analysis import TraceAnalysis

    previous = os.environ.get("HTA_DISABLE_NS_ROUNDING")
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            value = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=True).get_temporal_breakdown(
                visualize=False
            )
        result["temporal_breakdown_rounded_error"] = result.pop("temporal_breakdown_error")
        result["temporal_breakdown_rows"] = _rows(value)
        result["temporal_breakdown"] = _jsonable(value)
        result["temporal_breakdown_note"] = "HTA_DISABLE_NS_ROUNDING=1 (HTA's us rounding gave sub-us kernels -1 us)"
    except Exception as exc:  # still failing: both errors are the finding
        result["temporal_breakdown_error"] += f"; without ns rounding: {type(exc).__name__}: {exc}"
    finally:
        if previous is None:
            os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
        else:
            os.environ["HTA_DISABLE_NS_ROUNDING"] = previous


def _rows(value: Any) -> int:
    """Rows of a data frame, or of every data frame in a dict (HTA's per-rank results)."""
    if isinstance(value, dict):
        return sum(_rows(v) for v in value.values())
    return len(value) if hasattr(value, "__len__") else 0


def _jsonable(value: Any, limit: int = 25) -> Any:
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        return json.loads(value.head(limit).to_json(orient="records"))
    if isinstance(value, dict):
        return {str(k): _jsonable(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, limit) for v in value[:limit]]
    return value


def cuda_graph_check(module: Any, inputs: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """HTA's known gaps on inference traces, checked: the model captured in a CUDA graph and
    replayed under the profiler; how many kernels the trace has against how many HTA's kernel
    breakdown and launch statistics see."""
    import torch

    static = {k: v.clone() for k, v in inputs.items()}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode():
        with torch.cuda.stream(stream):
            for _ in range(3):
                module(**static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            module(**static)
    trace = out_dir / "cuda_graph_trace.json.gz"
    profile_eager(module, static, "cuda", trace, warmup=2, active=3, call=graph.replay)
    events = _load_trace(trace)
    attributed = kernels_by_op(events)
    hta = hta_analysis(trace, "cuda")
    return {
        "trace": str(trace),
        "trace_kernels": attributed["kernels"],
        "kernels_attributed_to_an_aten_op": attributed["kernels"] - attributed["unmatched_kernels"],
        "launch_apis": attributed["launch_apis"],
        "hta_kernel_breakdown_rows": hta.get("kernel_breakdown_rows", 0),
        "hta_launch_stats_rows": hta.get("launch_stats_rows", 0),
        "hta_errors": {k: v for k, v in hta.items() if k.endswith("error")},
    }


# ----------------------------------------------------------------------------------------------
# One configuration, end to end


def profile_configuration(
    config: ProfileConfig,
    out_dir: str | Path,
    work_dir: str | Path,
    device: str | None = None,
    twin: ProfileConfig | None = None,
    top_n: int = 10,
    steps: int = 5,
    with_ort: bool = True,
    with_cuda_graph: bool = False,
    log: Callable[[str], None] = print,
    keep_onnx: bool = True,
) -> dict[str, Any]:
    """Profile ``config`` (eager PyTorch, then ORT) into ``out_dir``; returns and writes ``summary.json``.

    Args:
        config: the model, batch size and sequence length / image size.
        out_dir: the configuration's folder (trace, summary).
        work_dir: shared scratch across configurations (ONNX exports, optimized graphs, fusion maps).
        device: ``cuda`` or ``cpu``; default: ``cuda`` when torch sees a GPU.
        twin: a smaller configuration of the same model whose fusion map stands in (see ``ort_side``).
        top_n: operators listed with kernels, YAML entry and source files.
        steps: profiled forward passes (after one profiler warm-up step and 3 plain warm-ups).
        with_ort: also run the ORT side.
        with_cuda_graph: also check HTA on a CUDA-graph replay (GPU only).
        log: progress lines.
        keep_onnx: keep the ONNX export and ORT's optimized graph in ``work_dir``.

    Returns:
        The summary document (also written as ``out_dir/summary.json``).
    """
    import torch

    device = device_of(device)
    out_dir, work_dir = Path(out_dir), Path(work_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    module = build_model(config).to(device)
    inputs = example_inputs(config, device)
    trace = out_dir / TRACE
    prof, wall_ms = profile_eager(module, inputs, device, trace, active=steps)
    rows = op_table(prof, device, steps)
    del prof
    self_key = "self_device_ms" if device == "cuda" else "self_cpu_ms"
    total_key = "total_device_ms" if device == "cuda" else "total_cpu_ms"
    total_self = sum(r[self_key] for r in rows)
    for row in rows:
        row["share"] = row[self_key] / total_self if total_self else 0.0
    events = _load_trace(trace)
    attributed = kernels_by_op(events)
    del events
    yaml_path = native_functions_path()
    top_self = rows[:top_n]
    top_total = sorted(rows, key=lambda r: -r[total_key])[:top_n]
    details = {}
    for row in {r["op"]: r for r in top_self + top_total}.values():
        entry = native_function(row["op"], yaml_path)
        kernels = attributed["inclusive"].get(row["op"], {})
        details[row["op"]] = {
            "native_function": entry.to_dict() if entry else None,
            "sources": [s.to_dict() for s in source_locations(row["op"], device, yaml_path)],
            "cuda_kernels": sorted(({"kernel": k, **v} for k, v in kernels.items()), key=lambda k: -k["device_us"])[:8],
        }
    by_module = aten_ops_by_module(module.cpu() if device == "cpu" else module, inputs)
    summary: dict[str, Any] = {
        "config": config.to_dict(),
        "device": device,
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {"torch": torch.__version__, "transformers": _version("transformers"), "hta": _version("hta")},
        "threads": torch.get_num_threads(),
        "steps": steps,
        "time_basis": "self device time (CUPTI)" if device == "cuda" else "self CPU time",
        "wall_ms": wall_ms,
        "profiled_self_ms": total_self,
        "ops": rows,
        "top_self": [r["op"] for r in top_self],
        "top_total": [r["op"] for r in top_total],
        "categories": category_shares(rows, self_key),
        "category_ms": {c: category_shares(rows, self_key)[c] * total_self for c in CATEGORIES},
        "op_details": details,
        "trace": str(trace),
        "trace_bytes": trace.stat().st_size,
        "kernel_attribution": {k: attributed[k] for k in ("kernels", "unmatched_kernels", "launch_apis")},
        "native_functions_yaml": str(yaml_path),
    }
    log(f"{config.key}: eager profile on {device} in {time.perf_counter() - started:.1f} s")
    summary["hta"] = hta_analysis(trace, device)
    if with_cuda_graph and device == "cuda":
        try:
            summary["cuda_graph_check"] = cuda_graph_check(module, inputs, out_dir)
        except Exception as exc:  # capture can fail for models with host syncs; that is a finding
            summary["cuda_graph_check"] = {"error": f"{type(exc).__name__}: {exc}"}
    del module
    if device == "cuda":
        torch.cuda.empty_cache()
    if with_ort:
        ort, kernels = ort_side(config, device, work_dir, twin, log=log, keep_onnx=keep_onnx)
        ort["aten_to_families"] = map_aten_to_families(by_module, kernels)
        if device == "cuda" and Path(ort.get("trace", "")).exists():
            shutil.move(ort["trace"], out_dir / ORT_TRACE)
            ort["trace"] = str(out_dir / ORT_TRACE)
        summary["ort"] = ort
    summary["seconds"] = time.perf_counter() - started
    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    return summary


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version({"hta": "holistictraceanalysis"}.get(package, package))
    except PackageNotFoundError:
        return "not installed"
