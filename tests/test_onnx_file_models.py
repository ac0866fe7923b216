"""A user's own ONNX file as a profile model (``kind: onnx_file``): validated in the config, exported at
each batch size of the profile, and analysed by the real assets into kernels like a zoo model's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel, load_config
from hase_dagster.core.errors import ConfigError, HaseError
from tests.conftest import analysed_profile
from warehouse.store import Warehouse


def _conv_net(path: Path, batch: int | str) -> Path:
    """Conv 3->8 (3x3) -> Relu -> GlobalAveragePool on a 16x16 image, batch ``batch`` (a name: symbolic)."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["input", "w"], ["conv"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["conv"], ["relu"]),
            helper.make_node("GlobalAveragePool", ["relu"], ["output"]),
        ],
        "user_net",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 8, 1, 1])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_dynamic_batch_file_is_exported_at_each_batch_size(tmp_path: Path) -> None:
    source = _conv_net(tmp_path / "user_net.onnx", "batch")
    model = ZooModel(name="user_net", kind="onnx_file", path=str(source))

    exported = [export_variant(ModelVariant(model, 16, b), tmp_path / "out", opset=17) for b in (1, 3)]

    assert [e.variant_id for e in exported] == ["user_net_i16_b1", "user_net_i16_b3"]
    assert [e.inputs["input"][0] for e in exported] == [1, 3]
    assert [e.outputs["output"] for e in exported] == [[1, 8, 1, 1], [3, 8, 1, 1]]
    assert exported[1].opset == 17 and exported[1].path.exists()


def test_a_path_template_names_one_file_per_batch_size(tmp_path: Path) -> None:
    for batch in (1, 2):
        _conv_net(tmp_path / f"net_b{batch}.onnx", batch)
    model = ZooModel(name="net", kind="onnx_file", path=str(tmp_path / "net_b{batch_size}.onnx"))

    exported = export_variant(ModelVariant(model, 16, 2), tmp_path / "out", opset=17)

    assert exported.inputs["input"] == [2, 3, 16, 16]


def test_a_fixed_batch_of_another_size_and_a_missing_file_are_named(tmp_path: Path) -> None:
    fixed = ZooModel(name="net", kind="onnx_file", path=str(_conv_net(tmp_path / "net.onnx", 4)))
    with pytest.raises(HaseError, match=r"fixed batch size of 4, not 2"):
        export_variant(ModelVariant(fixed, 16, 2), tmp_path / "out", opset=17)
    missing = ZooModel(name="net", kind="onnx_file", path=str(tmp_path / "absent.onnx"))
    with pytest.raises(HaseError, match=r"no such ONNX file: .*absent\.onnx"):
        export_variant(ModelVariant(missing, 16, 1), tmp_path / "out", opset=17)
    assert not list((tmp_path / "out").glob("*partial*"))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "net", "kind": "onnx_file"}, "path is an onnx_file's option, and one it needs"),
        ({"name": "resnet18", "path": "resnet18.onnx"}, "path is an onnx_file's option"),
        ({"name": "net", "kind": "onnx_file", "path": "net_{batch}.onnx"}, "may name only"),
    ],
)
def test_the_config_names_a_bad_onnx_file_entry(
    entry: dict[str, str], message: str, test_config: Path, tmp_path: Path
) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["models"] = [entry]
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match=message):
        load_config(edited)


def test_the_analysis_assets_catalog_an_onnx_file_model(tmp_path: Path) -> None:
    source = _conv_net(tmp_path / "user_net.onnx", "batch")

    hase, _, result = analysed_profile(tmp_path, [{"name": "user_net", "kind": "onnx_file", "path": str(source)}], "2")

    assert result.success
    kernels = Warehouse(hase.paths().database).query("SELECT variant_id, family FROM kernels")
    assert set(kernels.variant_id) == {"user_net_i16_b2"}  # the file's own size, not the profile's 64
    assert "Conv" in " ".join(kernels.family)
