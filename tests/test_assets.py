"""The analysis assets, materialized in-process against real ORT and a real DuckDB file."""

import json
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from assets.analysis import analysis_assets
from hase_dagster.definitions import defs
from resources.hase import HaseResource
from warehouse.store import Warehouse

TABLES = ["model_files", "optimized_nodes", "kernels", "kernel_models", "dag_edges"]


def test_definitions_load() -> None:
    dg.Definitions.validate_loadable(defs)
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"onnx_models", "optimized_graphs", "kernel_catalog", "kernel_onnx", "model_dags"} <= keys


@pytest.fixture()
def hase(test_config: Path, tmp_path: Path) -> HaseResource:
    return HaseResource(config_path=str(test_config), data_directory=str(tmp_path / "data"))


def _materialize(hase: HaseResource, partition: str, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return dg.materialize(analysis_assets, partition_key=partition, resources={"hase": hase}, instance=instance)


def test_analysis_assets_materialize_twice_without_duplicates(hase: HaseResource) -> None:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["1", "2"])
    first = _materialize(hase, "1", instance)
    assert first.success
    store = Warehouse(hase.paths().database)
    counts = {table: store.count(table) for table in TABLES}
    assert counts["model_files"] == 2 and counts["kernels"] > 40 and counts["dag_edges"] > 40
    assert _materialize(hase, "1", instance).success
    assert {table: store.count(table) for table in TABLES} == counts
    # Another partition adds its own slice and leaves the first alone.
    assert _materialize(hase, "2", instance).success
    assert store.count("kernels", batch_size=1) == counts["kernels"]
    assert store.count("kernels", batch_size=2) == counts["kernels"]

    catalog = json.loads((hase.paths().catalogs("cpu") / "resnet18_i64_b1.json").read_text())
    assert catalog["families"]["Conv_Add_Relu"] == 8 and catalog["unmapped_original_ops"] == []
    families = store.query("SELECT DISTINCT family FROM kernels WHERE variant_id LIKE 'transformer%'")
    assert {"Add_LayerNormalization", "Gelu"} <= set(families["family"])
    kernel_files = store.query("SELECT path FROM kernel_models WHERE batch_size = 1")["path"]
    assert all(Path(p).exists() for p in kernel_files)
    checks = first.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [("every_original_op_mapped", True)]
    materialization = first.asset_materializations_for_node("kernel_catalog")[0]
    assert "Conv_Add_Relu" in materialization.metadata["family_counts"].value


def test_parallel_analysis_fingerprints_a_batch_one_twin(test_config: Path, tmp_path: Path) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["analysis_workers"] = 2
    test_config.write_text(yaml.safe_dump(document))
    hase = HaseResource(config_path=str(test_config), data_directory=str(tmp_path / "data"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["3"])

    result = _materialize(hase, "3", instance)

    assert result.success
    catalog = json.loads((hase.paths().catalogs("cpu") / "resnet18_i64_b3.json").read_text())
    assert catalog["families"]["Conv_Add_Relu"] == 8 and catalog["unmapped_original_ops"] == []
    assert len(list(hase.paths().fusion_maps("cpu").glob("*.json"))) == 2
    logs = [e.message for e in instance.all_logs(result.run_id) if e.message]
    assert sum("fusion map twin" in m for m in logs) == 2
    shapes = Warehouse(hase.paths().database).query(
        "SELECT inputs_json FROM kernels WHERE variant_id = 'resnet18_i64_b3'"
    )
    assert all(json.loads(s)[0]["shape"][0] == 3 for s in shapes["inputs_json"])


def test_unknown_model_fails_and_keeps_existing_rows(hase: HaseResource, test_config: Path) -> None:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["1"])
    assert _materialize(hase, "1", instance).success
    store = Warehouse(hase.paths().database)
    before = store.count("model_files")
    config = test_config.read_text().replace("name: resnet18", "name: resnet_does_not_exist")
    test_config.write_text(config)
    with pytest.raises(Exception, match="resnet_does_not_exist"):
        _materialize(hase, "1", instance)
    assert store.count("model_files") == before
    assert not list(hase.paths().models.glob("*.partial"))


