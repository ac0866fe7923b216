"""The resources a Hase run gets, built in one place for the code location and for ``hase materialize``."""

from typing import Any

from resources.hase import HaseResource
from resources.prometheus import PrometheusResource
from resources.stressor import StressorResource


def hase_resources(prometheus_url: str, profile_name: str = "") -> dict[str, Any]:
    """``hase`` (config, profile, data directory), ``stressor`` and ``prometheus``.

    Args:
        prometheus_url: the Prometheus that scrapes the Hase exporter.
        profile_name: the profile to run; empty means HASE_PROFILE or the config's default.

    Returns:
        The resource dict that ``dg.Definitions`` and ``execute_in_process`` take.
    """
    return {
        "hase": HaseResource(profile_name=profile_name),
        "stressor": StressorResource(),
        "prometheus": PrometheusResource(url=prometheus_url),
    }
