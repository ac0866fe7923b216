"""Partitions shared by the asset graph."""

import os
from collections.abc import Mapping

import dagster as dg

from hase_dagster.core.errors import HaseError

# Dynamic: adding a batch size is adding a partition (then a backfill), no code change.
batch_size_partitions = dg.DynamicPartitionsDefinition(name="batch_size")


def _batch_size(key: str) -> int:
    if not key.isdigit() or int(key) <= 0:
        raise HaseError(f"batch size partition must be a positive integer, got {key!r}")
    return int(key)


def batch_size_of(context: dg.AssetExecutionContext) -> int:
    """The batch size of the running partition, validated."""
    return _batch_size(context.partition_key)


def stress_level_keys(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The stress-level partition keys: ``HASE_STRESS_LEVELS`` (comma-separated levels in [0, 1]) when
    set, else the config's ``stress_levels`` (HASE_CONFIG or the repository's ``hase.yaml``).

    Dagster reads partitions when the code location loads, so this runs at import; the variable lets
    a test or a deployment set them without any config file.
    """
    from hase_dagster.core.config import load_config, stress_level_key

    given = environ.get("HASE_STRESS_LEVELS", "").strip()
    if not given:
        return [stress_level_key(level) for level in load_config(environ.get("HASE_CONFIG") or None).stress_levels]
    try:
        levels = [float(part) for part in given.split(",")]
    except ValueError as exc:
        raise HaseError(f"HASE_STRESS_LEVELS must be comma-separated numbers, got {given!r}") from exc
    if not all(0.0 <= level <= 1.0 for level in levels):
        raise HaseError(f"HASE_STRESS_LEVELS must lie in [0, 1], got {given!r}")
    return [stress_level_key(level) for level in levels]


stress_level_partitions = dg.StaticPartitionsDefinition(stress_level_keys())
measurement_partitions = dg.MultiPartitionsDefinition(
    {"stress_level": stress_level_partitions, "batch_size": batch_size_partitions}
)


def stress_and_batch_of(context: dg.AssetExecutionContext) -> tuple[float, int]:
    """(stress level, batch size) of the running multi-partition, validated."""
    key = context.partition_key
    if not isinstance(key, dg.MultiPartitionKey):
        raise HaseError(f"expected a stress_level|batch_size partition, got {key!r}")
    dimensions = key.keys_by_dimension
    return float(dimensions["stress_level"]), _batch_size(dimensions["batch_size"])
