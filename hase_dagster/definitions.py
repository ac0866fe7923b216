"""The Hase code location: one Definitions merged from the parts of the asset graph."""

import dagster as dg

from assets.analysis import analysis_assets
from assets.partitions import batch_size_partitions
from resources.hase import HaseResource
from sensors.partitions import batch_size_partitions_sensor

analysis_job = dg.define_asset_job(
    "analysis_job",
    selection=dg.AssetSelection.assets(*analysis_assets),
    partitions_def=batch_size_partitions,
    description="Export, optimize, catalog and extract the kernels of every zoo model at one batch size.",
)

analysis = dg.Definitions(
    assets=analysis_assets,
    jobs=[analysis_job],
    sensors=[batch_size_partitions_sensor],
)

defs = dg.Definitions.merge(analysis, dg.Definitions(resources={"hase": HaseResource()}))
