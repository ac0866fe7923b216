"""Partitions shared by the asset graph."""

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


def _stress_levels() -> list[str]:
    from hase_dagster.core.config import load_config, stress_level_key

    return [stress_level_key(level) for level in load_config().stress_levels]


stress_level_partitions = dg.StaticPartitionsDefinition(_stress_levels())
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
