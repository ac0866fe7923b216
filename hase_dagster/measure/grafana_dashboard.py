"""The Grafana dashboard of a served device, generated with grafana-foundation-sdk.

Panels: device load (the exporter's DCGM fields, or HOST_CPU_UTIL on a CPU host), measured latency
percentiles against the planner's simulated ones per model, Hase's predicted execution time per
batch size, SLO attainment and goodput, queue length and batch sizes. Every query reads metrics that
``hase exporter`` (:mod:`hase_dagster.measure.exporter`) or the serving executor
(:mod:`hase_dagster.measure.serving`) publishes.

    python -m hase_dagster.measure.grafana_dashboard [--out hase_dagster/prometheus/grafana/dashboards]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

DASHBOARD_UID = "hase-serving"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="hase-prometheus")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "prometheus" / "grafana" / "dashboards"
WINDOW = "1m"


@dataclass(frozen=True)
class PanelSpec:
    """One time-series panel: its title, unit and PromQL queries with their legends."""

    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]
    description: str = ""


def _quantile(q: float) -> str:
    return f"histogram_quantile({q}, sum by (model, le) (rate(hase_serving_request_latency_ms_bucket[{WINDOW}])))"


PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "Device load",
        "percent",
        (("DCGM_FI_DEV_GPU_UTIL or HOST_CPU_UTIL", "{{device}} utilization"),),
        "GPU utilization (DCGM field names, from hase exporter); HOST_CPU_UTIL on a CPU host.",
    ),
    PanelSpec(
        "Device memory used",
        "decmbytes",
        (("DCGM_FI_DEV_FB_USED or HOST_MEM_USED_MB", "{{device}}"),),
        "GPU frame buffer used (DCGM_FI_DEV_FB_USED, MiB); host memory on a CPU host.",
    ),
    PanelSpec(
        "Latency: measured against predicted",
        "ms",
        (
            (_quantile(0.5), "{{model}} measured p50"),
            (_quantile(0.99), "{{model}} measured p99"),
            ('hase_predicted_e2e_latency_ms{quantile=~"p50|p99"}', "{{model}} predicted {{quantile}}"),
            ("hase_serving_slo_ms", "{{model}} SLO"),
        ),
        "End-to-end latency (queueing + execution) from the executor's histogram, against the planner's "
        "simulation of the same configuration.",
    ),
    PanelSpec(
        "Predicted execution time per batch",
        "ms",
        (("hase_predicted_latency_ms", "{{model}} batch {{batch}}"),),
        "Hase's prediction of one batch's execution under the current load.",
    ),
    PanelSpec(
        "SLO attainment",
        "percentunit",
        (
            (
                f"sum by (model) (rate(hase_serving_requests_within_slo_total[{WINDOW}])) / "
                f"sum by (model) (rate(hase_serving_requests_total[{WINDOW}]))",
                "{{model}}",
            ),
        ),
        "Share of requests answered within the model's SLO.",
    ),
    PanelSpec(
        "Goodput",
        "reqps",
        (
            (f"sum by (model) (rate(hase_serving_requests_within_slo_total[{WINDOW}]))", "{{model}} within SLO"),
            (f"sum by (model) (rate(hase_serving_requests_total[{WINDOW}]))", "{{model}} answered"),
        ),
    ),
    PanelSpec("Queue length", "short", (("hase_serving_queue_length", "{{model}}"),)),
    PanelSpec(
        "Batch size",
        "short",
        (
            (
                f"sum by (model) (rate(hase_serving_batch_size_sum[{WINDOW}])) / "
                f"sum by (model) (rate(hase_serving_batch_size_count[{WINDOW}]))",
                "{{model}} mean",
            ),
            (
                f"histogram_quantile(0.9, sum by (model, le) (rate(hase_serving_batch_size_bucket[{WINDOW}])))",
                "{{model}} p90",
            ),
        ),
    ),
)


def queries() -> list[str]:
    """Every PromQL expression of the dashboard, in panel order."""
    return [expr for panel in PANELS for expr, _ in panel.queries]


def build_dashboard() -> Any:
    """The dashboard as the SDK's model (``grafana_foundation_sdk.models.dashboard.Dashboard``)."""
    builder = (
        dashboard_builder.Dashboard("Hase: serving on a shared device")
        .uid(DASHBOARD_UID)
        .tags(["hase", "serving"])
        .refresh("10s")
        .time("now-15m", "now")
        .timezone("browser")
    )
    for panel in PANELS:
        chart = timeseries.Panel().title(panel.title).unit(panel.unit).datasource(DATASOURCE).height(8).span(12)
        if panel.description:
            chart = chart.description(panel.description)
        for index, (expr, legend) in enumerate(panel.queries):
            chart = chart.with_target(
                prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + index))
            )
        builder = builder.with_panel(chart)
    return builder.build()


def dashboard_json() -> str:
    """The dashboard JSON Grafana imports (sorted keys, so a regeneration diffs cleanly)."""
    return json.dumps(build_dashboard(), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


def write_dashboard(out_dir: Path = DEFAULT_OUT) -> Path:
    """Write ``hase-serving.json`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "hase-serving.json"
    path.write_text(dashboard_json())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the Hase serving dashboard JSON.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    print(write_dashboard(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
