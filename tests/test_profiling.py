"""Operator-level profiling (issue 14 A): the category mapping, the native_functions.yaml lookup, the
kernel attribution from a trace, and a real profile of a tiny BERT through the Dagster assets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from hase_dagster.analysis.aten_ops import (
    base_name,
    categorize,
    dispatch_of,
    family_category,
    native_function,
    native_functions_path,
    source_locations,
)
from hase_dagster.analysis.op_models import all_keys, grid, parse_key, scope_of
from hase_dagster.core.errors import HaseError
from hase_dagster.measure.op_profile import kernels_by_op
from tests.conftest import TEST_PROFILE

SMOKE = "bert_tiny-b1-s32"


@pytest.mark.parametrize(
    ("op", "category"),
    [
        ("aten::addmm", "matrix"),
        ("aten::linear", "matrix"),
        ("aten::bmm", "matrix"),
        ("aten::matmul", "matrix"),
        ("aten::mm", "matrix"),
        ("aten::native_layer_norm", "normalization"),
        ("aten::_native_batch_norm_legit_no_training", "normalization"),
        ("aten::gelu", "activation"),
        ("aten::relu_", "activation"),
        ("aten::hardtanh_", "activation"),
        ("aten::scaled_dot_product_attention", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::_scaled_dot_product_efficient_attention", "attention"),
        ("aten::_softmax", "attention"),
        ("aten::embedding", "embedding"),
        ("aten::index_select", "embedding"),
        ("aten::add_.Tensor", "elementwise"),
        ("aten::mul", "elementwise"),
        ("aten::copy_", "memory"),
        ("aten::transpose", "memory"),
        ("aten::view", "memory"),
        ("aten::contiguous", "memory"),
        ("aten::cudnn_convolution", "convolution"),
        ("aten::max_pool2d_with_indices", "other"),
        ("aten::no_such_op", "other"),
    ],
)
def test_aten_operators_fall_in_their_category(op: str, category: str) -> None:
    assert categorize(op) == category


def test_names_are_reduced_to_their_operator() -> None:
    assert base_name("aten::add_.Tensor") == "add"
    assert base_name("aten::__and__.Tensor") == "__and__"
    # Ops that merely contain a known name are not taken for it.
    assert categorize("aten::addmv_impl_") != "elementwise"
    assert family_category("Add_LayerNormalization") == "normalization"
    assert family_category("MatMul_Add") == "matrix"
    assert family_category("Conv_Add_Relu") == "convolution"
    assert family_category("Transpose") == "memory"


def test_native_functions_yaml_ships_in_the_wheel_and_gives_the_dispatch() -> None:
    assert native_functions_path().is_file()
    entry = native_function("aten::addmm")
    assert entry is not None and entry.func.startswith("addmm(") and entry.structured_delegate == "addmm.out"
    # A structured operator runs its delegate's kernels.
    assert dispatch_of("aten::addmm")["CUDA"] == "addmm_out_cuda"
    assert dispatch_of("aten::native_layer_norm")["CPU"] == "layer_norm_cpu"
    assert native_function("aten::no_such_op") is None
    cuda = source_locations("aten::addmm", "cuda")
    assert cuda[0].function == "addmm_out_cuda" and cuda[0].path.endswith("cuda/Blas.cpp") and cuda[0].grade == "known"
    # Nothing known: the path is a guess and says so.
    assert all(s.grade == "inferred" for s in source_locations("aten::empty", "cpu") if s.function == "empty_cpu")


def test_kernels_are_attributed_to_the_innermost_operator_and_its_callers() -> None:
    def op(name: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "tid": 1, "ts": ts, "dur": dur}

    def launch(correlation: int, ts: float, name: str = "cudaLaunchKernel") -> dict:
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "tid": 1,
            "ts": ts,
            "dur": 1,
            "args": {"correlation": correlation},
        }

    def kernel(correlation: int, name: str, dur: float) -> dict:
        args = {"correlation": correlation, "grid": [4, 1, 1], "block": [128, 1, 1]}
        return {"ph": "X", "cat": "kernel", "name": name, "tid": 7, "ts": 1000, "dur": dur, "args": args}

    events = [
        op("aten::linear", 0, 100),
        op("aten::addmm", 10, 50),
        launch(1, 20),
        op("aten::gelu", 120, 20),
        launch(2, 125, "cuLaunchKernelEx"),
        launch(3, 500),  # outside every operator
        kernel(1, "sm90_gemm", 30.0),
        kernel(2, "gelu_kernel", 5.0),
        kernel(3, "orphan", 1.0),
    ]
    found = kernels_by_op(events)
    assert set(found["self"]) == {"aten::addmm", "aten::gelu"}
    assert found["self"]["aten::addmm"]["sm90_gemm"]["grid"] == [4, 1, 1]
    assert found["inclusive"]["aten::linear"]["sm90_gemm"]["device_us"] == 30.0
    assert "sm90_gemm" not in found["inclusive"]["aten::gelu"]
    assert found["launch_apis"] == {"cudaLaunchKernel": 2, "cuLaunchKernelEx": 1}
    assert found["kernels"] == 3 and found["unmatched_kernels"] == 1


def test_onnx_node_names_give_the_module_path_torch_uses() -> None:
    assert scope_of("/layer1/layer1.0/conv1/Conv") == "layer1.0.conv1"
    assert scope_of("/layer1/layer1.0/relu_1/Relu") == "layer1.0.relu"  # the module's second call
    assert scope_of("/features/features.0/features.0.0/Conv") == "features.0.0"
    assert scope_of("/bert/encoder/layer.0/attention/self/query/MatMul") == "encoder.layer.0.attention.self.query"
    assert scope_of("Identity_3") == ""


def test_partition_keys_parse_and_bad_ones_are_refused() -> None:
    keys = all_keys()
    assert SMOKE in keys and len(keys) == len(set(keys))
    assert all(parse_key(c.key) == c for c in grid("cuda") + grid("cpu"))
    assert len([c for c in grid("cuda") if c.model == "bert_base"]) == 12
    for bad in ("bert_base-b0-s128", "resnet18-b1-s128", "gpt2-b1-s128", "bert_base"):
        with pytest.raises(HaseError):
            parse_key(bad)


@pytest.fixture(scope="module")
def profiled(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dg.ExecuteInProcessResult, dg.ExecuteInProcessResult]:
    """The tiny BERT profiled through the assets on the CPU profile, then compared."""
    from assets.profiling import operator_profile, profiling_comparison
    from resources.hase import HaseResource

    root = tmp_path_factory.mktemp("profiling")
    (root / "hase.yaml").write_text(yaml.safe_dump(TEST_PROFILE))
    hase = HaseResource(config_path=str(root / "hase.yaml"), data_directory=str(root / "data"))
    instance = dg.DagsterInstance.ephemeral()
    one = dg.materialize([operator_profile], partition_key=SMOKE, resources={"hase": hase}, instance=instance)
    both = dg.materialize(
        [profiling_comparison], resources={"hase": hase}, instance=instance, selection=[profiling_comparison]
    )
    return root / "data" / "profiling" / "cpu", one, both


def test_the_asset_profiles_a_real_model_with_its_partition_key(profiled) -> None:
    folder, one, _ = profiled
    assert one.success and all(check.passed for check in one.get_asset_check_evaluations())
    summary = json.loads((folder / SMOKE / "summary.json").read_text())
    assert summary["config"]["key"] == SMOKE and summary["device"] == "cpu"
    shares = summary["categories"]
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    # The shares are the ops' self CPU times summed by category (which category leads a tiny BERT's CPU
    # profile depends on the machine's timing: "activation" once outranked "matrix" on a 2-core VM).
    ops = {r["op"]: r for r in summary["ops"]}
    matrix_ms = sum(r["self_cpu_ms"] for r in summary["ops"] if r["category"] == "matrix")
    assert shares["matrix"] == pytest.approx(matrix_ms / sum(r["self_cpu_ms"] for r in summary["ops"]))
    assert shares["matrix"] > 0
    assert ops["aten::addmm"]["category"] == "matrix" and ops["aten::addmm"]["calls"] > 0
    assert ops["aten::linear"]["total_cpu_ms"] >= ops["aten::addmm"]["self_cpu_ms"]
    # The trace is a gzipped Chrome trace.
    with gzip.open(folder / SMOKE / "trace.json.gz", "rt") as handle:
        assert any(e.get("name") == "aten::addmm" for e in json.load(handle)["traceEvents"])
    # ORT ran the same model; its linear layers became MatMul kernels.
    ort = summary["ort"]
    assert ort["kernels"] > 0 and ort["wall_ms"] > 0
    linear = next(m for m in ort["aten_to_families"] if m["op"] == "aten::linear")
    assert any("MatMul" in family or "Gemm" in family for family in linear["families"])
    # HTA was tried on the CPU trace and the reason it has nothing to measure is recorded.
    assert "note" in summary["hta"] or "error" in summary["hta"]


def test_the_report_names_top_operators_their_yaml_entry_and_sources(profiled) -> None:
    folder, one, _ = profiled
    report = (folder / SMOKE / "report.md").read_text()
    summary = json.loads((folder / SMOKE / "summary.json").read_text())
    top = summary["ops"][0]
    assert f"| `{top['op']}` | {top['category']} |" in report
    assert "native_functions.yaml" in report and "aten/src/ATen/native/" in report
    assert "## Categories" in report and "Eager PyTorch against ORT" in report
    metadata = one.asset_materializations_for_node("operator_profile")[0].metadata
    assert metadata["top_3"].value.startswith(top["op"])


def test_the_comparison_shows_its_plot_inline(profiled) -> None:
    folder, _, both = profiled
    assert both.success
    metadata = both.asset_materializations_for_node("profiling_comparison")[0].metadata
    assert metadata["plot"].value.startswith("![") and "data:image/png;base64," in metadata["plot"].value
    assert SMOKE in (folder / "comparison" / "comparison.md").read_text()
    assert (folder / "comparison" / "category_shares.png").stat().st_size > 1000
