"""``hase plan``, ``hase serve-bench`` and ``hase serving-report``: the serving planner, its executor and
the comparison of the two (issue 16). Registered on the main parser by :func:`register`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _prometheus_url(args: argparse.Namespace) -> str:
    from hase_dagster.core.config import load_config

    return args.prometheus_url or load_config().prometheus_url


def _spec_with_load(path: Path, load: str | None):  # -> PlanSpec
    from hase_dagster.core.serving_spec import load_plan_spec
    from hase_dagster.learn.predict_file import parse_load_spec

    spec = load_plan_spec(path)
    if load is not None:
        spec = spec.model_copy(update={"load": load})
    parse_load_spec(spec.load)
    return spec


def cmd_plan(args: argparse.Namespace) -> int:
    from hase_dagster.core.config import data_dir
    from hase_dagster.learn.serving_plan import cotenant_share, exec_time_for, plan, plan_markdown, write_plan

    spec = _spec_with_load(args.spec, args.load)
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
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(handler=cmd_plan)
