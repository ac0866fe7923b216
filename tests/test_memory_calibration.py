"""The peak-memory terms fitted from measured peaks (learn.memory_calibration) and the shipped CUDA
terms they produced from the H100's measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.peak_memory import ARENA_OVERHEAD, SESSION_BYTES, predict_peak_memory
from hase_dagster.core.errors import HaseError
from hase_dagster.learn.memory_calibration import (
    MIB,
    MemoryCase,
    MemoryTerms,
    arena_pow2_bytes,
    cases_from_memory_json,
    fit_linear,
    fit_pow2,
    leave_one_model_out,
    main,
    predict_case,
)

H100_MEMORY = Path(__file__).resolve().parents[1] / "results" / "device" / "h100" / "memory_cuda.json"


def _synthetic(terms: MemoryTerms, outlier: str | None = None) -> list[MemoryCase]:
    cases = []
    for i, model in enumerate(("a", "b", "c", "d")):
        for batch in (1, 8, 32):
            case = MemoryCase(model, batch, (10 + 7 * i) * MIB, batch * (3 + i) * MIB, (32 + batch) * MIB, 0)
            measured = predict_case(case, terms) * (1.8 if model == outlier else 1.0)
            cases.append(MemoryCase(**{**case.__dict__, "measured": int(measured)}))
    return cases


def test_linear_fit_recovers_known_terms() -> None:
    fitted = fit_linear(_synthetic(MemoryTerms("linear", 90 * MIB, 0.35)))
    assert fitted.session_bytes == pytest.approx(90 * MIB, abs=2)
    assert fitted.arena_share == pytest.approx(0.35, abs=1e-6)


def test_a_negative_arena_share_is_kept_at_zero_and_the_constant_refitted() -> None:
    fitted = fit_linear(_synthetic(MemoryTerms("linear", 120 * MIB, -0.2)))
    assert fitted.arena_share == 0.0
    assert 0 < fitted.session_bytes < 120 * MIB  # the constant absorbs part of the over-counted workspace


def test_pow2_arena_grows_like_orts_next_power_of_two() -> None:
    assert arena_pow2_bytes(0) == 0
    assert arena_pow2_bytes(1 * MIB) == 1 * MIB
    assert arena_pow2_bytes(1.5 * MIB) == 3 * MIB  # regions 1 + 2 MiB
    assert arena_pow2_bytes(300 * MIB) == 511 * MIB  # 1 + 2 + ... + 256 MiB
    # regions stop doubling at 1 GiB: 1023 MiB, then 1024 MiB regions
    assert arena_pow2_bytes(3072 * MIB) == (1023 + 3 * 1024) * MIB


def test_pow2_fit_reproduces_pow2_measurements() -> None:
    cases = _synthetic(MemoryTerms("pow2", 40 * MIB, 0.0, 1.5))
    fitted = fit_pow2(cases)
    assert max(abs(predict_case(c, fitted) / c.measured - 1) for c in cases) < 0.01


def test_leave_one_model_out_predicts_each_model_from_the_others_only() -> None:
    cases = _synthetic(MemoryTerms("linear", 60 * MIB, 0.5), outlier="d")
    held = {(c.model, c.batch): error for c, error in leave_one_model_out(cases)}
    # the outlier's 1.8x is invisible to terms fitted without it: about -44%
    assert all(held[("d", b)] == pytest.approx(-100 * 0.8 / 1.8, abs=1.0) for b in (1, 8, 32))
    # fitted with it (in-sample), the terms move towards the outlier: its error is smaller there
    inside = fit_linear(cases)
    assert all(abs(predict_case(c, inside) / c.measured - 1) * 100 < abs(held[("d", c.batch)]) - 1 for c in cases[-3:])


def test_the_shipped_cuda_terms_are_the_fit_of_the_h100_measurements() -> None:
    cases = cases_from_memory_json([H100_MEMORY])
    assert {(c.model, c.batch) for c in cases} == {
        (m, b) for m in ("efficientnet_b0", "mobilenet_v2", "resnet50") for b in (1, 32)
    }
    fitted = fit_linear(cases)
    assert fitted.session_bytes == pytest.approx(SESSION_BYTES["cuda"], abs=100_000)
    assert fitted.arena_share == ARENA_OVERHEAD["cuda"]


def test_the_prediction_on_cuda_adds_the_session_constant() -> None:
    x, y = TensorInfo("x", "float", (MIB // 4,)), TensorInfo("y", "float", (MIB // 4,))
    kernel = Kernel(variant_id="v", ep="cuda", order=0, node_name="relu", family="Relu", op_type="Relu", domain="",
                    absorbed_ops=[], absorbed_op_types=[], attributes={}, inputs=[x], outputs=[y])  # fmt: skip
    peak = predict_peak_memory([kernel], "cuda")
    assert peak.session_bytes == SESSION_BYTES["cuda"] > 100_000_000
    assert peak.total_bytes == peak.activation_peak_bytes + peak.workspace_bytes + SESSION_BYTES["cuda"]


def test_a_file_that_is_not_a_memory_output_is_one_error_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "models"}))
    with pytest.raises(HaseError, match="not a `hase memory --json` output"):
        cases_from_memory_json([bad])
    assert main([str(bad)]) == 2
    assert capsys.readouterr().err.startswith("hase: error: ")
