"""Why a change of batch size stalls resnet18 on ORT's CUDA EP, and which setting removes it (issue 16).

The H100 serving proof (results/serving/h100/batch_times.md) saw every cnn batch whose size differed
from the previous one take 38-383 ms instead of about 1-2 ms, even after every size had been warmed up.
ORT 1.20+ built with cuDNN 9 plans each Conv with the cuDNN frontend, and its ``Conv::UpdateState``
rebuilds the plan whenever the input shape differs from the *previous* run of that node (it keeps one
plan per node, no cache per shape): warming every size cannot help, a session that sees only one shape
never re-plans.

For one configuration (``--config``) this script measures, on one session (or one session per batch
size), the latency of every run of a fixed sequence, in three phases:

- ``first``: every batch size once, in order (first time per shape; each one is also a change);
- ``warm``: every batch size ``--warm`` times in a row (steady state, same shape as the run before);
- ``alternate``: ``--alternate`` runs whose size either repeats the previous one or changes (seeded,
  starting 1, 8, 1, 32, 4, 8 like the executor's real sequences), after every size was warmed.

It writes ``<out>/<config>.json`` with every run (phase, batch, previous batch, changed, first time,
ms) and a summary per batch size: first run, steady median and p90, and in the alternate phase the
median and max after a change and the median when the size repeated. ``--summarize`` merges every
``<config>.json`` of ``<out>`` into ``summary.json`` and ``summary.md``.

Configurations (CUDA; inputs and outputs bound on the device with IO binding, as the executor does):
``exhaustive`` (ORT's default cudnn_conv_algo_search), ``heuristic``, ``default``,
``exhaustive-same-as-requested`` (arena_extend_strategy kSameAsRequested),
``exhaustive-no-max-workspace`` (cudnn_conv_use_max_workspace 0), ``per-batch`` (one EXHAUSTIVE
session per batch size: static shapes per session), ``per-batch-cuda-graph`` (the same with
enable_cuda_graph, inputs and outputs at fixed addresses); on the CPU EP: ``cpu`` and
``cpu-per-batch``.

Usage (repository root): ``python results/serving/stall_study.py --config heuristic --model
/tmp/stall/resnet18.onnx --out $OUT/stall``; ``--export resnet18`` writes the model first (the
serving proof's export: hase_dagster.analysis.serving_models, or the same torch export when Hase's
dependencies are not installed). Needs numpy, onnxruntime(-gpu), and torch/torchvision to export.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# name -> (execution provider, CUDA provider options, one session per batch size, CUDA graph)
CONFIGS: dict[str, tuple[str, dict[str, str], bool, bool]] = {
    "exhaustive": ("cuda", {"cudnn_conv_algo_search": "EXHAUSTIVE"}, False, False),
    "heuristic": ("cuda", {"cudnn_conv_algo_search": "HEURISTIC"}, False, False),
    "default": ("cuda", {"cudnn_conv_algo_search": "DEFAULT"}, False, False),
    "exhaustive-same-as-requested": (
        "cuda",
        {"cudnn_conv_algo_search": "EXHAUSTIVE", "arena_extend_strategy": "kSameAsRequested"},
        False,
        False,
    ),
    "exhaustive-no-max-workspace": (
        "cuda",
        {"cudnn_conv_algo_search": "EXHAUSTIVE", "cudnn_conv_use_max_workspace": "0"},
        False,
        False,
    ),
    "per-batch": ("cuda", {"cudnn_conv_algo_search": "EXHAUSTIVE"}, True, False),
    "per-batch-cuda-graph": ("cuda", {"cudnn_conv_algo_search": "EXHAUSTIVE", "enable_cuda_graph": "1"}, True, True),
    "cpu": ("cpu", {}, False, False),
    "cpu-per-batch": ("cpu", {}, True, False),
}
# Image side of the serving models this script can export (hase_dagster.analysis.serving_models).
IMAGE_SIDE = {"resnet18": 224, "resnet18_112": 112}


def export_model(name: str, path: Path) -> Path:
    """Export the serving model ``name`` with a symbolic batch, as ``hase serving-models`` does.

    Hase's own export is used when its dependencies import; otherwise the same torch export
    (torchvision model, random weights, opset 17, TorchScript exporter, dynamic axis 0 on input and
    output) so that the study runs with only torch, onnx and onnxruntime installed.
    """
    if path.exists():
        return path
    try:
        from hase_dagster.analysis.serving_models import export_serving_models
    except ImportError:  # pydantic or yaml missing: the plain export below is the same one
        pass
    else:
        (written,) = export_serving_models([name], path.parent)
        if written != path:
            written.replace(path)
        return path
    import torch
    import torchvision

    side = IMAGE_SIDE[name]
    module = torchvision.models.get_model("resnet18", weights=None).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".onnx.partial")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.randn(2, 3, side, side),),
            str(partial),
            opset_version=17,
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            do_constant_folding=True,
        )
    partial.replace(path)
    return path


def alternate_sequence(batches: list[int], length: int, seed: int) -> list[int]:
    """A sequence over ``batches``: it starts 1, 8, 1, 32, 4, 8 (the sizes present), then each run
    repeats the previous size or, as often, changes to another one at random."""
    rng = np.random.default_rng(seed)
    sequence: list[int] = [b for b in (1, 8, 1, 32, 4, 8) if b in batches]
    if not sequence:
        sequence = [batches[0]]
    while len(sequence) < length:
        previous = sequence[-1]
        others = [b for b in batches if b != previous]
        if not others or rng.random() < 0.5:
            sequence.append(previous)
        else:
            sequence.append(int(rng.choice(others)))
    return sequence[:length]


class Runner:
    """ORT session(s) for one configuration: ``run(batch)`` runs one batch and returns its wall ms."""

    def __init__(self, model: Path, config: str, batches: list[int], threads: int) -> None:
        import onnxruntime as ort

        self.ort = ort
        ep, options, self.per_batch, self.graph = CONFIGS[config]
        self.ep = ep
        if ep == "cuda":
            try:
                ort.preload_dlls()  # CUDA/cuDNN from the nvidia-* wheels (torch's), as Hase's sessions do
            except Exception:
                pass
            self.providers: list[Any] = [("CUDAExecutionProvider", options), "CPUExecutionProvider"]
        else:
            self.providers = ["CPUExecutionProvider"]
        self.model = model
        self.threads = threads
        self.options = options
        self._sessions: dict[int, Any] = {}
        self._runs: dict[int, Callable[[], None]] = {}
        self.create_s: dict[str, float] = {}
        if not self.per_batch:
            t0 = time.perf_counter()
            shared = self._session()
            self.create_s["shared"] = time.perf_counter() - t0
            self._sessions = dict.fromkeys(batches, shared)
        for batch in batches:
            self._prepare(batch)

    def _session(self) -> Any:
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        session = self.ort.InferenceSession(str(self.model), so, providers=self.providers)
        wanted = "CUDAExecutionProvider" if self.ep == "cuda" else "CPUExecutionProvider"
        if session.get_providers()[0] != wanted:
            raise RuntimeError(f"{wanted} is not available here (ORT fell back to {session.get_providers()})")
        return session

    def _prepare(self, batch: int) -> None:
        if self.per_batch:
            t0 = time.perf_counter()
            self._sessions[batch] = self._session()
            self.create_s[str(batch)] = time.perf_counter() - t0
        session = self._sessions[batch]
        feeds = {}
        for arg in session.get_inputs():
            shape = [batch if i == 0 else d for i, d in enumerate(arg.shape)]
            feeds[arg.name] = np.random.default_rng(batch).uniform(-1, 1, size=shape).astype(np.float32)
        if self.ep == "cuda":
            ort = self.ort
            binding = session.io_binding()
            keep = []
            for name, value in feeds.items():
                device_value = ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0)
                keep.append(device_value)
                binding.bind_ortvalue_input(name, device_value)
            for output in session.get_outputs():
                if self.graph:
                    # A CUDA graph replays fixed addresses: the output is allocated once, here.
                    shape = [batch if i == 0 else d for i, d in enumerate(output.shape)]
                    value = ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0)
                    keep.append(value)
                    binding.bind_ortvalue_output(output.name, value)
                else:
                    binding.bind_output(output.name, "cuda", 0)

            def run_bound(session: Any = session, binding: Any = binding, keep: list = keep) -> None:
                session.run_with_iobinding(binding)  # synchronizes the stream before it returns

            self._runs[batch] = run_bound
        else:

            def run_host(session: Any = session, feeds: dict = feeds) -> None:
                session.run(None, feeds)

            self._runs[batch] = run_host

    def run(self, batch: int) -> float:
        t0 = time.perf_counter()
        self._runs[batch]()
        return (time.perf_counter() - t0) * 1000.0


def _quantile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def summarize_runs(runs: list[dict[str, Any]], batches: list[int]) -> dict[str, Any]:
    """Per batch size: first run, steady state (warm phase, same size as before, first of each block
    left out), and in the alternate phase the runs after a change against the runs that repeated."""
    per_batch: dict[str, Any] = {}
    for batch in batches:
        mine = [r for r in runs if r["batch"] == batch]
        first = [r["ms"] for r in mine if r["first_time"]]
        steady = [r["ms"] for r in mine if r["phase"] == "warm" and not r["changed"]]
        changed = [r["ms"] for r in mine if r["phase"] == "alternate" and r["changed"]]
        same = [r["ms"] for r in mine if r["phase"] == "alternate" and not r["changed"]]
        steady_median = _median(steady)
        changed_median = _median(changed)
        per_batch[str(batch)] = {
            "first_ms": first[0] if first else None,
            "steady_median_ms": steady_median,
            "steady_p90_ms": _quantile(steady, 90),
            "alternate_changed_n": len(changed),
            "alternate_changed_median_ms": changed_median,
            "alternate_changed_max_ms": max(changed) if changed else None,
            "alternate_same_n": len(same),
            "alternate_same_median_ms": _median(same),
            # What a change of size costs beyond the steady run (median over the alternate phase).
            "change_cost_median_ms": (
                changed_median - steady_median if changed_median is not None and steady_median is not None else None
            ),
        }
    alternate = [r for r in runs if r["phase"] == "alternate"]
    changed = [r["ms"] for r in alternate if r["changed"]]
    same = [r["ms"] for r in alternate if not r["changed"]]
    costs = [v["change_cost_median_ms"] for v in per_batch.values() if v["change_cost_median_ms"] is not None]
    steadies = [v["steady_median_ms"] for v in per_batch.values() if v["steady_median_ms"] is not None]
    return {
        "per_batch": per_batch,
        "alternate_changed_n": len(changed),
        "alternate_changed_median_ms": _median(changed),
        "alternate_changed_p90_ms": _quantile(changed, 90),
        "alternate_changed_max_ms": max(changed) if changed else None,
        "alternate_changed_over_20ms": sum(v > 20 for v in changed) / len(changed) if changed else None,
        "alternate_same_median_ms": _median(same),
        "alternate_same_max_ms": max(same) if same else None,
        "change_cost_median_ms": _median(costs),
        # Stalls that survive a warm-up of every size, the question the serving proof left open: a
        # change costs (median over sizes) more than 5 ms and more than a steady run takes.
        "stall_recurs_after_warmup": bool(costs) and (_median(costs) or 0.0) > max(5.0, _median(steadies) or 0.0),
    }


def study(model: Path, config: str, batches: list[int], warm: int, alternate: int, seed: int, threads: int) -> dict:
    """Measure ``config`` (see the module docstring) and return the JSON document."""
    import onnxruntime as ort

    started = time.perf_counter()
    runner = Runner(model, config, batches, threads)
    runs: list[dict[str, Any]] = []
    seen: set[int] = set()
    previous: int | None = None

    def record(phase: str, batch: int) -> None:
        nonlocal previous
        ms = runner.run(batch)
        runs.append(
            {
                "phase": phase,
                "batch": batch,
                "prev_batch": previous,
                "changed": previous is not None and previous != batch,
                "first_time": batch not in seen,
                "ms": round(ms, 4),
            }
        )
        seen.add(batch)
        previous = batch

    for batch in batches:
        record("first", batch)
    for batch in batches:
        for _ in range(warm):
            record("warm", batch)
    for batch in alternate_sequence(batches, alternate, seed):
        record("alternate", batch)
    ep, options, per_batch, graph = CONFIGS[config]
    return {
        "config": config,
        "ep": ep,
        "provider_options": options,
        "sessions": "per-batch" if per_batch else "shared",
        "cuda_graph": graph,
        "model": str(model),
        "batches": batches,
        "warm": warm,
        "alternate": alternate,
        "seed": seed,
        "ort_version": ort.__version__,
        "python": platform.python_version(),
        "device": _device_name(ep),
        "session_create_s": runner.create_s,
        "wall_s": time.perf_counter() - started,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summarize_runs(runs, batches),
        "runs": runs,
    }


def _device_name(ep: str) -> str:
    if ep == "cuda":
        try:
            import pynvml

            pynvml.nvmlInit()
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            return "cuda:0"
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_summary(out: Path) -> Path:
    """Merge every ``<config>.json`` under ``out`` into ``summary.json`` (no per-run rows) and a
    Markdown table ``summary.md``; returns the Markdown path."""
    docs = []
    for path in sorted(out.glob("*.json")):
        if path.name == "summary.json":
            continue
        doc = json.loads(path.read_text())
        if "summary" in doc:
            docs.append(doc)
    merged = [{k: v for k, v in d.items() if k != "runs"} for d in docs]
    (out / "summary.json").write_text(json.dumps(merged, indent=1) + "\n")
    lines = [
        "# Batch-size change stall study (issue 16)",
        "",
        "Written by `results/serving/stall_study.py --summarize`. Times are wall ms of one run "
        "(`run_with_iobinding` on CUDA, `run` on the CPU EP). *Changed*: the size differs from the run "
        "before, after every size was warmed; *same*: it repeats.",
        "",
        "| config | device | ORT | sessions | create s | changed: n / median / p90 / max ms | share > 20 ms "
        "| same: median / max ms | change cost ms (median over sizes) | stall recurs after warm-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in docs:
        s = d["summary"]
        create = sum(d["session_create_s"].values())
        share = s["alternate_changed_over_20ms"]
        lines.append(
            f"| {d['config']} | {d['device']} | {d['ort_version']} | {d['sessions']} | {create:.1f} | "
            f"{s['alternate_changed_n']} / {_fmt(s['alternate_changed_median_ms'])} / "
            f"{_fmt(s['alternate_changed_p90_ms'])} / {_fmt(s['alternate_changed_max_ms'])} | "
            f"{'-' if share is None else f'{share:.0%}'} | {_fmt(s['alternate_same_median_ms'])} / "
            f"{_fmt(s['alternate_same_max_ms'])} | {_fmt(s['change_cost_median_ms'])} | "
            f"{'yes' if s['stall_recurs_after_warmup'] else 'no'} |"
        )
    lines += [
        "",
        "## Per batch size",
        "",
        "| config | batch | first ms | steady median / p90 ms | after a change: n / median / max ms "
        "| repeated: n / median ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for d in docs:
        for batch, v in d["summary"]["per_batch"].items():
            lines.append(
                f"| {d['config']} | {batch} | {_fmt(v['first_ms'])} | {_fmt(v['steady_median_ms'])} / "
                f"{_fmt(v['steady_p90_ms'])} | {v['alternate_changed_n']} / {_fmt(v['alternate_changed_median_ms'])} / "
                f"{_fmt(v['alternate_changed_max_ms'])} | {v['alternate_same_n']} / "
                f"{_fmt(v['alternate_same_median_ms'])} |"
            )
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), help="the configuration to measure")
    parser.add_argument("--model", type=Path, help="a dynamic-batch ONNX file")
    parser.add_argument("--export", choices=sorted(IMAGE_SIDE), help="export this serving model to --model first")
    parser.add_argument("--out", type=Path, required=True, help="folder for <config>.json and the summary")
    parser.add_argument("--batches", default="1,4,8,16,32", help="batch sizes (comma-separated)")
    parser.add_argument("--warm", type=int, default=20, help="runs per size in the warm phase")
    parser.add_argument("--alternate", type=int, default=80, help="runs in the alternate phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (the executor's default: 1)")
    parser.add_argument("--summarize", action="store_true", help="only merge <out>/*.json into summary.json/.md")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.summarize:
        print(write_summary(args.out).read_text())
        return 0
    if args.model is None:
        parser.error("--model is required")
    if args.export:
        export_model(args.export, args.model)
        if args.config is None:
            print(f"exported {args.model}")
            return 0
    if args.config is None:
        parser.error("--config is required")
    if not args.model.exists():
        parser.error(f"no such model {args.model} (use --export resnet18)")
    try:
        batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    except ValueError:
        parser.error(f"--batches must be whole numbers, got {args.batches!r}")
    if not batches or min(batches) < 1:
        parser.error("--batches must be positive")
    path = args.out / f"{args.config}.json"
    try:
        doc = study(args.model, args.config, batches, args.warm, args.alternate, args.seed, args.threads)
    except Exception as exc:  # one configuration failing (e.g. CUDA graph capture) must not hide the others
        (args.out / f"{args.config}.error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
        print(f"stall_study: error: {args.config}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    gc.collect()
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(doc) + "\n")
    partial.replace(path)
    s = doc["summary"]
    print(
        f"{args.config}: changed n={s['alternate_changed_n']} median {_fmt(s['alternate_changed_median_ms'])} "
        f"max {_fmt(s['alternate_changed_max_ms'])} ms; same median {_fmt(s['alternate_same_median_ms'])} ms; "
        f"stall recurs after warm-up: {s['stall_recurs_after_warmup']} ({doc['wall_s']:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
