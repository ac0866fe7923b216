"""Loads, batch sizes and measurement of any ONNX file (not only zoo models): what ``hase predict``
(through ``learn.sweep``) and ``hase evaluate`` share."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.core.errors import HaseError
from hase_dagster.core.onnx_structure import batch_size_of, set_batch_size
from hase_dagster.learn.predict import predict_model
from hase_dagster.learn.regressor import mape, within
from hase_dagster.learn.training import Predictor, load_at_level, predictor_path

if TYPE_CHECKING:  # a bundle's prediction reads no warehouse, config or ORT
    from hase_dagster.analysis.fusion_rules import FusionRules
    from hase_dagster.analysis.pattern_graph import GraphStructure
    from hase_dagster.analysis.static_detect import StaticDetection
    from hase_dagster.core.config import EpName, Profile
    from warehouse.store import Warehouse


def model_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Each path that is a file, and every ``*.onnx`` directly in each path that is a folder."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob("*.onnx"))
            if not found:
                raise HaseError(f"{path} holds no .onnx file")
            out += found
        elif path.is_file():
            out.append(path)
        else:
            raise HaseError(f"no such ONNX file or folder: {path}")
    return out


def parse_load_spec(spec: str) -> tuple[str, float | None]:
    """Check one ``--load`` value without reading anything: ``("idle", None)``, ``("prometheus", None)``
    or ``("level", X)`` with X a finite number in [0, 1]; a HaseError that names the problem otherwise."""
    if spec in ("idle", "prometheus"):
        return spec, None
    if spec.startswith("level="):
        text = spec.removeprefix("level=")
        try:
            level = float(text)
        except ValueError:
            raise HaseError(f"--load {spec!r}: level must be a number in [0, 1], got {text!r}") from None
        if not math.isfinite(level):
            raise HaseError(f"--load {spec!r}: level must be a finite number in [0, 1], got {text!r}")
        if not 0.0 <= level <= 1.0:
            raise HaseError(f"--load {spec!r}: level {level:g} is out of range [0, 1]")
        return "level", level
    raise HaseError(f"--load must be prometheus, idle or level=X, got {spec!r}")


def resolve_load(
    spec: str, store: Warehouse, ep: str, load_fields: list[str], prometheus_url: str
) -> tuple[dict[str, float], str]:
    """``idle``, ``level=X`` (the background measured at stress X) or ``prometheus`` (now)."""
    kind, level = parse_load_spec(spec)
    if kind == "idle":
        return load_at_level(store, ep, 0.0), "idle (background of the stress 0.00 benchmarks)"
    if kind == "level":
        assert level is not None
        return load_at_level(store, ep, level), f"level={level:.2f} (background measured at that stress level)"
    from hase_dagster.measure.prometheus import PrometheusClient

    return PrometheusClient(url=prometheus_url).current_load(load_fields), f"prometheus at {prometheus_url}"


def with_batch_size(source: Path, batch_size: int, out_dir: Path) -> Path:
    """``source`` itself when its batch dimension is ``batch_size``; a copy with the batch fixed when
    it is symbolic; an error when it is another fixed number."""
    from hase_dagster.core.ort_runtime import load_onnx

    model = load_onnx(source)
    if not set_batch_size(model, batch_size, source.name):
        return source
    fixed = out_dir / f"{source.stem}_b{batch_size}.onnx"
    onnx.save(model, str(fixed))
    return fixed


@dataclass
class BatchedModel:
    """An ONNX model read once and set to each batch size in memory: what static detection needs,
    without the copy :func:`with_batch_size` writes (seconds for a 350 MB ViT-B/16)."""

    name: str
    model: onnx.ModelProto
    fixed_batch: int | None
    symbolic_inputs: list[int]

    @classmethod
    def load(cls, path: Path) -> BatchedModel:
        """Read ``path`` without its large weights' values (``core.onnx_structure``): detection
        reads the graph, shapes and small constants only."""
        from hase_dagster.core.onnx_structure import load_structure

        model = load_structure(path)
        symbolic = [
            i
            for i, graph_input in enumerate(model.graph.input)
            if graph_input.type.tensor_type.shape.dim and not graph_input.type.tensor_type.shape.dim[0].dim_value
        ]
        return cls(path.name, model, batch_size_of(model), symbolic)

    def detect(self, structure: GraphStructure, batch_size: int, rules: FusionRules) -> StaticDetection:
        """The kernels ``rules`` derive for this model at ``batch_size`` (``structure``: its
        :class:`GraphStructure`): a fixed-batch model as it is, another batch refused (see :meth:`at`),
        a dynamic one with its batch set; refused when a kernel's shapes stay unknown (a bundle's prediction and a
        timing set's composition fit both compute features from them)."""
        from hase_dagster.analysis.static_detect import detect_at

        if self.fixed_batch is not None:
            self.at(batch_size)  # refuses another batch size (a fixed-batch model is not changed)
        detection = detect_at(structure, batch_size if self.fixed_batch is None else None, rules, Path(self.name).stem)
        kernels = detection.kernels
        unresolved = [k for k in kernels if any(d < 0 for t in (*k.inputs, *k.outputs) for d in t.shape)]
        if unresolved:  # their bytes and FLOPs would be products of -1s: refuse rather than guess
            first = unresolved[0]
            raise HaseError(
                f"static detection could not infer the shapes of {len(unresolved)} of {len(kernels)} kernels of "
                f"{self.name} at batch {batch_size} (first: {first.op_type} {first.node_name}): they depend on "
                "values computed at run time; export the model with static shapes (onnxsim, or the exporter's "
                "constant folding) to predict it"
            )
        return detection

    def at(self, batch_size: int) -> onnx.ModelProto:
        """The model with its symbolic batch dimensions set to ``batch_size`` (the same object, changed
        in place); an error, as :func:`with_batch_size` gives, when its batch is another fixed number."""
        if self.fixed_batch is not None:
            if self.fixed_batch != batch_size:
                raise HaseError(
                    f"{self.name} has a fixed batch size of {self.fixed_batch}, not {batch_size}; "
                    "export it with a dynamic batch"
                )
            return self.model
        for index in self.symbolic_inputs:
            self.model.graph.input[index].type.tensor_type.shape.dim[0].dim_value = batch_size
        return self.model


