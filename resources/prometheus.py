"""The Prometheus resource: the device's current load as scraped from the Hase exporter."""

import dagster as dg

from hase_dagster.measure.prometheus import PrometheusClient


class PrometheusResource(dg.ConfigurableResource):
    """A Prometheus server that scrapes the Hase exporter (``hase_dagster/prometheus/run-prometheus.sh``)."""

    url: str = "http://127.0.0.1:9090"
    timeout_s: float = 2.0

    @property
    def client(self) -> PrometheusClient:
        return PrometheusClient(url=self.url, timeout_s=self.timeout_s)

    def query(self, expr: str) -> list[dict]:
        """The instant query's ``data.result`` (see :meth:`PrometheusClient.query`)."""
        return self.client.query(expr)

    def current_load(self, fields: list[str]) -> dict[str, float]:
        """The latest value of each metric in ``fields`` (see :meth:`PrometheusClient.current_load`)."""
        return self.client.current_load(fields)
