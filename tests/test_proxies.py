"""Kernels of families the tables lack, predicted as the trained kernels that do their work (learn.proxies)."""

from __future__ import annotations

from math import prod
from pathlib import Path
from typing import Any

import pytest

from hase_dagster.analysis.catalog import kernel_from_dict
from hase_dagster.learn.bundles import read_bundle
from hase_dagster.learn.predict import predict_kernels
from hase_dagster.learn.proxies import einsum_as_matmul, proxy_records

H100 = Path(__file__).resolve().parents[1] / "results" / "bundles" / "h100"


def tensor(name: str, shape: list[int], weight: bool = False, dtype: str = "float") -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "weight": weight}


def einsum(equation: str, a: list[int], b: list[int], out: list[int], b_weight: bool = False) -> dict[str, Any]:
    return {
        "family": "Einsum",
        "op_type": "Einsum",
        "domain": "",
        "attributes": {"equation": equation},
        "inputs": [tensor("a", a), tensor("b", b, b_weight)],
        "outputs": [tensor("y", out)],
        "flops": 0,
    }


def test_attention_scores_run_as_orts_einsum_runs_them() -> None:
    """ORT numbers the labels b, h, i, d, j: the keys are transposed into that order (d before j) and again into the
    right operand's GEMM layout (b, h, d, j, then the absent i), multiplied in one batched MatMul with its FLOPs, and
    the product copied into the output."""
    records = einsum_as_matmul(einsum("bhid,bhjd->bhij", [2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 5, 7]))
    assert records is not None and [r["op_type"] for r in records] == ["MatMul", "Transpose", "Transpose", "Relu"]
    matmul, homogenized, gemm, copy = records
    assert [t["shape"] for t in matmul["inputs"]] == [[2, 3, 5, 8], [2, 3, 8, 7]]  # batch labels kept apart
    assert matmul["outputs"][0]["shape"] == [2, 3, 5, 7]
    assert matmul["flops"] == 2 * 6 * 5 * 7 * 8
    assert matmul["input_bytes"] == 4 * (6 * 5 * 8 + 6 * 8 * 7)
    assert homogenized["inputs"][0]["shape"] == [2, 3, 7, 8] and homogenized["outputs"][0]["shape"] == [2, 3, 8, 7]
    assert homogenized["attributes"]["perm"] == [0, 1, 3, 2]
    assert gemm["inputs"][0]["shape"] == [2, 3, 1, 8, 7] and gemm["attributes"]["perm"] == [0, 1, 3, 4, 2]
    assert copy["inputs"][0]["shape"] == copy["outputs"][0]["shape"] == [2, 3, 5, 7]


def test_operands_with_the_heads_behind_the_tokens_are_transposed_into_the_gemm_layout() -> None:
    records = einsum_as_matmul(einsum("bnhd,bmhd->bhnm", [2, 5, 3, 8], [2, 7, 3, 8], [2, 3, 5, 7]))
    assert records is not None
    assert [r["op_type"] for r in records] == ["MatMul", "Transpose", "Transpose", "Transpose", "Relu"]
    left = records[1]
    assert left["inputs"][0]["shape"] == [2, 5, 3, 8, 1]
    assert left["outputs"][0]["shape"] == [2, 3, 5, 8, 1]
    assert left["attributes"]["perm"] == [0, 2, 1, 3, 4]
    assert records[2]["attributes"]["perm"] == [0, 2, 3, 1]  # the keys into b, h, d, m


def test_a_projection_by_a_weight_transposes_the_weight_each_run_and_copies_the_product() -> None:
    records = einsum_as_matmul(einsum("bnd,de->bne", [4, 10, 16], [16, 32], [4, 10, 32], b_weight=True), "Sigmoid")
    assert records is not None and [r["op_type"] for r in records] == ["MatMul", "Transpose", "Sigmoid"]
    assert [t["shape"] for t in records[0]["inputs"]] == [[4, 10, 16], [16, 32]]
    assert records[0]["inputs"][1]["weight"] and records[0]["weight_bytes"] == 4 * 16 * 32
    assert records[1]["inputs"][0]["shape"] == [1, 1, 16, 32] and not records[1]["inputs"][0]["weight"]
    assert records[2]["output_bytes"] == 4 * 4 * 10 * 32


