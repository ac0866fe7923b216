"""Predictor bundles: export, list, import, validation (checksums, ORT version) and predictions that
match the predictor they came from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hase_dagster.analysis.catalog import Kernel, kernel_from_dict
from hase_dagster.analysis.fusion_rules import FusionRules
from hase_dagster.analysis.nchwc_layout import nchwc_layout
from hase_dagster.analysis.static_detect import detect_in_model
from hase_dagster.core.errors import HaseError
from hase_dagster.learn import bundles
from hase_dagster.learn.bundles import BUNDLE_FILE, export_bundle, read_bundle
from hase_dagster.learn.predict import predict_model
from hase_dagster.learn.predict_file import BatchedModel
from hase_dagster.learn.reports import import_tables
from hase_dagster.learn.training import Predictor, kernels_by_variant, load_at_level, train_predictor
from hase_dagster.orchestration.cli import main

REPO = Path(__file__).resolve().parents[1]
CPU_TABLES = REPO / "results" / "cpu" / "tables"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Predictor, Path]:
    """The CPU tables in a warehouse, an XGBoost predictor trained on them, and its bundle."""
    root = tmp_path_factory.mktemp("bundle")
    store = import_tables(CPU_TABLES, root / "tables.duckdb")
    predictor = train_predictor(store, "cpu", kind="xgboost")
    # Rules without a single pattern: every op stays its own kernel (the plumbing is what is tested here).
    rules = FusionRules("cpu", bundles.installed_ort_version(), "test", []).save(root / "rules.json")
    folder = export_bundle(store, "cpu", predictor, root / "cpu-test", "cpu-test", rules)
    return store, predictor, folder


@pytest.fixture()
def bundle_copy(trained: tuple[object, Predictor, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained[2], tmp_path / "cpu-test"))


def _rewrite_document(folder: Path, drop: tuple[str, ...] = (), **changes: object) -> None:
    """Change bundle.json (``drop`` these keys, set ``changes``) as a genuine export would have written it (checksum
    recomputed)."""
    document = json.loads((folder / BUNDLE_FILE).read_text())
    for key in drop:
        del document[key]
    document.update(changes)
    document["checksum"] = bundles._document_checksum(document)
    (folder / BUNDLE_FILE).write_text(json.dumps(document))


def _idle_answer(bundle: Path, model: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    """`hase predict MODEL --predictor BUNDLE` at batch 1 and idle, its JSON answer."""
    args = ["predict", str(model), "--predictor", str(bundle), "--batch-size", "1", "--load", "idle", "--json"]
    assert main([*args, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_bundle_predicts_what_its_predictor_predicts_on_the_same_kernels(
    trained: tuple[object, Predictor, Path],
) -> None:
    store, predictor, folder = trained
    bundle = read_bundle(folder)
    # The tree arrays are what the bundle predicts with, not XGBoost itself.
    assert all(m.trees is not None for m in bundle.predictor.regressor.models.values())  # type: ignore[attr-defined]
    load, source = bundle.load_for("level=0.5")
    assert load == load_at_level(store, "cpu", 0.5) and "level=0.50" in source  # type: ignore[arg-type]
    assert bundle.load_for("idle")[0] == load_at_level(store, "cpu", 0.0)  # type: ignore[arg-type]
    variants = kernels_by_variant(store, "cpu")  # type: ignore[arg-type]
    for variant in sorted(variants)[:4]:
        for level in ("idle", "level=1.0"):
            load = bundle.load_for(level)[0]
            ours = predict_model(variant, variants[variant], predictor.regressor, predictor.composition, load, "", 1)
            theirs = predict_model(
                variant, variants[variant], bundle.predictor.regressor, bundle.predictor.composition, load, "", 1
            )
            assert theirs.predicted_ms == pytest.approx(ours.predicted_ms, rel=1e-9)
            assert theirs.p90_ms == pytest.approx(ours.p90_ms, rel=1e-9)
            assert [k.median_ms for k in theirs.kernels] == [k.median_ms for k in ours.kernels]
    assert bundle.document["evaluation"]["whole_model"]["never_seen"]["cases"] > 0


def test_tree_arrays_walk_as_xgboost_does() -> None:
    import xgboost

    from hase_dagster.learn.estimators import predict_tree_arrays, tree_arrays

    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 6))
    x[:, 2] = rng.integers(0, 2, 400)  # one-hot-like columns split at 0.5
    y = x[:, 0] * 2 + x[:, 2] + rng.normal(scale=0.1, size=400)
    booster = xgboost.train({"max_depth": 4, "eta": 0.1}, xgboost.DMatrix(x, label=y), num_boost_round=50)
    arrays = tree_arrays(booster)
    probe = rng.normal(size=(200, 6))
    # Values exactly at split thresholds, and a missing value, take the sides XGBoost takes.
    probe[:20, 0] = arrays["threshold"][arrays["feature"] == 0][:20]
    probe[20, 1] = np.nan
    np.testing.assert_array_equal(predict_tree_arrays(arrays, probe), booster.inplace_predict(probe))


def test_feature_matrix_is_the_frame_matrix(trained: tuple[object, Predictor, Path]) -> None:
    from hase_dagster.learn.features import as_matrix, feature_frame, feature_matrix

    store, predictor, _ = trained
    kernels = [k.to_dict() for k in next(iter(kernels_by_variant(store, "cpu").values()))]  # type: ignore[arg-type]
    regressor = predictor.regressor
    loads = [{"HOST_CPU_UTIL": 0.0}, {"HOST_CPU_UTIL": 50.0}]
    expected = np.vstack(
        [
            as_matrix(
                feature_frame(kernels, load, ["HOST_CPU_UTIL"]), regressor.families, regressor.ops, ["HOST_CPU_UTIL"]
            )
            for load in loads
        ]
    )
    np.testing.assert_array_equal(
        feature_matrix(kernels, loads, regressor.families, regressor.ops, ["HOST_CPU_UTIL"]), expected
    )


def test_export_list_import_round_trip(
    trained: tuple[object, Predictor, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """From a data directory's trained predictor to a bundle, listed, imported elsewhere, found by name."""
    _, predictor, _ = trained
    source = tmp_path / "source"
    import_tables(CPU_TABLES, source / "hase.duckdb")
    predictor.save(source / "regressors" / "cpu" / "predictor")
    monkeypatch.setenv("HASE_DATA_DIR", str(source))
    assert main(["predictor", "export", "lab-cpu", "--out", str(tmp_path / "lab-cpu")]) == 0
    exported = read_bundle(tmp_path / "lab-cpu")
    assert (
        exported.name == "lab-cpu"
        and exported.ep == "cpu"
        and exported.document["provenance"]["training"]["kernel_rows"]
    )

    target = tmp_path / "target"
    monkeypatch.setenv("HASE_DATA_DIR", str(target))
    capsys.readouterr()
    assert main(["predictor", "import", str(tmp_path / "lab-cpu")]) == 0
    assert (target / "bundles" / "lab-cpu" / BUNDLE_FILE).is_file()
    assert main(["predictor", "import", str(tmp_path / "lab-cpu")]) == 2  # already there
    assert "already imported" in capsys.readouterr().err
    assert main(["predictor", "list", "--json"]) == 0
    listed = {b["name"]: b for b in json.loads(capsys.readouterr().out)["bundles"]}
    assert listed["lab-cpu"]["source"] == "imported" and listed["lab-cpu"]["usable"]
    assert listed["lab-cpu"]["ep"] == "cpu" and listed["lab-cpu"]["evaluation"]["never_seen_mape_pct"] > 0
    found = bundles.load_bundle("lab-cpu", target)
    assert found.folder == target / "bundles" / "lab-cpu"
    # The same predictor: the imported copy predicts as the exported one.
    kernels = kernels_by_variant(trained[0], "cpu")  # type: ignore[arg-type]
    variant = sorted(kernels)[0]
    load = found.load_for("level=0.5")[0]
    a = predict_model(variant, kernels[variant], found.predictor.regressor, found.predictor.composition, load, "")
    b = predict_model(variant, kernels[variant], exported.predictor.regressor, exported.predictor.composition, load, "")
    assert a.predicted_ms == b.predicted_ms


