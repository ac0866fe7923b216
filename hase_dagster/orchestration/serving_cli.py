"""``hase plan``, ``hase serve-bench`` and ``hase serving-report``: the serving planner, its executor and
the comparison of the two (issue 16). Registered on the main parser by :func:`register`."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any


def _prometheus_url(args: argparse.Namespace) -> str:
    from hase_dagster.core.config import load_config

    return args.prometheus_url or load_config().prometheus_url


def _spec_with_load(
    path: Path, load: str | None, predictor: str | None = None, args: argparse.Namespace | None = None
):  # -> PlanSpec
    from hase_dagster.core.serving_spec import load_plan_spec
    from hase_dagster.learn.predict_file import parse_load_spec

    spec = load_plan_spec(path)
    if load is not None:
        spec = spec.model_copy(update={"load": load})
    if predictor is not None:
        spec = spec.model_copy(update={"predictor": predictor})
    # --sessions / --cudnn-conv-algo-search override the YAML's runtime: block.
    overrides = {
        key: getattr(args, key)
        for key in ("sessions", "cudnn_conv_algo_search")
        if args is not None and getattr(args, key, None) is not None
    }
    if overrides:
        spec = spec.model_copy(update={"runtime": spec.runtime.model_copy(update=overrides)})
    parse_load_spec(spec.load)
    return spec


def _add_runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sessions",
        choices=["shared", "per-batch"],
        default=None,
        help="ORT sessions per model: one for every batch size, or one per batch size, which on the CUDA EP "
        "avoids the cuDNN re-plan at every change of batch size (default: the YAML's runtime.sessions, else "
        "per-batch on cuda and shared on cpu)",
    )
    parser.add_argument(
        "--cudnn-conv-algo-search",
        choices=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"],
        default=None,
        help="the CUDA EP's cudnn_conv_algo_search (default: the YAML's runtime, EXHAUSTIVE)",
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from hase_dagster.analysis.serving_models import ensure_models
    from hase_dagster.core.config import data_dir
    from hase_dagster.learn.serving_plan import cotenant_share, exec_time_for, plan, plan_markdown, write_plan

    spec = _spec_with_load(args.spec, args.load, args.predictor, args)
    if spec.exec_ms is None:  # a table of times plans without the files
        ensure_models(spec)
    url = _prometheus_url(args)
    exec_time = exec_time_for(spec, data_dir(), url)
    result = plan(spec, exec_time, cotenant_share(spec, url))
    written = write_plan(result, args.out)
    if args.json:
        from hase_dagster.orchestration.cli import _print_json

        _print_json({**result.to_dict(), "written": [str(p) for p in written]})
    else:
        print(plan_markdown(result))
        print(f"written: {', '.join(str(p) for p in written)}")
    return 0


def _float_list(text: str) -> list[float]:
    import math

    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative finite numbers, got {text!r}")
    return values


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _kinds(text: str) -> list[str]:
    from hase_dagster.orchestration.serving_bench import CONFIG_KINDS

    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in CONFIG_KINDS]
    if not kinds or bad:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(CONFIG_KINDS)}, got {text!r}")
    return kinds


def cmd_serve_bench(args: argparse.Namespace) -> int:
    from hase_dagster.analysis.serving_models import ensure_models
    from hase_dagster.core.config import data_dir
    from hase_dagster.core.errors import HaseError
    from hase_dagster.orchestration.serving_bench import BenchSettings, serve_bench

    spec = _spec_with_load(args.spec, None, args.predictor, args)
    ensure_models(spec)
    if any(level > 1 for level in args.stress):
        raise HaseError(f"--stress levels must be in [0, 1], got {args.stress}")
    if any(scale <= 0 for scale in args.rate_scale):
        raise HaseError(f"--rate-scale values must be positive, got {args.rate_scale}")
    settings = BenchSettings(
        kinds=args.config,
        stress_levels=args.stress,
        rate_scales=args.rate_scale,
        duration_s=args.duration,
        drain_s=args.drain,
        threads=args.threads,
        grid_batches=args.grid_batches or spec.batch_sizes,
        grid_delays_ms=args.grid_delays_ms,
        grid_scales=args.grid_rate_scales,
        grid_levels=args.grid_stress,
        seed=args.seed,
        metrics_port=args.metrics_port,
    )

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM ends the bench as Ctrl-C does: stressor stopped, runs kept

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        runs = serve_bench(spec, settings, args.out, data_dir(), _prometheus_url(args))
    except KeyboardInterrupt:
        # The stressor and the metrics server are stopped on the way out; finished runs are kept.
        raise HaseError(
            f"interrupted: the runs finished so far are in {args.out / 'runs.jsonl'}; run again to resume"
        ) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"runs: {runs}")
    return 0


def cmd_serving_report(args: argparse.Namespace) -> int:
    from hase_dagster.learn.serving_report import serving_report

    text = serving_report(args.results / "runs.jsonl")
    if args.write:
        (args.results / "report.md").write_text(text)
    print(text, end="")
    return 0


def cmd_serving_models(args: argparse.Namespace) -> int:
    from hase_dagster.analysis.serving_models import export_serving_models

    for path in export_serving_models(args.names, args.out):
        print(path)
    return 0


def _positive_float(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def register(commands: Any) -> None:
    """Add the serving commands to the ``hase`` parser's subcommands."""
    plan = commands.add_parser(
        "plan",
        help="plan batch sizes, queue delays and priorities for models served on one device (simulated)",
    )
    plan.add_argument("spec", type=Path, help="plan YAML: models with SLOs, priorities and rates, and a load")
    plan.add_argument("--load", default=None, help="prometheus, idle or level=X (overrides the YAML's load)")
    plan.add_argument(
        "--out",
        type=Path,
        default=Path("serving_plan"),
        help="folder for plan.json, plan.md and <model>/config.pbtxt (default: ./serving_plan)",
    )
    plan.add_argument("--prometheus-url", default=None, help="Prometheus for --load prometheus (default: hase.yaml's)")
    plan.add_argument(
        "--predictor",
        default=None,
        help="a predictor bundle (name or folder) instead of the data directory's trained predictor",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    _add_runtime_options(plan)
    plan.set_defaults(handler=cmd_plan)

    bench = commands.add_parser(
        "serve-bench",
        help="serve a plan YAML's models on the small executor under the stressor and compare configurations",
    )
    bench.add_argument("spec", type=Path, help="plan YAML (as for hase plan)")
    bench.add_argument(
        "--config",
        type=_kinds,
        default=["planner", "batch1", "triton-default"],
        help="comma-separated: planner, batch1, triton-default, grid (default: the first three)",
    )
    bench.add_argument("--stress", type=_float_list, default=[0.0], help="stress levels, e.g. 0,0.5,1 (default 0)")
    bench.add_argument(
        "--rate-scale",
        type=_float_list,
        default=[1.0],
        help="arrival rates times these factors, e.g. 0.5,1,2 (default 1)",
    )
    bench.add_argument("--duration", type=_positive_float, default=5.0, help="seconds of arrivals per run (default 5)")
    bench.add_argument(
        "--drain",
        type=_positive_float,
        default=2.0,
        help="seconds after the last arrival before what is queued counts as missed (default 2)",
    )
    bench.add_argument(
        "--threads",
        type=int,
        choices=range(1, 65),
        default=1,
        metavar="N",
        help="ORT intra-op threads per session (default 1)",
    )
    bench.add_argument("--grid-batches", type=_int_list, default=None, help="grid batch sizes (default: the plan's)")
    bench.add_argument("--grid-delays-ms", type=_float_list, default=[0.0], help="grid queue delays, ms (default 0)")
    bench.add_argument("--grid-rate-scales", type=_float_list, default=None, help="rate scales the grid runs at (all)")
    bench.add_argument("--grid-stress", type=_float_list, default=None, help="stress levels the grid runs at (all)")
    bench.add_argument("--seed", type=int, default=0, help="arrival schedule seed (default 0)")
    bench.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on 127.0.0.1:PORT")
    bench.add_argument("--predictor", default=None, help="a predictor bundle (name or folder)")
    bench.add_argument("--prometheus-url", default=None, help=argparse.SUPPRESS)
    bench.add_argument("--out", type=Path, required=True, help="folder for runs.jsonl and requests.csv (appended)")
    _add_runtime_options(bench)
    bench.set_defaults(handler=cmd_serve_bench)

    report = commands.add_parser("serving-report", help="markdown report of a serve-bench folder")
    report.add_argument("results", type=Path, help="the folder hase serve-bench wrote")
    report.add_argument("--write", action="store_true", help="also write it to RESULTS/report.md")
    report.set_defaults(handler=cmd_serving_report)

    models = commands.add_parser("serving-models", help="export the serving proof's models with a dynamic batch")
    models.add_argument("out", type=Path, help="folder to write <name>.onnx into")
    models.add_argument("names", nargs="+", help="resnet18, resnet18_112, encoder_small, encoder_base")
    models.set_defaults(handler=cmd_serving_models)