def test_a_result_out_of_the_products_order_is_transposed_before_the_copy() -> None:
    records = einsum_as_matmul(einsum("bij,bjk->kbi", [2, 3, 4], [2, 4, 5], [5, 2, 3]))
    assert records is not None and [r["op_type"] for r in records] == ["MatMul", "Transpose", "Transpose", "Relu"]
    result = records[2]
    assert result["inputs"][0]["shape"] == [2, 3, 5] and result["outputs"][0]["shape"] == [5, 2, 3]
    assert result["attributes"]["perm"] == [2, 0, 1]


def test_equations_the_matmul_form_does_not_cover_get_no_proxy() -> None:
    assert einsum_as_matmul(einsum("...d,...d->...", [2, 8], [2, 8], [2])) is None
    assert einsum_as_matmul(einsum("bij,bjk->b", [2, 3, 4], [2, 4, 5], [2])) is None  # sums within the result
    assert einsum_as_matmul(einsum("bii,bij->bj", [2, 3, 3], [2, 3, 4], [2, 4])) is None  # a repeated label
    assert einsum_as_matmul(einsum("bij,bjk->bk", [2, 3, 4], [2, 4, 5], [2, 5])) is None  # i summed in one operand


def known_of(families: set[str]):
    return lambda record: record["family"] in families


def test_elementwise_and_fused_kernels_take_the_first_trained_stand_in() -> None:
    power = {"family": "Pow", "op_type": "Pow", "inputs": [tensor("x", [4, 8]), tensor("p", [], True)],
             "outputs": [tensor("y", [4, 8])], "flops": 32}  # fmt: skip
    (as_gelu,) = proxy_records(power, known_of({"Gelu", "Tanh", "Add"}))
    assert as_gelu["family"] == "Gelu" and [t["name"] for t in as_gelu["inputs"]] == ["x"]
    assert [r["family"] for r in proxy_records(power, known_of({"Tanh", "Add"}))] == ["Tanh"]
    assert [r["family"] for r in proxy_records(power, known_of({"Add", "Mul"}))] == ["Add"]
    assert proxy_records(power, known_of({"Relu"})) is None
    powers = {**power, "inputs": [tensor("x", [4, 8]), tensor("p", [4, 8])]}  # an exponent per element
    assert [r["family"] for r in proxy_records(powers, known_of({"Gelu", "Mul"}))] == ["Mul"]
    quotient = {**power, "family": "Div", "op_type": "Div"}
    assert [r["family"] for r in proxy_records(quotient, known_of({"Gelu", "Add"}))] == ["Add"]
    where = {"family": "Where", "op_type": "Where", "outputs": [tensor("y", [4, 8])],
             "inputs": [tensor("m", [8], True, "bool"), tensor("x", [4, 8]), tensor("f", [], True)]}  # fmt: skip
    (as_add,) = proxy_records(where, known_of({"Add"}))
    assert [t["name"] for t in as_add["inputs"]] == ["x", "f"]
    split = {"family": "Transpose_Split", "op_type": "Split", "inputs": [tensor("x", [4, 8])], "outputs": []}
    assert proxy_records(split, known_of({"Split"})) == [{**split, "family": "Split"}]
    rms = {"family": "Pow_ReduceMean_Add_Sqrt_Div_Mul_Mul", "op_type": "SimplifiedLayerNormalization",
           "inputs": [tensor("x", [4, 8]), tensor("g", [8], True)], "outputs": [tensor("y", [4, 8])]}  # fmt: skip
    (as_norm,) = proxy_records(rms, known_of({"LayerNormalization"}))
    assert as_norm["op_type"] == "LayerNormalization" and as_norm["weight_bytes"] == 32
    assert proxy_records({"family": "NonMaxSuppression", "op_type": "NonMaxSuppression"}, known_of({"Add"})) is None


