"""The `hase` command line, its --json contract, and its errors on bad input."""

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

from hase_dagster.analysis.zoo import ModelVariant, build_torch_model, variants
from hase_dagster.core.config import ZooModel, load_config
from hase_dagster.core.errors import HaseError, UnknownModelError
from hase_dagster.orchestration.cli import main


def test_analyze_json_contract(resnet18_onnx: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(resnet18_onnx), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema_version"] == 1 and document["ep"] == "cpu"
    kernels = document["kernels"]
    assert len(kernels) == 25
    assert {"family", "inputs", "outputs", "flops"} <= set(kernels[0])
    assert kernels[0]["family"] == "Conv_Relu" and kernels[0]["flops"] > 0
    assert kernels[0]["inputs"][0]["shape"] == [1, 3, 64, 64]
    assert document["families"]["Conv_Add_Relu"] == 8


def test_analyze_console_script_prints_table(resnet18_onnx: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "hase"), "analyze", str(resnet18_onnx)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Conv_Add_Relu" in result.stdout and "com.microsoft.nchwc.Conv" in result.stdout


def test_a_reader_that_stops_early_ends_the_command_without_a_traceback(resnet18_onnx: Path) -> None:
    # `hase analyze ... --json | head -c 10`: the reader closes the pipe while the command still writes
    command = subprocess.Popen(
        [str(Path(sys.executable).parent / "hase"), "analyze", str(resnet18_onnx), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert command.stdout is not None and command.stderr is not None
    assert command.stdout.read(10).startswith(b"{")
    command.stdout.close()
    errors = command.stderr.read().decode()
    assert command.wait(timeout=60) in (0, 1)
    assert "Traceback" not in errors and "BrokenPipe" not in errors


def test_not_onnx_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model")
    assert main(["analyze", str(bad)]) == 2
    assert "notes.onnx is not a valid ONNX file" in capsys.readouterr().err


def test_model_ort_rejects_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 10
    path = tmp_path / "custom_op.onnx"
    onnx.save(model, str(path))
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "ONNX Runtime cannot load" in err and "custom_op.onnx" in err


def test_cuda_without_gpu_is_a_clear_error(resnet18_onnx: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hase_dagster.core.ort_runtime import cuda_is_usable

    if cuda_is_usable():
        pytest.skip("this machine has a usable GPU")
    assert main(["analyze", str(resnet18_onnx), "--ep", "cuda"]) == 2
    assert "CUDAExecutionProvider does not run on this machine" in capsys.readouterr().err


def test_unknown_torchvision_model_and_zero_batch() -> None:
    with pytest.raises(UnknownModelError, match="no classification or segmentation model named 'resnet_nope'"):
        build_torch_model(ZooModel(name="resnet_nope"))
    with pytest.raises(HaseError, match="positive integer"):
        variants(load_config().profiles["cpu"], 0)
    with pytest.raises(SystemExit):
        main(["materialize", "--batch-size", "0"])


def test_variant_ids_are_distinct_per_size_and_batch() -> None:
    profile = load_config().profiles["gpu"]
    ids = [v.variant_id for v in variants(profile, 16)]
    assert len(ids) == len(set(ids)) == 5 * 3 + 2  # 5 CNNs (2 held out) x 3 sizes, encoder x 2 lengths
    assert ModelVariant(ZooModel(name="resnet18"), 224, 16).variant_id == "resnet18_i224_b16"


def test_a_torchvision_segmentation_model_is_a_zoo_model_returning_its_logits() -> None:
    import torch

    segmenter = build_torch_model(ZooModel(name="lraspp_mobilenet_v3_large"))
    with torch.no_grad():
        logits = segmenter(torch.randn(1, 3, 64, 64))
    # one tensor (not torchvision's dict), a score per class and pixel at the input's size
    assert isinstance(logits, torch.Tensor) and logits.shape == (1, 21, 64, 64)