def test_batch_size_zero_partition_is_refused(hase: HaseResource) -> None:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["0"])
    with pytest.raises(Exception, match="positive integer"):
        _materialize(hase, "0", instance)
    assert not hase.paths().database.exists() or Warehouse(hase.paths().database).count("model_files") == 0


def test_precision_variants_are_exported_catalogued_and_extracted(test_config: Path, tmp_path: Path) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["models"][0] |= {"precisions": ["fp32", "fp16", "int8"], "precision_batch_sizes": [1]}
    test_config.write_text(yaml.safe_dump(document))
    hase = HaseResource(config_path=str(test_config), data_directory=str(tmp_path / "data"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("batch_size", ["1", "2"])

    result = _materialize(hase, "1", instance)

    assert result.success
    store = Warehouse(hase.paths().database)
    files = store.query("SELECT * FROM model_files ORDER BY variant_id").set_index("variant_id")
    # fp32 ids are those of tables written before precisions existed.
    assert files["precision"].to_dict() == {
        "resnet18_i64_b1": "fp32",
        "resnet18_i64_b1_fp16": "fp16",
        "resnet18_i64_b1_int8": "int8",
        "transformer_encoder_s16_b1": "fp32",
    }
    assert set(files.loc[["resnet18_i64_b1_fp16", "resnet18_i64_b1_int8"], "base_variant_id"]) == {"resnet18_i64_b1"}
    assert files["top1_agreement"].notna().sum() == 2 and pd.isna(files.loc["resnet18_i64_b1", "top1_agreement"])
    # Weights in half and a quarter of the bytes.
    assert files.loc["resnet18_i64_b1_fp16", "size_bytes"] < 0.6 * files.loc["resnet18_i64_b1", "size_bytes"]
    assert files.loc["resnet18_i64_b1_int8", "size_bytes"] < 0.35 * files.loc["resnet18_i64_b1", "size_bytes"]
    kernels = store.query("SELECT variant_id, op_type, precision, flops, instance_id FROM kernels")
    int8 = kernels[kernels["variant_id"] == "resnet18_i64_b1_int8"]
    convs = int8[int8["op_type"] == "QLinearConv"]
    # The CPU EP runs every convolution of the int8 resnet18 in INT8, with its FLOPs counted.
    assert len(convs) == 20 and set(convs["precision"]) == {"int8"} and (convs["flops"] > 0).all()
    fp32 = kernels[kernels["variant_id"] == "resnet18_i64_b1"]
    assert set(fp32["precision"]) == {"fp32"}
    # No fp32 kernel instance is shared with the int8 model: element types are part of the instance.
    assert not set(convs["instance_id"]) & set(fp32["instance_id"])
    extracted = store.query(
        "SELECT k.path FROM kernel_models k WHERE instance_id IN (SELECT unnest(?))", [list(convs["instance_id"])]
    )
    assert len(extracted) == convs["instance_id"].nunique() and all(Path(p).exists() for p in extracted["path"])
    # The mapping check covers the fp32 variants; the others are listed as not fingerprinted.
    assert [(c.check_name, c.passed) for c in result.get_asset_check_evaluations()] == [
        ("every_original_op_mapped", True)
    ]
    materialization = result.asset_materializations_for_node("kernel_catalog")[0]
    assert set(materialization.metadata["unfingerprinted_precision_variants"].value) <= {
        "resnet18_i64_b1_fp16",
        "resnet18_i64_b1_int8",
    }
    # precision_batch_sizes keeps batch 2 in fp32.
    assert _materialize(hase, "2", instance).success
    assert set(store.query("SELECT precision FROM model_files WHERE batch_size = 2")["precision"]) == {"fp32"}
