"""Shared fixtures: small real models exported once per test session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel

TINY_TRANSFORMER = ZooModel(
    name="transformer_encoder", kind="transformer_encoder", d_model=64, nhead=4, dim_feedforward=128, num_layers=1
)

TEST_PROFILE = {
    "default_profile": "tiny",
    "stress_levels": [0.0, 0.5],
    "max_held_out_rows_mape_pct": 1000.0,
    "profiles": {
        "tiny": {
            "device": "cpu",
            "models": [
                {"name": "resnet18"},
                {
                    "name": "transformer_encoder",
                    "kind": "transformer_encoder",
                    "d_model": 64,
                    "nhead": 4,
                    "dim_feedforward": 128,
                    "num_layers": 1,
                },
            ],
            "input_sizes": [64],
            "sequence_lengths": [16],
            "batch_sizes": [1, 2],
            "kernel_timing": {"warmup": 1, "min_loops": 3, "max_loops": 5, "min_seconds": 0, "max_seconds": 0.05},
            "model_timing": {"warmup": 1, "min_loops": 3, "max_loops": 5, "min_seconds": 0, "max_seconds": 0.2},
            "telemetry": {
                "fields": ["DCGM_FI_DEV_GPU_UTIL", "HOST_CPU_UTIL", "HOST_LOAD_1M"],
                "background_window_s": 0.2,
            },
        }
    },
}


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def _export(model: ZooModel, size: int, models_dir: Path) -> Path:
    return export_variant(ModelVariant(model, size, 1), models_dir, opset=17).path


@pytest.fixture(scope="session")
def resnet18_onnx(models_dir: Path) -> Path:
    return _export(ZooModel(name="resnet18"), 64, models_dir)


@pytest.fixture(scope="session")
def squeezenet_onnx(models_dir: Path) -> Path:
    return _export(ZooModel(name="squeezenet1_1"), 64, models_dir)


@pytest.fixture(scope="session")
def transformer_onnx(models_dir: Path) -> Path:
    return _export(TINY_TRANSFORMER, 16, models_dir)


@pytest.fixture()
def test_config(tmp_path: Path) -> Path:
    path = tmp_path / "hase.yaml"
    path.write_text(yaml.safe_dump(TEST_PROFILE))
    return path


def conv_network(path: Path, batch: int, channels: int, size: int) -> Path:
    """Conv 3x3 -> Relu -> depthwise 3x3 -> Conv 1x1, at a fixed batch."""
    rng = np.random.default_rng(channels)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=channels),
        helper.make_node("Conv", ["c", "w3"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2 * channels, size, size])],
        [
            weight("w1", (channels, 16, 3, 3)),
            weight("w2", (channels, 1, 3, 3)),
            weight("w3", (2 * channels, channels, 1, 1)),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def analysed_profile(tmp_path: Path, models: list[dict], batch: str = "1", **settings: object) -> tuple:
    """The test profile with ``models`` (and profile ``settings``) as ``tmp_path/hase.yaml``, its analysis assets
    materialized for ``batch`` in an ephemeral instance.

    Returns:
        (the HaseResource, the instance, the analysis run's result).
    """
    import copy

    import dagster as dg

    from assets.analysis import analysis_assets
    from resources.hase import HaseResource

    document = copy.deepcopy(TEST_PROFILE)
    document["profiles"]["tiny"] |= {"models": models, **settings}
    config = tmp_path / "hase.yaml"
    config.write_text(yaml.safe_dump(document))
    hase = HaseResource(config_path=str(config), data_directory=str(tmp_path / "data"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", [batch])
    result = dg.materialize(analysis_assets, partition_key=batch, resources={"hase": hase}, instance=instance)
    return hase, instance, result
