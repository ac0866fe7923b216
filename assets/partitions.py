"""Partitions shared by the asset graph."""

import dagster as dg

from hase_dagster.errors import HaseError

# Dynamic: adding a batch size is adding a partition (then a backfill), no code change.
batch_size_partitions = dg.DynamicPartitionsDefinition(name="batch_size")


def batch_size_of(context: dg.AssetExecutionContext) -> int:
    """The batch size of the running partition, validated."""
    key = context.partition_key
    if not key.isdigit() or int(key) <= 0:
        raise HaseError(f"batch size partition must be a positive integer, got {key!r}")
    return int(key)