@dataclass(frozen=True)
class PreparedFile:
    """An ONNX file ready to measure and predict: its batch size, the file to run, its kernels."""

    path: Path
    batch: int
    model_path: Path
    kernels: list[Kernel]


def prepare_files(paths: list[Path], ep: EpName, tmp: Path) -> tuple[list[PreparedFile], list[dict[str, Any]]]:
    """Load and analyse each file; one that cannot be (not ONNX, ORT rejects it) becomes an error case
    ``{"model": name, "error": why}`` instead of ending the evaluation of the others."""
    from hase_dagster.analysis.analyze import analyze_model
    from hase_dagster.core.ort_runtime import load_onnx

    prepared: list[PreparedFile] = []
    errors: list[dict[str, Any]] = []
    for path in paths:
        try:
            batch = batch_size_of(load_onnx(path)) or 1
            model_path = with_batch_size(path, batch, tmp)
            analysis = analyze_model(model_path, ep, tmp / f"{path.stem}.optimized.onnx")
        except HaseError as exc:
            errors.append({"model": path.name, "error": str(exc)})
            continue
        prepared.append(PreparedFile(path, batch, model_path, analysis.kernels))
    return prepared, errors


def evaluate_files(paths: list[Path], profile: Profile, stress_levels: list[float], data_root: Path) -> dict[str, Any]:
    """Measure each model at each stress level (stressor on, background sampled first) and compare
    with the prediction made from that background: models need not be in the zoo."""
    from hase_dagster.measure.benchmark import BenchmarkTarget, run_benchmarks
    from hase_dagster.measure.load import under_load

    ep = profile.execution_provider
    predictor = Predictor.load(predictor_path(data_root, ep))
    with tempfile.TemporaryDirectory() as tmp:
        prepared, results = prepare_files(paths, ep, Path(tmp))
        for level in stress_levels if prepared else []:
            with under_load(profile.device, level, profile.telemetry) as loaded:
                targets = [
                    BenchmarkTarget(m.model_path, {"model": m.path.name, "batch_size": m.batch}) for m in prepared
                ]
                rows = run_benchmarks(
                    targets, ep, loaded.sampler, profile.model_timing, profile.telemetry, profile.ort, level="all"
                )
            for model, row in zip(prepared, rows):
                path, batch, kernels = model.path, model.batch, model.kernels
                if row["status"] != "ok":
                    results.append({"model": path.name, "stress_level": level, "error": row["error"]})
                    continue
                load = {f: row[f"bg_{f}"] for f in predictor.regressor.load_fields}
                prediction = predict_model(
                    path.name,
                    kernels,
                    predictor.regressor,
                    predictor.composition,
                    load,
                    f"measured background at stress {level:.2f}",
                    batch,
                )
                results.append(
                    {
                        "model": path.name,
                        "batch_size": batch,
                        "stress_level": level,
                        "measured_mean_ms": row["mean_ms"],
                        "measured_p90_ms": row["p90_ms"],
                        "predicted_ms": prediction.predicted_ms,
                        "p90_ms": prediction.p90_ms,
                        "error_pct": (prediction.predicted_ms / row["mean_ms"] - 1) * 100,
                        "coverage": prediction.coverage,
                        "warnings": prediction.warnings,
                    }
                )
    ok = [r for r in results if "error" not in r]
    predicted = [r["predicted_ms"] for r in ok]
    measured = [r["measured_mean_ms"] for r in ok]
    import numpy as np

    summary: dict[str, float] = {"cases": len(ok), "failed": len(results) - len(ok)}
    if ok:
        summary |= {
            "mape_pct": mape(np.array(predicted), np.array(measured)),
            "within_10_pct": within(np.array(predicted), np.array(measured)),
        }
    return {"ep": ep, "cases": results, "summary": summary}