@pytest.mark.skipif(not H100.exists(), reason="the shipped h100 bundle")
def test_an_unknown_family_is_predicted_as_its_proxy_and_one_without_keeps_the_fallback() -> None:
    regressor = read_bundle(H100).predictor.regressor
    load = {field: 0.0 for field in regressor.load_fields}

    def kernel(order: int, family: str, op_type: str, inputs: list[dict[str, Any]], shape: list[int]) -> Any:
        size = lambda tensors: sum(4 * prod(t["shape"]) for t in tensors)  # noqa: E731
        data = {"order": order, "node_name": f"n{order}", "family": family, "op_type": op_type, "domain": "",
                "absorbed_ops": [f"n{order}"], "absorbed_op_types": [op_type], "attributes": {}, "inputs": inputs,
                "outputs": [tensor(f"y{order}", shape)], "flops": 0, "in_graph_us": None,
                "input_bytes": size(t for t in inputs if not t["weight"]), "output_bytes": size([{"shape": shape}]),
                "weight_bytes": size(t for t in inputs if t["weight"])}  # fmt: skip
        return kernel_from_dict("v", "cuda", data)

    big = [64, 256, 1024]
    power = kernel(0, "Pow", "Pow", [tensor("x", big), tensor("p", [], True)], big)
    gelu = kernel(1, "Gelu", "Gelu", [tensor("x", big)], big)
    odd = kernel(2, "Hardmax", "Hardmax", [tensor("x", big)], big)
    scores = einsum("bhid,bhjd->bhij", [64, 8, 196, 64], [64, 8, 196, 64], [64, 8, 196, 196])
    attention = kernel_from_dict("v", "cuda", {**scores, "order": 3, "node_name": "n3", "absorbed_ops": ["n3"],
                                               "absorbed_op_types": ["Einsum"], "in_graph_us": None,
                                               "input_bytes": 0, "output_bytes": 0, "weight_bytes": 0})  # fmt: skip
    predicted = predict_kernels(regressor, [power, gelu, odd, attention], load)
    assert [p.fallback for p in predicted] == [True, False, True, True]
    assert [p.proxy_family for p in predicted] == ["Gelu", "", "", "MatMul+Transpose+Transpose+Relu"]
    assert [p.launches for p in predicted] == [1, 1, 1, 4]
    assert predicted[0].mean_ms == pytest.approx(predicted[1].mean_ms, rel=1e-6)
    parts = [kernel_from_dict("v", "cuda", r) for r in einsum_as_matmul(attention.to_dict()) or []]
    assert predicted[3].mean_ms == pytest.approx(sum(p.mean_ms for p in predict_kernels(regressor, parts, load)))


def test_a_kernel_of_several_launches_counts_each_in_the_sums() -> None:
    """A proxied Einsum of four launches is four kernels for the composition's per-kernel term and one node for the
    host's dispatch (the launch-bound terms); a host floor comes off once per launch."""
    from hase_dagster.learn.predict import KernelPrediction, kernel_sums

    def prediction(ms: float, launches: int) -> KernelPrediction:
        return KernelPrediction(0, "n", "Einsum", "i", ms, ms, ms, True, "MatMul", launches)

    kernels = [prediction(0.4, 4), prediction(0.1, 1)]
    sums = kernel_sums(kernels, 0.0, kernels)
    assert sums.kernels == 5
    assert sums.idle_kernel_ms == pytest.approx((0.4, 0.1))
    floored = kernel_sums(kernels, 0.0, kernels, host_floor_ms=0.05)
    assert floored.idle_mean_ms == pytest.approx(0.2 + 0.05)
