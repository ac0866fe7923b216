"""Convolution implementations compared (issue 14 B): the correctness check (it must fail a wrong
implementation), a small real run and its report, the command line, and the asset through Dagster."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import torch
import torch.nn.functional as F

from assets.conv_implementations import conv_implementations
from hase_dagster.learn import conv_report
from hase_dagster.measure import conv_impls as ci
from resources.hase import HaseResource


def _flipped(case: ci.ConvCase, precision: str, device: str, x: torch.Tensor, w: torch.Tensor) -> ci.Built:
    """Deliberately wrong: a true convolution (kernel flipped), which conv2d (cross-correlation) is not."""
    flipped = w.flip(-1, -2)
    return ci.Built(run=lambda: ci.im2col_conv(x, flipped, case.padding), wait=lambda _: None, to_torch=lambda y: y)


WRONG = ci.Implementation("im2col_flipped", "torch", _flipped, "im2col with the kernel flipped (wrong on purpose)")


def test_grid_has_27_cases_and_small_default() -> None:
    full = ci.grid("full")
    assert len(full) == 27 and len({c.key for c in full}) == 27
    assert {(c.size, c.kernel) for c in full} == {(s, k) for s in ci.SIZES for k in ci.KERNELS}
    assert {c.config for c in full} == set(ci.CHANNEL_CONFIGS)
    assert ci.make_case("realistic", 64, 5).flops == 2 * 16 * 64 * 64 * 25 * 64 * 64
    with pytest.raises(ci.HaseError, match="unknown grid"):
        ci.grid("huge")


def test_check_passes_im2col_and_fails_a_wrong_implementation() -> None:
    case = ci.make_case("tiny", 32, 5)
    x, w = ci.case_inputs(case, "fp32", "cpu")
    ref = ci.reference_output(case, x, w)
    good = ci.check_output(ci.im2col_conv(x, w, case.padding), ref, "fp32")
    assert good.shape_ok and good.passed and good.rel_err < 1e-6
    wrong = ci.check_output(ci.im2col_conv(x, w.flip(-1, -2), case.padding), ref, "fp32")
    assert wrong.shape_ok and not wrong.passed and wrong.rel_err > 0.1
    unpadded = ci.check_output(F.conv2d(x, w), ref, "fp32")
    assert not unpadded.shape_ok and not unpadded.passed
    nan = ref.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert not ci.check_output(nan, ref, "fp32").passed


def test_tolerance_is_per_precision() -> None:
    case = ci.make_case("tiny", 32, 3)
    x, w = ci.case_inputs(case, "bf16", "cpu")
    ref = ci.reference_output(case, x, w)
    out = F.conv2d(x, w, padding=case.padding)  # bf16 output: rounding errors of about 4e-3
    assert ci.check_output(out, ref, "bf16").passed
    assert not ci.check_output(out, ref, "fp32").passed


def test_small_real_run_report_and_resume(tmp_path: Path) -> None:
    names = ["im2col_torch", "im2col_torch_compile", "conv_jax", "im2col_jax", "conv2d_torch", "conv_ort"]
    rows, complete = ci.run_grid(ci.grid("tiny"), ["fp32", "fp16"], "cpu", tmp_path, names, log=lambda _: None)
    assert complete and len(rows) == 12
    fp32 = {r["implementation"]: r for r in rows if r["precision"] == "fp32"}
    assert all(r["status"] == "ok" and r["correct"] for r in fp32.values()), fp32
    assert all(r["device_ms"] > 0 and r["host_ms"] > 0 and r["first_call_s"] > 0 for r in fp32.values())
    assert fp32["conv_jax"]["peak_mem_mb"] > 0 and fp32["conv_jax"]["mem_source"] == "xla_memory_analysis"
    assert fp32["im2col_torch"]["im2col_mb"] == pytest.approx(2 * 4 * 9 * 32 * 32 * 4 / 1e6)
    # The compiled function pays its compile in the first call, not in the steady state.
    assert fp32["im2col_torch_compile"]["first_call_s"] > 10 * fp32["im2col_torch_compile"]["host_ms"] / 1e3
    # fp16 on a CPU: unsupported rows with the reason, not errors.
    fp16 = [r for r in rows if r["precision"] == "fp16"]
    assert {r["status"] for r in fp16} == {"unsupported"} and all(r["error"] for r in fp16)

    again, complete = ci.run_grid(ci.grid("tiny"), ["fp32", "fp16"], "cpu", tmp_path, names, log=lambda _: None)
    assert complete and len(again) == 12 and len(ci.read_rows(tmp_path / "rows.jsonl")) == 12

    report = conv_report.write_report(again, tmp_path, ci.environment("cpu"), "test")
    text = report.markdown.read_text()
    assert "## Winner per case" in text and "## Findings" in text and "match conv2d" in text
    assert report.failures == [] and len(report.winners) == 1
    assert report.winners.iloc[0]["winner"] in names
    assert report.plot is not None and report.plot.stat().st_size > 10_000
    assert report.ui_plot_markdown().startswith("![time per implementation per case](data:image/png;base64,")
    frame = report.frame.set_index(["implementation", "precision"])
    assert frame.loc[("conv2d_torch", "fp32"), "pct_of_conv2d"] == pytest.approx(100.0)
    assert any("conv2d's algorithm (fp32)" in note and "onednn" in note for note in report.findings)


def test_a_wrong_implementation_fails_its_row_and_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ci.IMPLEMENTATIONS, WRONG.name, WRONG)
    rows, _ = ci.run_grid(ci.grid("tiny"), ["fp32"], "cpu", tmp_path, ["conv2d_torch", WRONG.name], log=lambda _: None)
    wrong = next(r for r in rows if r["implementation"] == WRONG.name)
    assert wrong["status"] == "ok" and wrong["correct"] is False and wrong["rel_err"] > ci.TOLERANCE["fp32"]
    report = conv_report.write_report(rows, tmp_path)
    assert [f["implementation"] for f in report.failures] == [WRONG.name]
    assert "FAILED their check" in report.markdown.read_text()
    # A wrong result never wins.
    assert list(report.winners["winner"]) == ["conv2d_torch"]


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert conv_report.main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("hase: error: ")
    args = ["measure", "--grid", "tiny", "--implementations", "conv2d_torch,im2col_torch", "--out", str(tmp_path)]
    assert conv_report.main(args) == 0
    assert json.loads((tmp_path / "environment.json").read_text())["device"] == "cpu"
    assert (tmp_path / "report.md").exists() and len(ci.read_rows(tmp_path / "rows.jsonl")) == 2
    assert conv_report.main(["measure", "--precisions", "fp8", "--out", str(tmp_path)]) == 2
    assert "unknown precision" in capsys.readouterr().err


def test_asset_check_fails_on_a_wrong_implementation(
    test_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ci.IMPLEMENTATIONS, WRONG.name, WRONG)
    hase = HaseResource(config_path=str(test_config), data_directory=str(tmp_path / "data"))

    def materialize(names: list[str]) -> dg.ExecuteInProcessResult:
        config = {"grid": "tiny", "implementations": names}
        return dg.materialize(
            [conv_implementations],
            partition_key="cpu",
            resources={"hase": hase},
            run_config={"ops": {"conv_implementations": {"config": config}}},
        )

    good = materialize(["conv2d_torch", "im2col_torch", "conv_ort"])
    assert good.success
    assert [(c.check_name, c.passed) for c in good.get_asset_check_evaluations()] == [("matches_conv2d", True)]
    metadata = good.asset_materializations_for_node("conv_implementations")[0].metadata
    assert metadata["rows_ran"].value == 3 and "data:image/png;base64," in metadata["time_per_case"].value
    assert "conv2d_torch" in metadata["winners"].value or "im2col_torch" in metadata["winners"].value

    bad = materialize(["conv2d_torch", WRONG.name])
    assert bad.success  # the check fails, the materialization is recorded
    [check] = bad.get_asset_check_evaluations()
    assert check.check_name == "matches_conv2d" and not check.passed
    assert check.metadata["failed_rows"].value[0]["implementation"] == WRONG.name
    # A CPU profile does not measure the cuda partition.
    other = dg.materialize([conv_implementations], partition_key="cuda", resources={"hase": hase}, raise_on_error=False)
    assert not other.success
