"""Jobs over the asset graph, one per partitioning (a Dagster job has one partitions definition)."""

import dagster as dg

from assets.analysis import analysis_assets
from assets.learning import latency_predictions, learning_assets
from assets.measurement import measurement_assets
from assets.partitions import batch_size_partitions, measurement_partitions
from assets.serving import serving_assets
from assets.static_detection import static_detection_assets

analysis_job = dg.define_asset_job(
    "analysis_job",
    selection=dg.AssetSelection.assets(*analysis_assets),
    partitions_def=batch_size_partitions,
    description="Export, optimize, catalog and extract the kernels of every zoo model at one batch size.",
)

benchmark_job = dg.define_asset_job(
    "benchmark_job",
    selection=dg.AssetSelection.assets(*measurement_assets),
    partitions_def=measurement_partitions,
    description="Time every kernel and every whole model at one stress level and batch size.",
)

learning_job = dg.define_asset_job(
    "learning_job",
    selection=dg.AssetSelection.assets(*learning_assets, *serving_assets, *static_detection_assets),
    description="Train the regressor, predict every zoo model, evaluate predictions against measurements, and "
    "plan serving from the predictions.",
)

latency_predictions_job = dg.define_asset_job(
    "latency_predictions_job",
    selection=dg.AssetSelection.assets(latency_predictions),
    description="Re-predict every zoo model under the current load (requested by prometheus_load_sensor).",
)