def test_a_bundle_of_another_ort_version_is_refused(
    bundle_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _rewrite_document(bundle_copy, ort_version="1.30.0")
    with pytest.raises(HaseError, match=r"made for ONNX Runtime 1\.30\.0.*installed"):
        read_bundle(bundle_copy)
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    assert main(["predictor", "import", str(bundle_copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hase: error: bundle cpu-test was made for ONNX Runtime 1.30.0") and err.count("\n") == 1
    # A patch release of the same major.minor is accepted.
    _rewrite_document(bundle_copy, ort_version=bundles.major_minor(bundles.installed_ort_version()) + ".99")
    assert read_bundle(bundle_copy).name == "cpu-test"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("flip", "predictor/median_ms.xgb.trees.npz does not match its checksum"),
        ("remove", "predictor/predictor.json is missing"),
        ("document", "bundle.json does not match its checksum"),
        ("truncate", "bundle.json is corrupt|is corrupt: not readable JSON"),
    ],
)
def test_a_corrupt_bundle_is_refused_in_one_line(
    bundle_copy: Path,
    damage: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if damage == "flip":
        path = bundle_copy / "predictor" / "median_ms.xgb.trees.npz"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "remove":
        (bundle_copy / "predictor" / "predictor.json").unlink()
    elif damage == "document":
        # An edit by hand: a field changed, the checksum left as it was.
        document = json.loads((bundle_copy / BUNDLE_FILE).read_text())
        document["name"] = "renamed-by-hand"
        (bundle_copy / BUNDLE_FILE).write_text(json.dumps(document))
    else:
        (bundle_copy / BUNDLE_FILE).write_text((bundle_copy / BUNDLE_FILE).read_text()[:100])
    with pytest.raises(HaseError, match=message):
        read_bundle(bundle_copy)
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    assert (
        main(
            [
                "predict",
                str(bundle_copy / BUNDLE_FILE),
                "--predictor",
                str(bundle_copy),
                "--batch-size",
                "1",
                "--load",
                "idle",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("hase: error: ") and "corrupt" in err and err.count("\n") == 1


def test_predict_with_a_bundle_refuses_bad_questions_in_one_line(
    bundle_copy: Path,
    resnet18_onnx: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    base = ["predict", str(resnet18_onnx), "--batch-size", "1"]
    cases = [
        (["--predictor", "no-such-bundle", "--load", "idle"], "no predictor bundle 'no-such-bundle'"),
        (["--predictor", str(bundle_copy), "--ep", "cuda", "--load", "idle"], "does not match bundle cpu-test"),
        (["--predictor", str(bundle_copy), "--load", "level=0.3"], "stress level 0.3 was never benchmarked"),
        (["--predictor", str(bundle_copy), "--load", "level=2"], "out of range"),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("hase: error: ") and message in err and err.count("\n") == 1, err


def test_the_bundle_path_imports_none_of_the_slow_libraries(
    trained: tuple[object, Predictor, Path], resnet18_onnx: Path, tmp_path: Path
) -> None:
    """What keeps `hase predict --predictor` fast: the whole command (parse, load the bundle, detect,
    predict, print) imports none of the libraries that take from 0.2 s to seconds to import."""
    folder = trained[2]
    code = (
        "import sys, io, contextlib\n"
        "from hase_dagster.orchestration.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['predict', {str(resnet18_onnx)!r}, '--predictor', {str(folder)!r}, '--batch-size', '1',"
        " '--load', 'idle,level=0.5', '--kernels', 'static', '--json'])\n"
        "assert code == 0, code\n"
        "heavy = ('pandas', 'xgboost', 'sklearn', 'dagster', 'scipy', 'duckdb', 'torch', 'networkx', 'requests')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {**os.environ, "HASE_DATA_DIR": str(tmp_path / "data")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_predict_with_a_bundle_detects_kernels_statically_and_predicts_as_its_predictor(
    trained: tuple[object, Predictor, Path],
    resnet18_onnx: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hase predict --predictor` answers every (batch, load) with the kernels static detection finds,
    and each answer is what the bundle's source predictor says for those kernels."""
    _, predictor, folder = trained
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    dynamic = tmp_path / "resnet18_dynamic.onnx"
    model = onnx.load(str(resnet18_onnx))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, str(dynamic))
    args = ["predict", str(dynamic), "--predictor", str(folder), "--batch-size", "1,4", "--load", "idle,level=0.5"]
    args += ["--kernels", "static"]
    assert main([*args, "--json"]) == 0
    predictions = json.loads(capsys.readouterr().out)["predictions"]
    assert [(p["batch_size"], p["load_source"][:10]) for p in predictions] == [
        (b, s) for b in (1, 4) for s in ("idle (back", "level=0.50")
    ]
    rules = FusionRules.load(folder / "fusion_rules.json")
    bundle = read_bundle(folder)
    batched = BatchedModel.load(dynamic)
    for p in predictions:
        assert p["kernel_source"] == "static" and p["predictor"]["name"] == "cpu-test" and p["ep"] == "cpu"
        assert p["detection_coverage"]["uncovered_ops"] > 0 and any("no fusion rule" in w for w in p["warnings"])
        model = batched.at(p["batch_size"])
        kernels = detect_in_model(model, rules, dynamic.stem).kernels
        # in the bundle's CPU's NCHWc layout (convolutions padded, ORT's reorders), as Bundle.kernels gives them
        nodes = {n.name: (list(n.input), list(n.output)) for n in model.graph.node}
        outputs = {o.name for o in model.graph.output}
        kernels = nchwc_layout(kernels, bundle.nchwc_block or 0, nodes, outputs)
        assert len(kernels) == p["coverage"]["kernels"]
        load = bundle.load_for("idle" if p["load_source"].startswith("idle") else "level=0.5")[0]
        expected = predict_model(p["model"], kernels, predictor.regressor, predictor.composition, load, "", 1)
        assert p["predicted_ms"] == pytest.approx(expected.predicted_ms, rel=1e-9)
    # Batch 4 costs more than batch 1, and load more than idle, on the CPU.
    assert predictions[2]["predicted_ms"] > predictions[0]["predicted_ms"] < predictions[1]["predicted_ms"]
    # The text output names the bundle and the kernel source.
    assert main(args) == 0
    assert "bundle cpu-test" in capsys.readouterr().out
    # A fixed-batch file asked at another batch size: one line.
    fixed = ["predict", str(resnet18_onnx), "--predictor", str(folder), "--batch-size", "4", "--load", "idle"]
    assert main([*fixed, "--kernels", "static"]) == 2
    err = capsys.readouterr().err
    assert "fixed batch size of 1, not 4" in err and err.count("\n") == 1


def test_predict_with_a_bundle_on_this_machines_ort_kernels(
    trained: tuple[object, Predictor, Path],
    resnet18_onnx: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--kernels ort`: the kernels ORT runs here on the bundle's EP (fused, where the test rules fuse nothing),
    kept in the data directory's analysis cache, predicted as the bundle's predictor predicts them; refused in one
    line without --predictor and for an EP that does not run here."""
    _, predictor, folder = trained
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    args = ["predict", str(resnet18_onnx), "--predictor", str(folder), "--batch-size", "1", "--load", "idle", "--json"]
    assert main([*args, "--kernels", "ort"]) == 0
    ort_answer = json.loads(capsys.readouterr().out)
    assert main([*args, "--kernels", "static"]) == 0
    static_answer = json.loads(capsys.readouterr().out)
    assert ort_answer["kernel_source"] == "ort" and ort_answer["detection_coverage"] is None
    assert static_answer["kernel_source"] == "static"
    (entry,) = (tmp_path / "data" / "analysis_cache" / "cpu").glob("*.json")
    kernels = [kernel_from_dict("resnet18", "cpu", k) for k in json.loads(entry.read_text())["kernels"]]
    assert len(kernels) == ort_answer["coverage"]["kernels"] < static_answer["coverage"]["kernels"]
    load = read_bundle(folder).load_for("idle")[0]
    expected = predict_model("resnet18", kernels, predictor.regressor, predictor.composition, load, "", 1)
    assert ort_answer["predicted_ms"] == pytest.approx(expected.predicted_ms, rel=1e-9)
    assert main(["predict", str(resnet18_onnx), "--kernels", "ort", "--batch-size", "1", "--load", "idle"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hase: error: ") and "give --predictor too" in err and err.count("\n") == 1
    monkeypatch.setattr("hase_dagster.core.ort_runtime.cuda_is_usable", lambda: False)
    assert main(["predict", str(resnet18_onnx), "--predictor", "h100", "--kernels", "ort", "--batch-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "bundle h100 predicts for cuda, which does not run on this machine" in err and err.count("\n") == 1


def test_a_cpu_bundle_records_the_nchwc_block_and_a_cuda_one_none(trained: tuple[object, Predictor, Path]) -> None:
    """The CPU EP's kernels depend on the block ORT converts convolutions to NCHWc with; a CPU bundle keeps its
    device's, read from ORT itself (AVX-512F blocks by 16, AVX2 by 8), and the shipped CUDA bundle has none."""
    from hase_dagster.core.ort_runtime import nchwc_block_size

    block = nchwc_block_size()
    assert read_bundle(trained[2]).document["nchwc_block"] == block
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else []
    if "avx512f" in flags:
        assert block == 16
    elif "avx2" in flags:
        assert block == 8
    assert "nchwc_block" not in read_bundle(REPO / "results" / "bundles" / "h100").document


def test_auto_kernels_are_orts_only_for_a_cpu_bundle_of_this_machines_block(
    bundle_copy: Path,
    resnet18_onnx: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """By default (`--kernels auto`) a CPU bundle whose NCHWc block this machine's ORT shares predicts from ORT's own
    kernels, the same answer as `--kernels ort`; one of another block, or exported before the block was recorded,
    and a CUDA bundle, from static detection."""
    from hase_dagster.core.ort_runtime import nchwc_block_size

    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))

    def answer(*extra: str) -> dict:
        return _idle_answer(bundle_copy, resnet18_onnx, capsys, *extra)

    auto, ort = answer(), answer("--kernels", "ort")
    assert auto["kernel_source"] == "ort" and auto["predicted_ms"] == pytest.approx(ort["predicted_ms"], rel=1e-12)
    _rewrite_document(bundle_copy, nchwc_block=nchwc_block_size() + 8)
    assert answer()["kernel_source"] == "static"
    _rewrite_document(bundle_copy, drop=("nchwc_block",))
    assert answer()["kernel_source"] == "static"
    assert read_bundle(REPO / "results" / "bundles" / "h100").resolve_kernel_source("auto") == "static"
    with pytest.raises(SystemExit) as exit_info:
        answer("--kernels", "fastest")
    assert exit_info.value.code == 2 and "invalid choice: 'fastest'" in capsys.readouterr().err


def test_a_cpu_bundle_timed_on_another_cpu_model_says_its_predictions_are_for_that_cpu(
    bundle_copy: Path,
    resnet18_onnx: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A CPU bundle trained on this machine's CPU model predicts without a device warning; the same bundle with its
    kernels timed on another CPU model warns, naming both, and predicts the same time."""
    from hase_dagster.core.ort_runtime import device_name

    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))

    def answer() -> dict:
        return _idle_answer(bundle_copy, resnet18_onnx, capsys)

    provenance = json.loads((bundle_copy / BUNDLE_FILE).read_text())["provenance"]
    provenance["training"]["devices"] = [device_name("cpu")]
    _rewrite_document(bundle_copy, provenance=provenance)
    here = answer()
    assert not any("timed on" in w for w in here["warnings"])
    provenance["training"]["devices"] = ["Some Other CPU 9000"]
    _rewrite_document(bundle_copy, provenance=provenance)
    elsewhere = answer()
    (warning,) = [w for w in elsewhere["warnings"] if "timed on" in w]
    assert "Some Other CPU 9000" in warning and device_name("cpu") in warning
    assert elsewhere["predicted_ms"] == pytest.approx(here["predicted_ms"], rel=1e-12)
    assert read_bundle(REPO / "results" / "bundles" / "h100").other_device_warning() is None


def _conv_kernel(c_in: int, c_out: int, group: int = 1) -> Kernel:
    from hase_dagster.analysis.graph import TensorInfo

    return Kernel(
        variant_id="v", ep="cpu", order=0, node_name=f"conv{c_in}_{c_out}_{group}", family="Conv", op_type="Conv",
        domain="", absorbed_ops=["c"], absorbed_op_types=["Conv"], attributes={"group": group},
        inputs=[TensorInfo("x", "float", (1, c_in, 14, 14)), TensorInfo("w", "float", (c_out, c_in // group, 3, 3)),
                TensorInfo("b", "float", (c_out,))],
        outputs=[TensorInfo("y", "float", (1, c_out, 14, 14))], weight_names=["w", "b"], flops=1,
    )  # fmt: skip


def test_nchwc_padding_pads_convolutions_to_the_block_as_ort_does() -> None:
    """Output channels up to the block; input channels too for a group-1 convolution of at least the block's input
    channels and for a depthwise one; fewer input channels stay as read; grouped convolutions and block 0 untouched."""
    from hase_dagster.analysis.nchwc_layout import nchwc_padded

    narrow, wide, depthwise, grouped = (
        _conv_kernel(4, 12),
        _conv_kernel(12, 20),
        _conv_kernel(12, 12, 12),
        _conv_kernel(16, 16, 2),
    )
    padded = nchwc_padded([narrow, wide, depthwise, grouped], 8)
    shapes = [[t.shape for t in (k.inputs[0], k.inputs[1], k.inputs[2], k.outputs[0])] for k in padded]
    assert shapes[0] == [(1, 4, 14, 14), (16, 4, 3, 3), (16,), (1, 16, 14, 14)]
    assert shapes[1] == [(1, 16, 14, 14), (24, 16, 3, 3), (24,), (1, 24, 14, 14)]
    assert shapes[2] == [(1, 16, 14, 14), (16, 1, 3, 3), (16,), (1, 16, 14, 14)] and padded[2].attributes["group"] == 16
    assert padded[3] is grouped and padded[0].flops > 1 and padded[1].input_bytes > wide.input_bytes
    untouched = _conv_kernel(4, 12)
    assert nchwc_padded([untouched], 0)[0] is untouched


def test_static_cpu_convolutions_match_this_machines_ort_where_the_block_is_the_bundles(tmp_path: Path) -> None:
    """The shipped cpu bundle's static detection gives a network of 3, 8, 12 and 24 channels (plain, depthwise and
    wide convolutions) the convolution shapes this machine's ORT runs, padding included, where this machine's ORT
    blocks NCHWc as the bundle's CPU did (before the padding pass static detection kept 8, 12 and 24)."""
    from onnx import helper

    from hase_dagster.core.ort_runtime import MAX_IR_VERSION, nchwc_block_size

    bundle = read_bundle(REPO / "results" / "bundles" / "cpu")
    if nchwc_block_size() != bundle.document["nchwc_block"]:
        pytest.skip("this machine's ORT blocks NCHWc otherwise than the bundle's CPU")
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return helper.make_tensor(
            name, onnx.TensorProto.FLOAT, shape, rng.standard_normal(int(np.prod(shape))).tolist()
        )

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Conv", ["c", "w3"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "w4"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "pads", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 28, 28])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 24, 28, 28])],
        [weight("w1", 8, 3, 3, 3), weight("w2", 8, 1, 3, 3), weight("w3", 12, 8, 3, 3), weight("w4", 24, 12, 1, 1)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = MAX_IR_VERSION
    path = tmp_path / "pads_b1.onnx"
    onnx.save(model, str(path))

    def conv_shapes(kernels: list[Kernel]) -> list[tuple[tuple[int, ...], ...]]:
        convs = [k for k in kernels if k.op_type in ("Conv", "FusedConv") and len(k.inputs) > 1]
        return sorted(tuple(t.shape for t in (k.inputs[0], k.inputs[1], k.outputs[0])) for k in convs)

    static, _ = bundle.kernels(path, 1)
    assert conv_shapes(static) == conv_shapes(bundle._ort_kernels(path, 1, None))
    assert any(shape[2][1] == 16 for shape in conv_shapes(static))  # 8 and 12 channels run padded to 16


def test_a_bundle_ships_tree_arrays_without_xgboosts_model_files(trained: tuple[object, Predictor, Path]) -> None:
    folder = trained[2]
    files = {p.name for p in (folder / "predictor").iterdir()}
    assert not [name for name in files if name.endswith(".ubj")], files
    assert {"mean_ms.xgb.trees.npz", "median_ms.xgb.trees.npz", "p90_ms.xgb.trees.npz"} <= files
    entries = json.loads((folder / "predictor" / "predictor.json").read_text())["regressor"]["targets"]
    assert all("file" not in entry and entry["trees"] for entry in entries.values())


def _new_device_tables(tmp_path: Path, ratio: object, instance_suffix: str = "") -> Path:
    """The CPU tables as if timed on another device: every time column x ``ratio(kernel_benchmarks)``."""
    import pandas as pd

    from hase_dagster.learn.reference_rows import TIME_COLUMNS

    out = tmp_path / f"new-device{instance_suffix}"
    out.mkdir()
    for name in ("kernels", "model_files"):
        shutil.copy(CPU_TABLES / f"{name}.parquet", out / f"{name}.parquet")
    frame = pd.read_parquet(CPU_TABLES / "kernel_benchmarks.parquet")
    factor = ratio(frame)  # type: ignore[operator]
    for column in TIME_COLUMNS:
        frame[column] = frame[column] * factor
    frame["device"] = "Another CPU"
    frame["instance_id"] = frame["instance_id"] + instance_suffix
    frame.to_parquet(out / "kernel_benchmarks.parquet")
    return out


def _intensity(records: object) -> np.ndarray:
    import pandas as pd

    frame = pd.DataFrame(records)
    moved = frame["input_bytes"].fillna(0) + frame["output_bytes"].fillna(0) + frame["weight_bytes"].fillna(0)
    return (frame["flops"].fillna(0) / moved.clip(lower=1)).to_numpy()


def test_a_calibrated_bundle_scales_each_kernel_by_the_ratio_its_kind_of_kernel_got(
    trained: tuple[object, Predictor, Path], tmp_path: Path
) -> None:
    from hase_dagster.learn.predict import predict_kernels_under

    store, _, folder = trained
    source = read_bundle(folder)
    # The new device runs kernels of low arithmetic intensity at 0.6x, the others as the source device does.
    tables = _new_device_tables(tmp_path, lambda f: np.where(_intensity(f) < 1.0, 0.6, 1.0))
    local, reference = (bundles.tables_kernel_benchmarks(t, "cpu") for t in (tables, CPU_TABLES))
    calibrated = read_bundle(bundles.calibrate_bundle(source, local, reference, tmp_path / "cal", "cal")[0])
    calibration = calibrated.predictor.regressor.device_calibration
    assert calibration is not None and calibration.pairs > 1000 and calibrated.document["device"] == "Another CPU"
    assert calibrated.document["provenance"]["calibrated_from"]["bundle"] == source.name
    assert calibrated.predictor.composition.to_json() == source.predictor.composition.to_json()
    assert calibrated.levels == source.levels and calibrated.document["evaluation"] == {}
    variants = kernels_by_variant(store, "cpu")  # type: ignore[arg-type]
    kernels = [k for variant in sorted(variants)[:6] for k in variants[variant]]
    intensity = _intensity([k.to_dict() for k in kernels])
    for level in ("idle", "level=1.0"):
        load = source.load_for(level)[0]
        before = predict_kernels_under(source.predictor.regressor, kernels, [load])[0]
        after = predict_kernels_under(calibrated.predictor.regressor, kernels, [load])[0]
        ratio = np.array([a.mean_ms / b.mean_ms for a, b in zip(after, before, strict=True)])
        assert np.median(ratio[intensity < 0.5]) == pytest.approx(0.6, abs=0.06), level
        assert np.median(ratio[intensity > 2.0]) == pytest.approx(1.0, abs=0.06), level
    # A calibrated bundle round-trips through its folder: the copy predicts the same.
    again = read_bundle(shutil.copytree(tmp_path / "cal", tmp_path / "cal-copy"))
    load = source.load_for("idle")[0]
    assert [p.mean_ms for p in predict_kernels_under(again.predictor.regressor, kernels, [load])[0]] == [
        p.mean_ms for p in predict_kernels_under(calibrated.predictor.regressor, kernels, [load])[0]
    ]


def test_calibrate_refuses_in_one_line_what_it_cannot_calibrate(
    trained: tuple[object, Predictor, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = trained[2]
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    same = _new_device_tables(tmp_path, lambda f: 0.8)
    unshared = _new_device_tables(tmp_path, lambda f: 0.8, instance_suffix="-other")
    base = ["predictor", "calibrate", str(folder), "cal", "--reference-tables", str(CPU_TABLES)]
    assert main([*base, "--tables", str(same), "--out", str(tmp_path / "cal")]) == 0
    assert "speed ratio of" in capsys.readouterr().out
    calibrated_again = ["predictor", "calibrate", str(tmp_path / "cal"), "cal2", "--tables", str(same)]
    cases = [
        ([*base, "--tables", str(unshared)], "share 0 kernel timings"),
        ([*base, "--tables", str(tmp_path / "nowhere")], "lack kernel_benchmarks.parquet"),
        ([*calibrated_again, "--reference-tables", str(CPU_TABLES)], "calibrated already"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("hase: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "data" / "bundles" / "cal").exists()


def test_export_with_another_bundles_regressor_fits_only_the_composition(
    trained: tuple[object, Predictor, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = trained[2]
    source = read_bundle(folder)
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "refit"
    assert (
        main(
            [
                "predictor",
                "export",
                "refit",
                "--tables",
                str(CPU_TABLES),
                "--regressor-of",
                str(folder),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    refit = read_bundle(out)
    # The same tables and no other timings: the composition the source was trained with, the regressor untouched.
    assert refit.predictor.composition.to_json() == source.predictor.composition.to_json()
    for name in ("mean_ms.xgb.trees.npz", "median_ms.xgb.trees.npz", "p90_ms.xgb.trees.npz"):
        assert (out / "predictor" / name).read_bytes() == (folder / "predictor" / name).read_bytes()
    assert refit.document["provenance"]["regressor_of"]["bundle"] == source.name
    capsys.readouterr()
    assert main(["predictor", "export", "refit2", "--regressor-of", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hase: error: ") and "need --tables" in err and err.count("\n") == 1, err


def test_export_with_another_bundles_composition_trains_only_the_kernel_regressor(
    trained: tuple[object, Predictor, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hase_dagster.learn.predict import predict_kernels_under
    from hase_dagster.learn.training import train_predictor_regressor

    store, _, folder = trained
    source = read_bundle(folder)
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    # New kernel rows: every kernel timed twice as slow. The regressor learns them, the composition stays the source's.
    slower = _new_device_tables(tmp_path, lambda f: 2.0)
    out = tmp_path / "rows"
    base = ["predictor", "export", "rows", "--tables", str(slower), "--kind", "flops_baseline"]
    assert main([*base, "--composition-of", str(folder), "--out", str(out)]) == 0
    rows = read_bundle(out)
    assert rows.predictor.composition.to_json() == source.predictor.composition.to_json()
    assert rows.predictor.regressor.kind == "flops_baseline"
    assert rows.document["provenance"]["composition_of"]["bundle"] == source.name
    before = train_predictor_regressor(store, "cpu", "flops_baseline")  # type: ignore[arg-type]
    variants = kernels_by_variant(store, "cpu")  # type: ignore[arg-type]
    kernels = [k for variant in sorted(variants)[:4] for k in variants[variant]]
    load = source.load_for("idle")[0]
    ratio = [
        a.mean_ms / b.mean_ms
        for a, b in zip(
            predict_kernels_under(rows.predictor.regressor, kernels, [load])[0],
            predict_kernels_under(before, kernels, [load])[0],
            strict=True,
        )
    ]
    assert np.median(ratio) == pytest.approx(2.0, rel=0.05)
    capsys.readouterr()
    cases = [
        ([*base, "--composition-of", str(folder), "--regressor-of", str(folder)], "give one"),
        ([*base, "--composition-of", str(folder), "--timings", f"{tmp_path}:{tmp_path}"], "drop --timings"),
        (["predictor", "export", "x", "--composition-of", str(folder)], "need --tables"),
        (["predictor", "export", "x", "--cross-fit"], "need --tables"),
        ([*base, "--regressor-of", str(folder), "--cross-fit"], "drop --regressor-of"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("hase: error: ") and message in err and err.count("\n") == 1, err


def test_predict_refuses_in_one_line_a_model_whose_kernel_shapes_stay_unknown(
    bundle_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kernel after NonZero has a shape only a run knows: its bytes and FLOPs would be products of -1s (a traceback
    in the features before, or a wrong number where the -1s paired up), so predict names it and stops."""
    monkeypatch.setenv("HASE_DATA_DIR", str(tmp_path / "data"))
    graph = helper.make_graph(
        [
            helper.make_node("NonZero", ["x"], ["where"]),
            helper.make_node("Cast", ["where"], ["where_float"], to=TensorProto.FLOAT),
            helper.make_node("Relu", ["where_float"], ["y"]),
        ],
        "data_dependent",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "data_dependent.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    args = ["predict", str(path), "--predictor", str(bundle_copy), "--batch-size", "1", "--load", "idle"]
    args += ["--kernels", "static"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("hase: error: static detection could not infer the shapes") and err.count("\n") == 1, err
    assert "data_dependent.onnx" in err
