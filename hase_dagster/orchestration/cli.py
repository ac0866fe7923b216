"""The ``hase`` command line. Every ``--json`` output is a stable contract (see README)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from hase_dagster.core.errors import HaseError

JSON_SCHEMA_VERSION = 1


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **document}, indent=1, default=str))


def cmd_analyze(args: argparse.Namespace) -> int:
    from hase_dagster.analysis.analyze import analyze_model
    from hase_dagster.core.ort_runtime import device_name

    with tempfile.TemporaryDirectory() as tmp:
        analysis = analyze_model(args.model, args.ep, Path(tmp) / "optimized.onnx")
    catalog = analysis.catalog()
    if args.json:
        kernels = [
            {
                "order": k["order"],
                "family": k["family"],
                "op_type": k["op_type"],
                "domain": k["domain"],
                "instance_id": k["instance_id"],
                "absorbed_ops": k["absorbed_op_types"],
                "inputs": k["inputs"],
                "outputs": k["outputs"],
                "flops": k["flops"],
                "input_bytes": k["input_bytes"],
                "output_bytes": k["output_bytes"],
                "weight_bytes": k["weight_bytes"],
            }
            for k in catalog["kernels"]
        ]
        _print_json(
            {
                "model": str(args.model),
                "ep": analysis.ep,
                "device": device_name(analysis.ep),
                "families": catalog["families"],
                "total_flops": catalog["total_flops"],
                "unmapped_original_ops": catalog["unmapped_original_ops"],
                "kernels": kernels,
            }
        )
        return 0
    print(f"{args.model} on {analysis.ep} ({device_name(analysis.ep)}): {len(analysis.kernels)} kernels")
    print(f"{'#':>3}  {'family':<34} {'op':<34} {'activation inputs':<28} {'outputs':<20} {'MFLOPs':>9}")
    for kernel in analysis.kernels:
        shapes = lambda ts: " ".join("x".join(map(str, t.shape)) for t in ts)  # noqa: E731
        op = f"{kernel.domain}.{kernel.op_type}" if kernel.domain else kernel.op_type
        print(
            f"{kernel.order:>3}  {kernel.family[:34]:<34} {op[:34]:<34} {shapes(kernel.activations)[:28]:<28} "
            f"{shapes(kernel.outputs)[:20]:<20} {kernel.flops / 1e6:>9.2f}"
        )
    print("families: " + ", ".join(f"{f} x{n}" for f, n in catalog["families"].items()))
    if catalog["unmapped_original_ops"]:
        print(f"warning: original ops no kernel claims: {catalog['unmapped_original_ops']}")
    return 0


def cmd_materialize(args: argparse.Namespace) -> int:
    from hase_dagster.orchestration.materialize import materialize_all

    started = time.monotonic()
    stages = tuple(args.stage) if args.stage else ("device", "analysis", "benchmark", "learning", "profiling")
    summary = materialize_all(
        profile_name=args.profile, batch_sizes=args.batch_size, stages=stages, stress_levels=args.stress_level
    )
    summary["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        _print_json(summary)
    else:
        for line in summary["runs"]:
            print(f"{line['stage']:<12} partition {line['partition']:<10} {line['status']:<8} run {line['run_id']}")
            for check in line["failed_checks"]:
                print(f"{'':<12} failed asset check {check}")
        print(f"profile {summary['profile']}: materialized in {summary['seconds']} s")
    failed = [r for r in summary["runs"] if r["status"] != "SUCCESS"]
    if failed:
        first = failed[0]
        print(
            f"hase: error: {len(failed)} run(s) failed; first: {first['stage']} {first['partition']}: "
            f"{first.get('error', 'failed')} (run {first['run_id']})",
            file=sys.stderr,
        )
        return 2
    return 0


def cmd_add_batch_size(args: argparse.Namespace) -> int:
    from hase_dagster.orchestration.materialize import add_batch_sizes

    added = add_batch_sizes(args.batch_size)
    print(
        f"batch-size partitions added: {added or 'none (all existed)'}; "
        "backfill them in the UI or with `hase materialize --batch-size`"
    )
    return 0


def cmd_run_kernel(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import OrtOptions, TimingOptions
    from hase_dagster.measure.runner import time_model

    if args.clock == "device":
        _check_device_clock(args.ep)
    warmup = 0 if args.no_warmup else args.warmup
    config = TimingOptions(
        warmup=warmup, min_loops=args.loops, max_loops=args.loops, min_seconds=0, max_seconds=1e9, clock=args.clock
    )
    options = OrtOptions(intra_op_num_threads=args.threads, cudnn_conv_algo_search=args.cudnn_algo_search)
    timing = time_model(args.model, args.ep, config, options, level=args.optimization)
    if args.json:
        _print_json({"model": str(args.model), **timing.to_dict()})
        return 0
    print(
        f"{args.model} on {timing.ep}: mean {timing.mean_ms:.4f} ms, median {timing.median_ms:.4f}, "
        f"p90 {timing.p90_ms:.4f}, std {timing.std_ms:.4f}, min {timing.min_ms:.4f}, n {timing.n} "
        f"(warmup {timing.warmup}); window {timing.start_ns}..{timing.end_ns} ns"
    )
    return 0


def _check_device_clock(ep: str) -> None:
    """The device clock times GPU kernels: refuse it, in one line, where it cannot run."""
    if ep != "cuda":
        raise HaseError(
            f"--clock device times GPU kernels and needs the CUDA EP (--ep cuda), not --ep {ep}; use --clock host"
        )
    from hase_dagster.core.ort_runtime import cuda_is_usable

    if not cuda_is_usable():
        raise HaseError(
            "--clock device needs the CUDA EP, and CUDAExecutionProvider does not run on this machine; "
            "use --ep cpu --clock host"
        )
    try:
        import torch
    except ImportError:
        raise HaseError("--clock device needs torch, which is not installed; use --clock host") from None
    if not torch.cuda.is_available():
        raise HaseError("--clock device needs a CUDA GPU that torch can see, and torch sees none; use --clock host")


def cmd_stress(args: argparse.Namespace) -> int:
    from hase_dagster.measure.stressor import Stressor

    with Stressor(args.device, args.intensity):
        print(f"stressing {args.device} at {args.intensity:.2f} for {args.duration:.0f} s (Ctrl-C stops)", flush=True)
        try:
            time.sleep(args.duration)
        except KeyboardInterrupt:
            pass
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.core.paths import DataPaths
    from hase_dagster.learn.reports import benchmark_report, export_tables, regressor_report
    from hase_dagster.learn.training import Predictor, predictor_path
    from warehouse.store import Warehouse

    paths = DataPaths(data_dir())
    if not paths.database.is_file():
        # Opening a Warehouse creates one: a report must not leave an empty DuckDB file behind.
        raise HaseError(
            f"no warehouse at {paths.database}: materialize (`hase materialize`) or import tables "
            "(`hase import-tables`) first, or point HASE_DATA_DIR at the data directory that has one"
        )
    store = Warehouse(paths.database)
    if args.export:
        for path in export_tables(store, args.export):
            print(f"wrote {path}", file=sys.stderr)
    print(benchmark_report(store))
    for ep in ("cpu", "cuda"):
        if predictor_path(paths.root, ep).exists():
            print(f"\n# {ep}\n\n" + regressor_report(Predictor.load(predictor_path(paths.root, ep)).regressor.metrics))
    return 0


def cmd_cupti(args: argparse.Namespace) -> int:
    from hase_dagster.measure.cupti import clock_disagreements, device_time

    rows = [device_time(path, runs=args.runs, level=args.optimization) for path in args.models]
    off = clock_disagreements(rows, args.max_clock_error) if args.max_clock_error is not None else []
    _print_json({"comparisons": rows, "device_clock_disagrees": off})
    for line in off:
        print(f"device clock off CUPTI by more than {args.max_clock_error:.0%}: {line}", file=sys.stderr)
    return 1 if off else 0


def cmd_device_profile(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.measure import device_profile as dp

    if args.merge:
        document = dp.merge_profiles([dp.read_profile(path) for path in args.merge])
    else:
        steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
        document = dp.profile_device(dp.resolve_device(args.device), args.quick, steps, log=print)
    report = dp.save_profile(document, args.out or dp.device_profile_dir(data_dir(), document["device"]))
    print("\n".join(dp.summary_lines(document)))
    print(f"wrote {report} and {report.with_name(dp.PROFILE_FILE)}")
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    from hase_dagster.measure.memory_study import model_memory

    for path in args.models:
        if not path.is_file():
            raise HaseError(f"no such ONNX file: {path}")
    rows = model_memory(args.models, args.ep, runs=args.runs, measure=not args.predict_only)
    if args.json:
        _print_json({"ep": args.ep, "models": rows})
        return 0
    for row in rows:
        measured = (
            f", measured {row['peak_memory_mb']:.1f} MB ({row['memory_source']}), error {row['error_pct']:+.1f}%"
            if row.get("peak_memory_mb") is not None
            else ""
        )
        print(
            f"{row['model']}: predicted {row['predicted_mb']:.1f} MB (weights {row['weights_bytes'] / 1e6:.1f}, "
            f"activations {row['activation_peak_bytes'] / 1e6:.1f}, workspace {row['workspace_bytes'] / 1e6:.1f}, "
            f"arena {row['arena_bytes'] / 1e6:.1f})" + measured
        )
    return 0


def _require_cuda(why: str) -> None:
    """Refuse, before any predictor or warehouse is read, what needs CUDA where it does not run (the
    commands said "no trained predictor" there, which sent users the wrong way).

    Raises:
        HaseError: naming ``why`` and that CUDA does not run here.
    """
    from hase_dagster.core.ort_runtime import cuda_is_usable

    if not cuda_is_usable():
        raise HaseError(f"CUDA does not run on this machine (no GPU, driver or CUDA libraries): {why}")


def cmd_precision(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.measure.precision_study import compare_precisions

    for path in args.models:
        if not path.is_file():
            raise HaseError(f"no such ONNX file: {path}")
    out = args.out or data_dir() / "precision"
    rows = [row for path in args.models for row in compare_precisions(path, args.ep, out / path.stem)]
    if args.json:
        _print_json({"ep": args.ep, "variants": rows})
        return 0
    for row in rows:
        if "error" in row:
            print(f"{row['model']:<36} {row['precision']:<5} ERROR {row['error']}")
            continue
        kernels = row["kernels"]
        print(
            f"{row['model']:<36} {row['precision']:<5} median {row['median_ms']:9.3f} ms  speed-up "
            f"{row.get('speedup', float('nan')):5.2f}x  "
            f"top-1 agreement {row['top1_agreement'] if row.get('top1_agreement') is not None else float('nan'):6.1%}"
            + (f" ({row['tied_rows']} tied rows)" if row.get("tied_rows") else "")
            + "  "
            f"{row['size_mb']:7.1f} MB  kernels: {kernels['int8_nodes']} int8, {kernels['float_compute_nodes']} float "
            f"compute, {kernels['qdq_nodes']} Q/DQ"
            + (f", elsewhere: {kernels['other_provider_nodes']}" if kernels["other_provider_nodes"] else "")
            + (f"\n    note: {row['fp16_range']}" if row.get("fp16_range") and row["precision"] == "fp16" else "")
        )
    print(f"variants written to {out}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from hase_dagster.core.paths import DataPaths, data_dir  # not core.config: a bundle's prediction reads no config
    from hase_dagster.learn.predict_file import parse_load_spec

    loads = [spec.strip() for spec in args.load.split(",") if spec.strip()]
    for spec in loads:
        parse_load_spec(spec)  # refuse a bad --load before loading anything
    if args.host_reading is not None and not args.predictor:
        raise HaseError("--host-reading scales a bundle's prediction by its host reference: give --predictor too")
    reading_ms = _host_reading_ms(args.host_reading)  # refused before anything loads, taken after
    if args.predictor:
        # A bundle answers without the target EP or a warehouse: kernels by static detection, or by this
        # machine's ORT where it is the bundle's kind of CPU (Bundle.resolve_kernel_source).
        from hase_dagster.learn.bundles import load_bundle

        bundle = load_bundle(args.predictor, data_dir())
        if args.ep is not None and args.ep != bundle.ep:
            raise HaseError(f"--ep {args.ep} does not match bundle {bundle.name}, which predicts for {bundle.ep}")
        kernels = bundle.resolve_kernel_source(args.kernels or "auto")
        cache = DataPaths(data_dir()) if kernels == "ort" else None
        predictions = bundle.predict(args.model, args.batch_size, loads, kernel_source=kernels, analysis_cache=cache)
        if args.host_reading is not None:
            predictions = _at_host_reading(bundle, predictions, reading_ms, args.host_reading)
    else:
        if args.kernels is not None:
            raise HaseError("--kernels picks a bundle's kernel source: give --predictor too (without it, ORT's own)")
        from hase_dagster.core.config import load_config
        from hase_dagster.learn.sweep import predict_sweep

        config = load_config()
        ep = args.ep or "cpu"
        if ep == "cuda":
            _require_cuda("hase predict --ep cuda analyses the model on the CUDA EP; predict with --predictor BUNDLE")
        predictions = predict_sweep(args.model, args.batch_size, loads, ep, data_dir(), config.prometheus_url)
    # Warn where the predicted peak exceeds what is free now. A bundle's device is not this machine's:
    # only Prometheus (asked with --load prometheus) says what is free on it, and not reading this
    # machine's memory keeps a bundle's prediction fast.
    if not args.predictor or "prometheus" in loads:
        from hase_dagster.core.config import load_config
        from hase_dagster.learn.memory_fit import add_fit_warnings

        for device in sorted({p.ep for p in predictions}):
            add_fit_warnings([p for p in predictions if p.ep == device], device, load_config().prometheus_url)
    if args.json:
        # One question keeps the single-prediction object; several give them in a list.
        if len(predictions) == 1:
            _print_json(predictions[0].to_dict())
        else:
            _print_json({"predictions": [p.to_dict() for p in predictions]})
        return 0
    for prediction in predictions:
        _print_prediction(prediction, args.top)
    return 0


def _host_reading_ms(text: str | None) -> float | None:
    """``--host-reading``'s value in ms: None for ``measure`` and ``prometheus`` (read after the prediction) or when
    not given."""
    if text is None or text in ("measure", "prometheus"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:  # NaN fails too
        raise HaseError(f"--host-reading takes a loop reading in ms (> 0), 'measure' or 'prometheus', got {text!r}")
    return value


def _at_host_reading(bundle: Any, predictions: list[Any], reading_ms: float | None, source: str) -> list[Any]:
    """The bundle's predictions for a host whose loop reads ``reading_ms``, or, when None, the reading ``source``
    gives: ``measure`` (this machine now) or ``prometheus`` (the exporter's on the host, averaged)."""
    from hase_dagster.learn.host_speed import at_host_reading
    from hase_dagster.measure.host_speed import host_loop_reading, host_reading_from_prometheus, interpreter

    composition = bundle.predictor.composition
    if composition.host_loop_ms is None:
        raise HaseError(
            f"bundle {bundle.name} records no host reading of its timings' host: add one with "
            "`hase predictor host-reference` before predicting with --host-reading"
        )
    reference_python = composition.host_loop_python or interpreter()
    python = interpreter() if reading_ms is None else reference_python  # a given number: its interpreter unknown
    if reading_ms is not None:
        reading = reading_ms
    elif source == "prometheus":
        from hase_dagster.core.config import load_config
        from hase_dagster.measure.prometheus import PrometheusClient

        # the exporter's interpreter is this Hase's: the same Python as this process in one environment
        reading = host_reading_from_prometheus(PrometheusClient(load_config().prometheus_url))
    else:
        reading = host_loop_reading()
    return [at_host_reading(p, reading, composition.host_loop_ms, reference_python, python) for p in predictions]


def cmd_predictor_host_reference(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.core.paths import DataPaths
    from hase_dagster.learn.bundles import host_reference_bundle, load_bundle

    source = load_bundle(args.source, data_dir())
    name = args.name or source.name
    out = args.out or DataPaths(data_dir()).bundles / name
    folder, reference, (fast, slow) = host_reference_bundle(source, args.readings, args.python, out, name)
    print(
        f"bundle {name} written to {folder}: bundle {source.name} with a host loop reference of {reference} ms "
        f"(fast and slow states {fast}-{slow} ms)"
    )
    return 0


def cmd_predictor_export(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from hase_dagster.core.config import data_dir
    from hase_dagster.core.paths import DataPaths
    from hase_dagster.learn.bundles import export_bundle, load_bundle
    from hase_dagster.learn.compute_floor import compute_peaks
    from hase_dagster.learn.graph_factors import read_graph_factors
    from hase_dagster.learn.model_timings import read_timing_sets
    from hase_dagster.learn.training import Predictor, fit_composition, train_predictor, train_predictor_regressor
    from hase_dagster.measure.device_profile import read_profile
    from warehouse.store import Warehouse

    profile = read_profile(args.device_profile) if args.device_profile else None  # refused before any training
    if args.timings and args.composition_of:
        raise HaseError("--composition-of keeps that bundle's composition: drop --timings, which would fit another")
    provenance = _read_json_object(args.provenance) if args.provenance else {}
    factors = read_graph_factors(args.graph_factors) if args.graph_factors else None
    timed = read_timing_sets(args.timings, _rules_or_none(args.rules), args.timings_match)
    if (factors is not None or timed or args.regressor_of or args.composition_of or args.cross_fit) and not args.tables:
        raise HaseError(
            "--graph-factors, --timings, --regressor-of, --composition-of and --cross-fit need --tables: "
            "the predictor is trained again"
        )
    if args.cross_fit and (args.regressor_of or args.composition_of):
        raise HaseError(
            "--cross-fit fits a composition with regressors of its own: drop --regressor-of / --composition-of"
        )
    if factors is not None and args.regressor_of:
        raise HaseError("--regressor-of keeps that bundle's graph factors: drop --graph-factors")
    if args.regressor_of and args.composition_of:
        raise HaseError(
            "--regressor-of keeps a bundle's regressor and --composition-of another's composition: give one"
        )
    if timed:
        provenance["composition_timings"] = {"sets": args.timings, "match": args.timings_match, "rows": len(timed)}
    paths = DataPaths(data_dir())
    out = args.out or paths.bundles / args.name
    with tempfile.TemporaryDirectory() as tmp:
        if args.tables:
            from hase_dagster.learn.reports import import_tables

            store = import_tables(args.tables, Path(tmp) / "tables.duckdb")
            provenance.setdefault("tables", str(args.tables))
        elif paths.database.is_file():
            store = Warehouse(paths.database)
        else:
            raise HaseError(f"no warehouse at {paths.database}: materialize first, or export from tables with --tables")
        eps = sorted(store.query("SELECT DISTINCT ep FROM kernel_benchmarks")["ep"])
        ep = args.ep or (eps[0] if len(eps) == 1 else None)
        if ep is None or ep not in eps:
            raise HaseError(f"pick the EP with --ep: the kernel benchmarks there are of {eps or 'none'}")
        if args.regressor_of:
            # The bundle's kernel regressor as it is; only the composition is fitted (minutes, not the
            # regressor's hour on the H100 tables).
            source = load_bundle(args.regressor_of, data_dir())
            if source.ep != ep:
                raise HaseError(f"bundle {source.name} predicts for {source.ep}, the tables' EP is {ep}")
            regressor = source.predictor.regressor
            predictor = Predictor(regressor, fit_composition(store, ep, regressor, timed))
            provenance["regressor_of"] = {"bundle": source.name, "created": source.document["created"]}
        elif args.composition_of:
            # New kernel rows, the bundle's composition as it is: the kernel regressor alone is trained (a minute
            # on the H100 tables; refitting the composition detects the kernels of every timed network again).
            source = load_bundle(args.composition_of, data_dir())
            if source.ep != ep:
                raise HaseError(f"bundle {source.name} predicts for {source.ep}, the tables' EP is {ep}")
            if source.predictor.regressor.device_calibration is not None:
                raise HaseError(f"bundle {source.name} is calibrated to another device: take the bundle it came from")
            regressor = train_predictor_regressor(store, ep, args.kind, source.predictor.regressor.graph_factors)
            predictor = Predictor(regressor, source.predictor.composition)
            provenance["composition_of"] = {"bundle": source.name, "created": source.document["created"]}
        elif args.tables:
            predictor = train_predictor(
                store, ep, kind=args.kind, graph_factors=factors, timed_models=timed, cross_fit=args.cross_fit
            )
        else:
            predictor = Predictor.load(paths.predictor(ep))
        if profile is not None:
            peaks = compute_peaks(profile, ep)
            predictor = Predictor(replace(predictor.regressor, compute_peaks=peaks), predictor.composition)
            provenance["compute_floor"] = peaks.to_json()
        folder = export_bundle(store, ep, predictor, out, args.name, args.rules, provenance)
    print(f"bundle {args.name} ({ep}) written to {folder}")
    return 0


def cmd_predictor_calibrate(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.core.paths import DataPaths
    from hase_dagster.learn.bundles import calibrate_bundle, load_bundle, tables_kernel_benchmarks

    source = load_bundle(args.source, data_dir())
    out = args.out or DataPaths(data_dir()).bundles / args.name
    local = tables_kernel_benchmarks(args.tables, source.ep)
    reference = tables_kernel_benchmarks(args.reference_tables, source.ep)
    where = {"tables": str(args.tables), "reference_tables": str(args.reference_tables)}
    peaks = _compute_peaks(args.device_profile, source.ep) if args.device_profile else None
    folder, calibration = calibrate_bundle(source, local, reference, out, args.name, args.device, where, peaks)
    print(
        f"bundle {args.name} ({calibration.device}) written to {folder}: bundle {source.name}'s kernel times x the "
        f"speed ratio of {calibration.pairs} shared kernel timings (median {calibration.median_ratio:.3f}, "
        f"cross-validated error {calibration.cross_validated_error_pct:.1f}%); "
        + (_floor_words(peaks) if peaks else "no compute floor (give --device-profile of the new device)")
    )
    return 0


def cmd_predictor_floor(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.core.paths import DataPaths
    from hase_dagster.learn.bundles import floor_bundle, load_bundle

    source = load_bundle(args.source, data_dir())
    peaks = _compute_peaks(args.device_profile, source.ep)
    name = args.name or source.name
    out = args.out or DataPaths(data_dir()).bundles / name
    folder = floor_bundle(source, peaks, out, name)
    print(f"bundle {name} written to {folder}: bundle {source.name} with {_floor_words(peaks)}")
    return 0


def _compute_peaks(path: Path, ep: str) -> Any:
    """The compute floor's peaks (``learn.compute_floor.ComputePeaks``) of the device profile at ``path``."""
    from hase_dagster.learn.compute_floor import compute_peaks
    from hase_dagster.measure.device_profile import read_profile

    return compute_peaks(read_profile(path), ep)


def _floor_words(peaks: Any) -> str:
    rates = ", ".join(f"{precision} {tflops:.0f} TFLOPS" for precision, tflops in sorted(peaks.tflops.items()))
    return f"a compute floor at {peaks.device_name or 'the device'}'s measured peaks ({rates})"


def cmd_predictor_graph_factors(args: argparse.Namespace) -> int:
    from hase_dagster.learn.bundles import load_bundle
    from hase_dagster.learn.graph_factors import (
        STANDALONE_OVERHEAD_MS,
        fit_graph_factors,
        idle_work_ms,
        read_cupti_times,
        write_graph_factors,
    )

    bundle = load_bundle(args.predictor)
    if bundle.ep != "cuda":
        raise HaseError(f"graph factors scale GPU kernel times; bundle {bundle.name} is for {bundle.ep}")
    measured = read_cupti_times(args.cupti)
    work, gpu_ms, missing = [], [], []
    for name, gpu in sorted(measured.items()):
        path = next((folder / name for folder in args.files if (folder / name).is_file()), None)
        if path is None:
            missing.append(name)
            continue
        batch = bundle.fixed_batch(path)
        if batch is None:
            raise HaseError(f"{path} has no fixed batch size: the GPU time was measured at one")
        kernels, _ = bundle.kernels(path, batch)
        work.append(idle_work_ms(bundle.predictor.regressor, kernels, STANDALONE_OVERHEAD_MS))
        gpu_ms.append(gpu)
    if not work:
        raise HaseError(f"none of the {len(measured)} files with a GPU time is in {[str(f) for f in args.files]}")
    source = f"{', '.join(str(p) for p in args.cupti)} ({len(work)} files); predictions of bundle {bundle.name}"
    factors = fit_graph_factors(work, gpu_ms, ridge=args.ridge, source=source)
    write_graph_factors(factors, args.out)
    scores = factors.scores
    print(
        f"graph factors from {len(work)} files ({len(missing)} with a GPU time not found): "
        + ", ".join(f"{c} {f:.3f}" for c, f in factors.factors.items())
    )
    print(
        f"kernel sums against CUPTI: mean |error| {scores['mean_abs_error_pct_before']:.1f}% -> "
        f"{scores['mean_abs_error_pct_after']:.1f}%, within +-10% {scores['within_10_pct_before']:.0f}% -> "
        f"{scores['within_10_pct_after']:.0f}%; written to {args.out}"
    )
    return 0


def _derived_bundle_arguments(parser: argparse.ArgumentParser, source_help: str) -> None:
    """A command that writes a bundle derived from another: the source, the new name (default: the source's), --out."""
    parser.add_argument("source", help=source_help)
    parser.add_argument("name", nargs="?", default=None, help="the new bundle's name (default: the source's)")
    parser.add_argument("--out", type=Path, default=None, help="bundle folder (default: the data directory's bundles)")


def _device_profile_argument(parser: argparse.ArgumentParser, whose: str) -> None:
    parser.add_argument(
        "--device-profile",
        type=Path,
        default=None,
        help=f"{whose} profile (hase device-profile): no kernel is predicted under its FLOPs at the measured peak",
    )


def _rules_or_none(path: Path | None) -> Any:
    """The fusion rules file at ``path`` (None without one); a HaseError names a bad one."""
    if path is None:
        return None
    from hase_dagster.analysis.fusion_rules import FusionRules

    return FusionRules.load(path)  # a missing, corrupt or foreign file is a HaseError


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HaseError(f"{path} is not a readable JSON file: {exc}") from exc
    if not isinstance(data, dict):
        raise HaseError(f"{path} must hold a JSON object")
    return data


def cmd_predictor_list(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.learn.bundles import list_bundles

    bundles = list_bundles(data_dir())
    if args.json:
        _print_json({"bundles": bundles})
        return 0
    if not bundles:
        print("no predictor bundles: export one with `hase predictor export`")
    for b in bundles:
        if "error" in b:
            print(f"{b['name']:<16} {b['source']:<9} UNUSABLE: {b['error']}")
            continue
        figures = b["evaluation"]
        never_seen = figures.get("never_seen_mape_pct")
        print(
            f"{b['name']:<16} {b['source']:<9} {b['device']} / {b['ep']} / ORT {b['ort_version']} / {b['precision']}, "
            f"created {b['created'][:10]}"
            + (f", never-seen MAPE {never_seen:.1f}%" if never_seen is not None else "")
            + ("" if b["usable"] else " (another ORT version is installed: refused)")
        )
        print(f"{'':<16} {b['path']}")
    return 0


def cmd_predictor_import(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.learn.bundles import import_bundle

    target = import_bundle(args.folder, data_dir(), replace=args.replace)
    print(f"bundle imported to {target}")
    return 0


def _print_prediction(prediction: Any, top: int) -> None:
    coverage = prediction.coverage
    precision = f" ({prediction.precision})" if getattr(prediction, "precision", None) else ""
    print(
        f"{prediction.model}{precision} batch {prediction.batch_size} on {prediction.ep}, "
        f"load {prediction.load_source}: {prediction.load}"
    )
    print(
        f"  predicted {prediction.predicted_ms:.3f} ms (p90 {prediction.p90_ms:.3f} ms), "
        f"critical path {prediction.critical_path_ms:.3f} ms, plain kernel sum {prediction.sequential_sum_ms:.3f} ms"
    )
    host_range = getattr(prediction, "host_range_ms", None)
    if host_range is not None and host_range[1] > host_range[0] * 1.005:  # a GPU-bound run's range is its point
        print(
            f"  on the host's fast and slow states: {host_range[0]:.3f}-{host_range[1]:.3f} ms "
            "(a host-bound run's measured time moves with the host core's speed)"
        )
    print(
        f"  coverage: {coverage['covered']}/{coverage['kernels']} kernels have a trained family"
        + (f"; FALLBACK for {coverage['fallback']}: {coverage['fallback_families']}" if coverage["fallback"] else "")
        + (
            f"; {coverage['at_compute_floor']} at the device's measured peak (compute floor)"
            if coverage.get("at_compute_floor")
            else ""
        )
    )
    if prediction.predictor is not None:
        bundle = prediction.predictor
        detected = {k: v for k, v in (prediction.detection_coverage or {}).items() if isinstance(v, int | float | str)}
        print(
            f"  bundle {bundle['name']} ({bundle['device']}, ORT {bundle['ort_version']}, {bundle['precision']}); "
            + (
                "kernels by this machine's ORT"
                if prediction.kernel_source == "ort"
                else f"kernels by {prediction.kernel_source} detection" + (f": {detected}" if detected else "")
            )
        )
    for kernel in sorted(prediction.kernels, key=lambda k: -k.mean_ms)[:top]:
        mark = ("  [fallback]" if kernel.fallback else "") + (
            "  [at the device's peak]" if kernel.at_compute_floor else ""
        )
        print(f"    {kernel.order:>4} {kernel.family[:40]:<40} {kernel.mean_ms:9.4f} ms{mark}")
    memory = getattr(prediction, "peak_memory", None)
    if memory:
        print(
            f"  peak memory (predicted): {memory['total_mb']:.1f} MB: weights {memory['weights_bytes'] / 1e6:.1f}, "
            f"live activations {memory['activation_peak_bytes'] / 1e6:.1f} (peak at {memory['peak_node']}), "
            f"workspace {memory['workspace_bytes'] / 1e6:.1f}, session {memory['session_bytes'] / 1e6:.1f}, "
            f"arena {memory['arena_bytes'] / 1e6:.1f}"
        )
    for warning in prediction.warnings:
        print(f"  warning: {warning}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir, load_config
    from hase_dagster.core.profiles import select_profile
    from hase_dagster.learn.predict_file import evaluate_files

    paths = sorted(args.path.glob("*.onnx")) if args.path.is_dir() else [args.path]
    if not paths:
        raise HaseError(f"no .onnx files in {args.path}")
    config = load_config()
    profile = select_profile(config, args.profile)
    if profile.device == "cuda":
        _require_cuda(f"hase evaluate measures on the profile's device (profile {profile.name!r}: cuda)")
    report = evaluate_files(paths, profile, args.stress_level or config.stress_levels, data_dir())
    if args.json:
        _print_json(report)
        return 0
    for case in report["cases"]:
        if "error" in case:
            # A model that could not be loaded or analysed has no stress level: it failed before any.
            where = f"stress {case['stress_level']:.2f}" if case.get("stress_level") is not None else "not loaded "
            print(f"{case['model']:<40} {where}  ERROR {case['error']}")
            continue
        print(
            f"{case['model']:<40} stress {case['stress_level']:.2f}  measured {case['measured_mean_ms']:9.3f} ms  "
            f"predicted {case['predicted_ms']:9.3f} ms  error {case['error_pct']:+6.1f}%"
        )
    summary = report["summary"]
    if summary["cases"]:
        print(
            f"MAPE {summary['mape_pct']:.1f}%, within +-10%: {summary['within_10_pct']:.0f}% "
            f"of {summary['cases']} cases"
        )
    if summary["failed"]:
        print(f"{summary['failed']} case(s) failed (ERROR above)")
    return 0


def cmd_evaluate_tables(args: argparse.Namespace) -> int:
    from hase_dagster.learn.evaluation import evaluate, write_report
    from hase_dagster.learn.graph_factors import read_graph_factors
    from hase_dagster.learn.model_timings import read_timing_sets
    from hase_dagster.learn.reports import import_tables, regressor_report
    from hase_dagster.learn.training import train_predictor

    factors = read_graph_factors(args.graph_factors) if args.graph_factors else None
    timed = read_timing_sets(args.timings, _rules_or_none(args.rules), args.timings_match)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = import_tables(args.tables, Path(tmp) / "imported.duckdb")
        _add_reference_rows(store, args.ep, args.reference_tables, Path(tmp) / "reference.duckdb")
        shipped = train_predictor(
            store, args.ep, kind=args.kind, graph_factors=factors, timed_models=timed, cross_fit=args.cross_fit
        )
        result = evaluate(store, args.ep, shipped, timed)
    write_report(result, args.out, f"Hase on {args.ep}")
    (args.out / "regressor.md").write_text(
        regressor_report(shipped.regressor.metrics) + f"\n\nComposition: {shipped.composition.to_json()}\n"
    )
    print(result.summary.round(2).to_markdown(index=False))
    return 0


CROSS_FIT_HELP = (
    "fit the composition on out-of-sample kernel sums: each training architecture's from a regressor trained "
    "without it (one regressor fit per architecture more)"
)
REFERENCE_TABLES_HELP = (
    "exported tables of another machine (e.g. results/cpu/tables): their design-space probe rows train beside "
    "these, scaled to this machine's speed by the kernels both timed"
)


def _add_reference_rows(store: Any, ep: str, reference_tables: Path | None, scratch: Path) -> None:
    """The reference tables' probe rows into ``store`` at its machine's speed (none without them)."""
    from hase_dagster.learn.reference_rows import refresh_reference_rows

    rows, calibration = refresh_reference_rows(store, ep, reference_tables, scratch)
    if calibration is not None:
        print(f"{ep}: {calibration.describe(rows)}", file=sys.stderr)


def cmd_import_tables(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.core.paths import DataPaths
    from hase_dagster.learn.reports import import_tables
    from hase_dagster.learn.training import train_predictor

    paths = DataPaths(data_dir())
    if paths.database.exists() and not args.replace:
        raise HaseError(
            f"{paths.database} already exists: importing replaces its tables; pass --replace, or point "
            "HASE_DATA_DIR at another folder"
        )
    store = import_tables(args.tables, paths.database)
    eps = sorted(store.query("SELECT DISTINCT ep FROM kernel_benchmarks")["ep"])
    if not eps:
        raise HaseError(f"{args.tables} holds no kernel benchmarks to train on")
    for ep in eps:
        _add_reference_rows(store, ep, args.reference_tables, paths.root / "reference" / "tables.duckdb")
        folder = train_predictor(store, ep, kind=args.kind).save(paths.predictor(ep))
        print(f"{ep}: predictor trained on {args.tables} and saved to {folder}")
    return 0


def cmd_merge_tables(args: argparse.Namespace) -> int:
    from hase_dagster.learn.reports import merge_exports

    try:
        written = merge_exports(args.sources, args.out, pool_models=args.pool_models)
    except (OSError, ValueError) as exc:  # a missing folder, a table without its key columns
        raise HaseError(str(exc)) from exc
    for table, rows in written.items():
        print(f"{table}: {rows} rows")
    return 0


def cmd_exporter(args: argparse.Namespace) -> int:
    from hase_dagster.measure.exporter import main as exporter_main

    return exporter_main(args.exporter_args)


class _ArgumentParser(argparse.ArgumentParser):
    """Bad arguments give the one line of the error contract, ``hase: error: ...``, and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"hase: error: {message} (see `{self.prog} --help`)\n")


def _int_at_least(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be a {what} integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "non-negative")


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1, "positive")


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value:g}")
    return value


def _timing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timings",
        action="append",
        default=[],
        metavar="TIMINGS_DIR:FILES_DIR",
        help="whole-model timings (time_files.py's level-*.json) of the ONNX files in FILES_DIR, fitted by the "
        "composition beside the tables' models (repeatable; needs --rules)",
    )
    parser.add_argument("--timings-match", default=None, help="only timed files whose name matches this regex")


def _non_negative(text: str) -> float:
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {value:g}")
    return value


def _unit_interval(text: str) -> float:
    value = _finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value:g}")
    return value


def _positive_int_list(text: str) -> list[int]:
    return [_positive_int(part.strip()) for part in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    from hase_dagster.learn.estimators import ALL_KINDS as REGRESSOR_KINDS

    parser = _ArgumentParser(prog="hase", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    analyze = commands.add_parser("analyze", help="print the kernels ORT runs for an ONNX model")
    analyze.add_argument("model", type=Path)
    analyze.add_argument("--ep", choices=["cpu", "cuda"], default="cpu")
    analyze.add_argument("--json", action="store_true")
    analyze.set_defaults(handler=cmd_analyze)

    materialize = commands.add_parser("materialize", help="materialize the whole asset graph in the Dagster instance")
    materialize.add_argument("--profile", default=None, help="profile name (default: HASE_PROFILE or the config's)")
    materialize.add_argument("--batch-size", type=_positive_int, action="append", help="only these batch sizes")
    materialize.add_argument(
        "--stage",
        choices=["device", "analysis", "benchmark", "learning", "profiling"],
        action="append",
        help="only these stages (default: all, in order)",
    )
    materialize.add_argument("--stress-level", type=float, action="append", help="only these stress levels")
    materialize.add_argument("--json", action="store_true")
    materialize.set_defaults(handler=cmd_materialize)

    run_kernel = commands.add_parser("run-kernel", help="time one ONNX model (a kernel or a whole model)")
    run_kernel.add_argument("--model", type=Path, required=True)
    run_kernel.add_argument("--ep", choices=["cpu", "cuda"], default="cpu")
    warm = run_kernel.add_mutually_exclusive_group()
    warm.add_argument("--warmup", type=_non_negative_int, default=10, help="untimed runs first (>= 0)")
    warm.add_argument("--no-warmup", action="store_true")
    run_kernel.add_argument("--loops", type=_positive_int, default=100)
    run_kernel.add_argument("--threads", type=_positive_int, default=1, help="ORT intra-op threads on the CPU")
    run_kernel.add_argument(
        "--clock",
        choices=["host", "device"],
        default="host",
        help="host: wall time per run; device: GPU time of its kernels (CUDA, needs torch)",
    )
    run_kernel.add_argument("--cudnn-algo-search", choices=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"], default="EXHAUSTIVE")
    run_kernel.add_argument(
        "--optimization",
        choices=["disable", "basic", "extended", "all"],
        default="disable",
        help="ORT graph optimization (kernels: disable, as extracted; whole models: all)",
    )
    run_kernel.add_argument("--json", action="store_true")
    run_kernel.set_defaults(handler=cmd_run_kernel)

    stress = commands.add_parser("stress", help="load the accelerator at an intensity in [0, 1]")
    stress.add_argument("--intensity", type=_unit_interval, required=True, help="fraction of time busy, in [0, 1]")
    stress.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    stress.add_argument("--duration", type=_positive_seconds, default=60.0, help="seconds (> 0)")
    stress.set_defaults(handler=cmd_stress)

    report = commands.add_parser("report", help="latency vs stress from the warehouse (markdown)")
    report.add_argument("--export", type=Path, help="also write the tables as Parquet into this folder")
    report.set_defaults(handler=cmd_report)

    cupti = commands.add_parser(
        "cupti", help="CUPTI device time vs the host and device clocks on the CUDA EP (needs torch)"
    )
    cupti.add_argument("models", type=Path, nargs="+")
    cupti.add_argument("--runs", type=_positive_int, default=20)
    cupti.add_argument("--optimization", choices=["disable", "all"], default="disable")
    cupti.add_argument(
        "--max-clock-error",
        type=float,
        default=None,
        help="exit 1 when the device clock and CUPTI differ by more than this fraction (or by more than 20 us)",
    )
    cupti.set_defaults(handler=cmd_cupti)

    memory = commands.add_parser(
        "memory", help="peak memory ONNX models hold under ORT: predicted from their kernels, and measured"
    )
    memory.add_argument("models", type=Path, nargs="+")
    memory.add_argument("--ep", choices=["cpu", "cuda"], default="cpu")
    memory.add_argument("--runs", type=_positive_int, default=5, help="timed runs of each model's session")
    memory.add_argument("--predict-only", action="store_true", help="predict without running the models")
    memory.add_argument("--json", action="store_true")
    memory.set_defaults(handler=cmd_memory)

    precision = commands.add_parser(
        "precision",
        help="what FP16 and INT8 buy: each model's fp16 and int8 (QDQ, random calibration) variants timed, "
        "their top-1 agreement with fp32 and which kernels really run in INT8",
    )
    precision.add_argument("models", type=Path, nargs="+")
    precision.add_argument("--ep", choices=["cpu", "cuda"], default="cpu")
    precision.add_argument(
        "--out", type=Path, default=None, help="variants folder (default: the data directory's precision/)"
    )
    precision.add_argument("--json", action="store_true")
    precision.set_defaults(handler=cmd_precision)

    device = commands.add_parser(
        "device-profile",
        help="measure the device: GEMM TFLOPS per precision (cuBLAS and Hase's Triton kernel), bandwidth, "
        "launch and ORT overheads, GPU time slices; JSON + markdown report with plots",
    )
    device.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: cuda if torch sees one"
    )
    device.add_argument("--out", type=Path, default=None, help="folder (default: the data directory's device/DEVICE)")
    device.add_argument("--quick", action="store_true", help="fewer sizes, shorter timings")
    device.add_argument(
        "--steps",
        default=None,
        help="cuda only: comma-separated steps (gemm,triton,timer_check,bandwidth,launch,ort,timeslice)",
    )
    device.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        help="merge saved profiles (JSON files or folders) instead of measuring",
    )
    device.set_defaults(handler=cmd_device_profile)

    predict = commands.add_parser(
        "predict", help="predict the latency of ONNX models (files or folders) at batch sizes under loads"
    )
    predict.add_argument("model", type=Path, nargs="+", help="ONNX files, or folders of them")
    predict.add_argument(
        "--batch-size", type=_positive_int_list, required=True, help="one or several, comma-separated: 1,4,16"
    )
    predict.add_argument(
        "--ep", choices=["cpu", "cuda"], default=None, help="the EP whose trained predictor answers (default: cpu)"
    )
    predict.add_argument(
        "--predictor",
        default=None,
        help="a predictor bundle (name, e.g. h100, or folder): predict without the target EP, kernels by static "
        "detection (see `hase predictor list`)",
    )
    predict.add_argument(
        "--load",
        default="prometheus",
        help="prometheus (now), idle, or level=X (a benchmarked stress level); several comma-separated",
    )
    predict.add_argument(
        "--kernels",
        choices=["auto", "static", "ort"],
        default=None,
        help="with --predictor: the kernels by static detection (nothing runs) or the ones this machine's ORT runs on "
        "the bundle's EP (right where this machine is the bundle's kind of device); auto (default): ORT's for a CPU "
        "bundle whose NCHWc block this machine's ORT shares, else static",
    )
    predict.add_argument(
        "--host-reading",
        default=None,
        help="with --predictor: the host core's loop reading in ms (hase_dagster.measure.host_speed), "
        "'measure' to read it on this machine now, or 'prometheus' for the host's `hase exporter` reading over the "
        "last 30 s; against the bundle's host reference it scales a GPU run's host-bound share (batch 1-4 move 1.5x "
        "with the host's state on the measured GPU hosts) or an idle CPU prediction. It helps only when the reading "
        "describes the run: on an H200 host, readings taken around the timed window made set AN worse",
    )
    predict.add_argument("--top", type=_non_negative_int, default=10, help="kernels to list in the breakdown (0: none)")
    predict.add_argument("--json", action="store_true")
    predict.set_defaults(handler=cmd_predict)

    predictor = commands.add_parser("predictor", help="export, calibrate, list and import predictor bundles")
    predictor_commands = predictor.add_subparsers(dest="predictor_command", required=True)
    export = predictor_commands.add_parser(
        "export", help="write a bundle from the data directory's trained predictor, or from exported tables"
    )
    export.add_argument("name", help="the bundle's name (lower-case letters, digits, _.-), as --predictor finds it")
    export.add_argument("--tables", type=Path, help="train on these exported tables instead of the data directory")
    export.add_argument("--ep", choices=["cpu", "cuda"], default=None, help="default: the only EP there")
    export.add_argument("--rules", type=Path, default=None, help="the EP's fusion rules file (for static detection)")
    export.add_argument(
        "--provenance", type=Path, default=None, help="JSON of facts the tables lack (driver, cuda, cudnn, ...)"
    )
    export.add_argument(
        "--kind", choices=list(REGRESSOR_KINDS), default=None, help="with --tables: regressor kind (default: compare)"
    )
    export.add_argument("--out", type=Path, default=None, help="bundle folder (default: the data directory's bundles)")
    export.add_argument("--cross-fit", action="store_true", help="with --tables: " + CROSS_FIT_HELP)
    export.add_argument(
        "--graph-factors", type=Path, default=None, help="with --tables: in-graph factors (predictor graph-factors)"
    )
    export.add_argument(
        "--regressor-of",
        default=None,
        help="with --tables: keep this bundle's kernel regressor and fit only the composition (on the tables' models "
        "and --timings): a bundle fitted to your machine's timings in minutes",
    )
    export.add_argument(
        "--composition-of",
        default=None,
        help="with --tables: train only the kernel regressor and keep this bundle's composition (and graph factors): "
        "new kernel rows in a minute",
    )
    _timing_arguments(export)
    _device_profile_argument(export, "the trained device's")
    export.set_defaults(handler=cmd_predictor_export)
    calibrate = predictor_commands.add_parser(
        "calibrate",
        help="carry a bundle to another device of its EP: its kernel times x a speed ratio learned from kernels both "
        "devices timed",
    )
    calibrate.add_argument("source", help="the bundle to carry (name or folder), e.g. h100")
    calibrate.add_argument("name", help="the new bundle's name (lower-case letters, digits, _.-)")
    calibrate.add_argument(
        "--tables", type=Path, required=True, help="the new device's exported tables (profile gpu_device_calibration)"
    )
    calibrate.add_argument(
        "--reference-tables", type=Path, required=True, help="the exported tables the source bundle was trained on"
    )
    calibrate.add_argument("--device", default=None, help="the new device's name (default: its tables')")
    calibrate.add_argument(
        "--out", type=Path, default=None, help="bundle folder (default: the data directory's bundles)"
    )
    _device_profile_argument(calibrate, "the new device's")
    calibrate.set_defaults(handler=cmd_predictor_calibrate)
    floor = predictor_commands.add_parser(
        "floor",
        help="write a bundle whose kernels are never predicted under their FLOPs at the device's measured peak",
    )
    _derived_bundle_arguments(floor, "the bundle (name or folder), e.g. h100")
    floor.add_argument(
        "--device-profile", type=Path, required=True, help="the predicted device's profile (hase device-profile)"
    )
    floor.set_defaults(handler=cmd_predictor_floor)
    host_reference = predictor_commands.add_parser(
        "host-reference",
        help="write a bundle that records the host loop reading typical of its timings' host (for --host-reading)",
    )
    _derived_bundle_arguments(host_reference, "the GPU bundle (name or folder), e.g. h200")
    host_reference.add_argument(
        "--readings",
        type=Path,
        nargs="+",
        required=True,
        help="timing windows with the loop read beside them on that host (results/gpu-general/host-speed)",
    )
    host_reference.add_argument("--python", required=True, help="the Python major.minor the readings were taken with")
    host_reference.set_defaults(handler=cmd_predictor_host_reference)
    factors = predictor_commands.add_parser(
        "graph-factors",
        help="fit in-graph factors per kernel category from CUPTI's GPU kernel time of whole networks",
    )
    factors.add_argument("--predictor", required=True, help="a CUDA bundle (name or folder): its kernel predictions")
    factors.add_argument(
        "--cupti", type=Path, nargs="+", required=True, help="gpu_time_study.py's JSON lines (file, gpu_kernel_ms)"
    )
    factors.add_argument("--files", type=Path, nargs="+", required=True, help="folders holding those ONNX files")
    factors.add_argument("--ridge", type=_non_negative, default=1.0, help="pull toward 1, in networks (default 1)")
    factors.add_argument("--out", type=Path, required=True, help="the factors' JSON file")
    factors.set_defaults(handler=cmd_predictor_graph_factors)
    listing = predictor_commands.add_parser("list", help="shipped and imported bundles")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_predictor_list)
    importer_bundle = predictor_commands.add_parser(
        "import", help="validate a bundle and copy it into the data directory"
    )
    importer_bundle.add_argument("folder", type=Path)
    importer_bundle.add_argument("--replace", action="store_true", help="replace an imported bundle of the same name")
    importer_bundle.set_defaults(handler=cmd_predictor_import)

    evaluate = commands.add_parser("evaluate", help="measure and predict ONNX models at every stress level")
    evaluate.add_argument("path", type=Path, help="an ONNX file or a directory of them")
    evaluate.add_argument("--profile", default=None)
    evaluate.add_argument(
        "--stress-level", type=_unit_interval, action="append", help="only these levels (default: config)"
    )
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(handler=cmd_evaluate)

    tables = commands.add_parser(
        "evaluate-tables", help="train and evaluate from exported warehouse tables (e.g. a GPU run's)"
    )
    tables.add_argument("tables", type=Path, help="folder of Parquet files written by `hase report --export`")
    tables.add_argument("--ep", choices=["cpu", "cuda"], required=True)
    tables.add_argument("--out", type=Path, required=True)
    tables.add_argument(
        "--kind", choices=list(REGRESSOR_KINDS), default=None, help="regressor kind (default: compare all)"
    )
    tables.add_argument("--graph-factors", type=Path, default=None, help="in-graph factors (predictor graph-factors)")
    tables.add_argument("--cross-fit", action="store_true", help=CROSS_FIT_HELP)
    tables.add_argument("--rules", type=Path, default=None, help="the EP's fusion rules (needed by --timings)")
    _timing_arguments(tables)
    tables.add_argument("--reference-tables", type=Path, default=None, help=REFERENCE_TABLES_HELP)
    tables.set_defaults(handler=cmd_evaluate_tables)

    importer = commands.add_parser(
        "import-tables",
        help="fill the data directory's warehouse from exported tables (e.g. a GPU run's) and train its predictors, "
        "so `hase predict` answers from them",
    )
    importer.add_argument("tables", type=Path, help="folder of Parquet files written by `hase report --export`")
    importer.add_argument(
        "--kind", choices=list(REGRESSOR_KINDS), default=None, help="regressor kind (default: compare all)"
    )
    importer.add_argument("--replace", action="store_true", help="replace the tables of an existing warehouse")
    importer.add_argument("--reference-tables", type=Path, default=None, help=REFERENCE_TABLES_HELP)
    importer.set_defaults(handler=cmd_import_tables)

    merge = commands.add_parser(
        "merge-tables",
        help="merge exported tables of several runs; rows a later run measured again replace earlier ones",
    )
    merge.add_argument("out", type=Path)
    merge.add_argument("sources", type=Path, nargs="+")
    merge.add_argument(
        "--pool-models",
        action="store_true",
        help="average whole-model rows measured again with the earlier ones (each session weighs the same) "
        "instead of replacing them",
    )
    merge.set_defaults(handler=cmd_merge_tables)

    exporter = commands.add_parser(
        "exporter", help="serve the telemetry metrics (DCGM names) for Prometheus", add_help=False
    )
    exporter.add_argument("exporter_args", nargs=argparse.REMAINDER)
    exporter.set_defaults(handler=cmd_exporter)

    add = commands.add_parser("add-batch-size", help="add batch-size partitions to the Dagster instance")
    add.add_argument("batch_size", type=_positive_int, nargs="+")
    add.set_defaults(handler=cmd_add_batch_size)

    from hase_dagster.orchestration.serving_cli import register as register_serving

    register_serving(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with _sigterm_as_interrupt():
            # Building the parser imports the serving commands: a Ctrl-C there is one line too.
            args = build_parser().parse_args(argv)
            handler: Callable[[argparse.Namespace], int] = args.handler
            return handler(args)
    except KeyboardInterrupt:  # one Ctrl-C or SIGTERM: the command's cleanups ran on the way out
        print("hase: error: interrupted: stopped before the command finished", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`hase predict ... | head`): stop quietly, as Unix tools do
        # Python would flush stdout again at exit and fail on the closed pipe: point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except HaseError as exc:
        print(f"hase: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # an option value the parser let through but a config model refuses
        # pydantic is imported only by the commands that read a config (not by a bundle's prediction).
        pydantic = sys.modules.get("pydantic")
        if pydantic is None or not isinstance(exc, pydantic.ValidationError):
            raise
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or exc.title}: {e['msg']}" for e in exc.errors())
        print(f"hase: error: invalid options for {exc.title}: {_one_line(problems)}", file=sys.stderr)
        return 2


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so both run the command's cleanups (stressor,
    sessions, DuckDB connections) and end in one error line; the previous handler is restored after.
    Only the main thread can set handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_line(message: str) -> str:
    """The error contract prints one line: a message of several (e.g. from ONNX Runtime) is joined."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
