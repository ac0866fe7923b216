"""Reading the device's current load from a Prometheus server that scrapes the Hase exporter."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import requests

from hase_dagster.core.errors import MissingMetricsError, PrometheusUnavailableError

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass(frozen=True)
class PrometheusClient:
    """Instant queries against one Prometheus server (``hase_dagster/prometheus/run-prometheus.sh``)."""

    url: str = "http://127.0.0.1:9090"
    timeout_s: float = 2.0

    def query(self, expr: str) -> list[dict]:
        """The result of the instant query ``expr`` (``data.result``: one dict per series, with
        ``metric`` labels and ``value`` = ``[timestamp, "value"]``).

        Raises ``PrometheusUnavailableError`` naming the URL when Prometheus does not answer, answers
        with something that is not a Prometheus API response, or rejects the query.
        """
        endpoint = f"{self.url.rstrip('/')}/api/v1/query"
        try:
            response = requests.get(endpoint, params={"query": expr}, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise PrometheusUnavailableError(f"Prometheus at {self.url} does not answer: {exc}") from exc
        try:
            body = response.json()
        except ValueError as exc:  # not JSON: something else listens there
            raise PrometheusUnavailableError(
                f"Prometheus at {self.url} answered HTTP {response.status_code} with something that is not "
                f"a Prometheus API response: {response.text[:200]!r}"
            ) from exc
        if not isinstance(body, dict):
            body = {"error": body}
        if body.get("status") != "success":
            raise PrometheusUnavailableError(
                f"Prometheus at {self.url} rejected the query {expr!r} (HTTP {response.status_code}): "
                f"{body.get('errorType', '?')}: {body.get('error', body)}"
            )
        return body["data"]["result"]

    def current_load(self, fields: list[str]) -> dict[str, float]:
        """The latest value of each metric in ``fields`` (the largest over series when several
        series, e.g. several devices or exporters, have it).

        Raises ``PrometheusUnavailableError`` when Prometheus does not answer and
        ``MissingMetricsError`` naming the fields that have no (fresh) series.
        """
        bad = [f for f in fields if not _METRIC_NAME.fullmatch(f)]
        if bad:
            raise ValueError(f"not Prometheus metric names: {bad}")
        if not fields:
            return {}
        names = "|".join(sorted(set(fields)))
        values: dict[str, float] = {}
        for series in self.query(f'{{__name__=~"{names}"}}'):
            name = series["metric"]["__name__"]
            value = float(series["value"][1])
            if not math.isnan(value):
                values[name] = max(value, values.get(name, value))
        missing = [f for f in fields if f not in values]
        if missing:
            raise MissingMetricsError(
                f"Prometheus at {self.url} has no series for {', '.join(missing)}: is the Hase exporter "
                f"(python -m hase_dagster.measure.exporter) running and scraped?"
            )
        return {f: values[f] for f in fields}
