"""Predictor bundles: a trained predictor that predicts on a machine without its device.

A bundle is one folder per (device, EP, ORT version, precision)::

    bundle.json           what it is: device, EP, versions, provenance, evaluation figures,
                          the background load at each benchmarked stress level, and the SHA-256
                          of every other file (and of itself, less that line)
    predictor/            the predictor folder (``learn.training.Predictor``: JSON, XGBoost's
                          UBJSON, numpy arrays; nothing in it executes), with each XGBoost model's
                          trees also as arrays so a prediction need not import XGBoost
    fusion_rules.json     the EP's fusion rules (``analysis.fusion_rules``), for static detection

With a bundle, a model becomes its kernel list by static detection (no execution, no target EP),
its loads come from the bundle's load table (``idle``, ``level=X``) or from Prometheus, and the
predictor answers. A bundle made for another ORT major.minor than the installed one, or one whose
files do not match their checksums, is refused with a :class:`HaseError`.

Python API for planners and NAS loops::

    from hase_dagster.learn.bundles import load_bundle

    bundle = load_bundle("h100")  # a shipped or imported name, or a folder
    for p in bundle.predict(["model.onnx"], batch_sizes=[1, 16, 64], loads=["idle", "level=0.5"]):
        print(p.model, p.batch_size, p.load_source, p.predicted_ms)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.nchwc_layout import nchwc_layout
from hase_dagster.analysis.precision import detect_precision
from hase_dagster.core.documents import load_versioned_json
from hase_dagster.core.errors import HaseError
from hase_dagster.core.metrics import LOAD_FIELD
from hase_dagster.core.paths import SHIPPED_BUNDLES, DataPaths
from hase_dagster.learn.estimators import dumps, with_tree_arrays
from hase_dagster.learn.host_speed import loop_reference
from hase_dagster.learn.predict import ModelPrediction, predict_model_under
from hase_dagster.learn.predict_file import model_files, parse_load_spec
from hase_dagster.learn.training import PREDICTOR_FILE, Predictor

if TYPE_CHECKING:
    import pandas as pd

    from hase_dagster.analysis.fusion_rules import FusionRules
    from hase_dagster.analysis.pattern_graph import GraphStructure
    from hase_dagster.learn.compute_floor import ComputePeaks
    from hase_dagster.learn.device_calibration import DeviceCalibration
    from hase_dagster.learn.predict_file import BatchedModel
    from warehouse.store import Warehouse

BUNDLE_FORMAT = "hase-predictor-bundle"
BUNDLE_FORMAT_VERSION = 1
BUNDLE_FILE = "bundle.json"
PREDICTOR_DIR = "predictor"
RULES_FILE = "fusion_rules.json"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


# --- versions and checksums -------------------------------------------------------------------


# Where a bundle's prediction takes a model's kernels from (Bundle.predict's kernel_source): ``auto`` resolves to
# one of the other two (Bundle.resolve_kernel_source).
KERNEL_SOURCES: tuple[str, ...] = ("auto", "static", "ort")


def _require_local_ep(ep: str, bundle: str) -> None:
    """Refuse ORT's own kernels for a bundle whose EP this machine's ORT cannot run."""
    if ep == "cpu":
        return
    from hase_dagster.core.ort_runtime import cuda_is_usable

    if not cuda_is_usable():
        raise HaseError(
            f"bundle {bundle} predicts for {ep}, which does not run on this machine: --kernels ort needs it "
            "(the default, --kernels static, does not)"
        )


def installed_ort_version() -> str:
    """The installed onnxruntime's version, read from package metadata (no import of ORT)."""
    for package in ("onnxruntime-gpu", "onnxruntime"):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    raise HaseError("onnxruntime is not installed: a bundle's kernels need ORT's fusion rules")


def major_minor(version: str) -> str:
    """``1.31`` of ``1.31.1`` (ORT's fusions change between minor releases)."""
    return ".".join(version.split(".")[:2])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _document_checksum(document: dict[str, Any]) -> str:
    """SHA-256 of the bundle document without its own ``checksum`` (keys sorted, compact)."""
    rest = {k: v for k, v in document.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _listed_files(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): _sha256(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != BUNDLE_FILE
    }


# --- the bundle -------------------------------------------------------------------------------


@dataclass
class Bundle:
    """A validated bundle: its document, its predictor and its fusion rules (None when it has none)."""

    folder: Path
    document: dict[str, Any]
    predictor: Predictor
    rules: FusionRules | None = None
    _kernel_cache: dict[tuple[str, int], tuple[list[Kernel], dict[str, Any]]] = field(default_factory=dict)
    # Models read for detection, by resolved path: a sweep over batch sizes reads each file once.
    _models: dict[str, BatchedModel] = field(default_factory=dict)
    # What detection reads off a graph's structure (named light copy, pattern matches, evaluated
    # constant subgraphs), by graph_structure_digest: a sweep analyses each model once, and a copy
    # of a model with other weights is not analysed again.
    _structures: dict[str, GraphStructure] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.document["name"])

    @property
    def ep(self) -> str:
        return str(self.document["ep"])

    @property
    def levels(self) -> dict[float, dict[str, float]]:
        """The background load measured at each benchmarked stress level."""
        return {float(level): dict(load) for level, load in self.document["loads"].items()}

    def summary(self) -> dict[str, Any]:
        """What ``hase predictor list`` and a prediction's ``predictor`` field show of the bundle."""
        d = self.document
        return {
            "name": d["name"],
            "path": str(self.folder),
            "device": d["device"],
            "ep": d["ep"],
            "ort_version": d["ort_version"],
            "precision": d["precision"],
            "created": d["created"],
            "evaluation": d.get("evaluation", {}).get("headline", {}),
        }

    def resolve_kernel_source(self, requested: str) -> str:
        """The kernel source a prediction takes for ``requested`` (one of :data:`KERNEL_SOURCES`): ``auto`` is
        ``ort`` for a CPU bundle whose NCHWc block (``bundle.json``'s ``nchwc_block``) this machine's ORT blocks
        by too, else ``static``. Static detection lays a CPU bundle's kernels out in its block's NCHWc layout
        (:func:`~hase_dagster.analysis.nchwc_layout.nchwc_layout`: convolutions padded, ORT's reorders) but keeps the
        fusion rules' other misses; where this machine's ORT converts them as the bundle's device did, its own kernels
        are the device's (the random networks of set W: 15.5% MAPE with static detection before the padding, 13.0%
        with it, 12.0% with the reorders, 8.8% with ORT's kernels: results/cpu-general/nchwc-rules).
        A CUDA bundle, or a CPU bundle exported before the block was recorded, stays on static detection.

        Raises:
            HaseError: ``requested`` is no kernel source.
        """
        if requested not in KERNEL_SOURCES:
            raise HaseError(f"kernel source {requested!r} is not one of {', '.join(KERNEL_SOURCES)}")
        if requested != "auto":
            return requested
        if self.nchwc_block is None:
            return "static"
        from hase_dagster.core.ort_runtime import nchwc_block_size

        return "ort" if nchwc_block_size() == self.nchwc_block else "static"

    @property
    def nchwc_block(self) -> int | None:
        """The NCHWc block of a CPU bundle's device (``bundle.json``'s ``nchwc_block``); None for a CUDA bundle or
        one exported before the block was recorded."""
        block = self.document.get("nchwc_block")
        return block if self.ep == "cpu" and isinstance(block, int) else None

    def other_device_warning(self) -> str | None:
        """For a CPU bundle whose kernels were timed on another CPU model than this machine's, a warning that its
        predictions are for that CPU; else None. A CPU bundle is often used on the host it is meant for, and a
        CPU of another model runs the same kernels at other speeds: the shipped ``cpu`` bundle, timed on an AMD
        EPYC VM, predicted set AG's networks 60-67% under their timings on an Intel Xeon VM
        (``results/cpu-general/gpu-setAG/README.md``). A CUDA bundle is meant for a device this machine need not
        have, so it gets none."""
        if self.ep != "cpu":
            return None
        from hase_dagster.core.ort_runtime import device_name

        timed_on = [str(d) for d in self.document.get("provenance", {}).get("training", {}).get("devices", [])]
        here = device_name("cpu")
        if not timed_on or here in timed_on:
            return None
        return (
            f"bundle {self.name}'s kernels were timed on {', '.join(timed_on)}, and this machine's CPU is {here}: "
            "the prediction is for the bundle's CPU (train a predictor here with `make run` for this one)"
        )

    def load_for(self, spec: str, prometheus_url: str | None = None) -> tuple[dict[str, float], str]:
        """The load of one ``--load`` value: ``idle`` and ``level=X`` from the bundle's load table
        (the background measured at that stress level where the bundle was trained), ``prometheus``
        read now from ``prometheus_url`` (the config's when None)."""
        kind, level = parse_load_spec(spec)
        if kind == "prometheus":
            from hase_dagster.measure.prometheus import PrometheusClient

            if prometheus_url is None:
                from hase_dagster.core.config import load_config

                prometheus_url = load_config().prometheus_url
            fields = self.predictor.regressor.load_fields
            return PrometheusClient(url=prometheus_url).current_load(fields), f"prometheus at {prometheus_url}"
        wanted = 0.0 if kind == "idle" else float(level or 0.0)
        for measured, load in self.levels.items():
            if math.isclose(measured, wanted, abs_tol=1e-9):
                if kind == "idle":
                    return load, f"idle (background of the stress 0.00 benchmarks in bundle {self.name})"
                return load, f"level={wanted:.2f} (background measured at that stress level, bundle {self.name})"
        raise HaseError(
            f"stress level {wanted:g} was never benchmarked for bundle {self.name}; benchmarked: {sorted(self.levels)}"
        )

    def kernels(self, path: Path, batch_size: int) -> tuple[list[Kernel], dict[str, Any]]:
        """The kernels the bundle's EP runs for ``path`` at ``batch_size``, by static detection with
        the bundle's fusion rules (nothing executes), and the detection's coverage; cached per
        (file, batch size) for the life of the bundle object."""
        if self.rules is None:
            raise HaseError(
                f"bundle {self.name} carries no fusion rules, so it cannot detect kernels statically; "
                "export it again with --rules"
            )
        key = (str(path.resolve()), batch_size)
        if key not in self._kernel_cache:
            model = self._model(path)
            structure = self.structure_of(model)
            detection = model.detect(structure, batch_size, self.rules)
            kernels = detection.kernels
            if self.nchwc_block is not None:  # a CPU bundle's kernels in its device's NCHWc layout
                nodes = {node.name: (list(node.input), list(node.output)) for node in structure.nodes}
                kernels = nchwc_layout(kernels, self.nchwc_block, nodes, structure.graph_outputs)
            self._kernel_cache[key] = (kernels, dict(detection.coverage))
        return self._kernel_cache[key]

    def _ort_kernels(self, path: Path, batch_size: int, data: DataPaths | None) -> list[Kernel]:
        """The kernels this machine's ORT runs for ``path`` at ``batch_size`` on the bundle's EP (the file's
        fixed batch is checked as static detection checks it)."""
        import contextlib
        import tempfile

        from hase_dagster.learn.sweep import AnalysisCache

        if self.fixed_batch(path) is not None:
            self._model(path).at(batch_size)  # refuses another batch size, in the same words
        with contextlib.ExitStack() as scratch:  # without a data directory, a cache that lasts this call
            root = (
                data.analysis_cache(self.ep)
                if data is not None
                else Path(scratch.enter_context(tempfile.TemporaryDirectory()))
            )
            return AnalysisCache(root).kernels(path, batch_size, self.ep)[0]  # type: ignore[arg-type]

    def fixed_batch(self, path: Path) -> int | None:
        """The batch size ``path`` is fixed at, None where its batch dimension is free."""
        return self._model(path).fixed_batch

    def _model(self, path: Path) -> BatchedModel:
        """``path`` read once (its structure, not its large weights) for the life of the bundle object."""
        from hase_dagster.learn.predict_file import BatchedModel

        key = str(path.resolve())
        if key not in self._models:
            self._models[key] = BatchedModel.load(path)
        return self._models[key]

    def structure_of(self, model: BatchedModel) -> GraphStructure:
        """The :class:`GraphStructure` of ``model`` (as read, its batch not set), read once per graph
        structure (its ``graph_structure_digest``: weights' values left out) for the life of the
        bundle object."""
        from hase_dagster.analysis.pattern_graph import GraphStructure
        from hase_dagster.core.onnx_structure import graph_structure_digest

        digest = graph_structure_digest(model.model)
        if digest not in self._structures:
            self._structures[digest] = GraphStructure.of(model.model)
        return self._structures[digest]

    def predict(
        self,
        models: Iterable[str | os.PathLike[str]],
        batch_sizes: Iterable[int],
        loads: Iterable[str] = ("idle",),
        prometheus_url: str | None = None,
        kernel_source: str = "static",
        analysis_cache: DataPaths | None = None,
    ) -> list[ModelPrediction]:
        """Predict every model at every batch size under every load, on this machine, without the
        bundle's device: kernels by static detection (or by ORT's own optimizer on this machine), loads
        from the bundle's table.

        Args:
            models: ONNX files, or folders of them (every ``*.onnx`` directly inside).
            batch_sizes: batch sizes (a model with a fixed batch must match each one).
            loads: ``idle``, ``level=X`` (a stress level the bundle was benchmarked at) or
                ``prometheus`` (read now), each resolved once.
            prometheus_url: where ``prometheus`` is read (default: the config's).
            kernel_source: ``"auto"`` (:meth:`resolve_kernel_source`), ``"static"`` (the bundle's fusion rules;
                nothing runs) or ``"ort"``: the kernels
                this machine's ORT runs on the bundle's EP, which must be here. Right where this machine is
                the bundle's kind of device (a CPU bundle on the CPU it will run on): the fusion rules cover
                only the patterns their device's tables held (on set S's CPU files, 15.2% MAPE with static
                detection against 12.9% with ORT's kernels: results/cpu-general/gpu-setS/README.md).
            analysis_cache: the data directory whose analysis cache ``"ort"`` keeps each analysed graph's kernels
                in (default: none kept).

        Returns:
            One prediction per (model, batch size, load), in that order, each with ``predictor``
            (this bundle's summary), ``kernel_source`` (``"static"``, with ``detection_coverage``, or ``"ort"``).
        """
        batches = list(batch_sizes)
        specs = list(loads)
        if not batches or any(not isinstance(b, int) or b <= 0 for b in batches):
            raise HaseError(f"batch sizes must be positive integers, got {batches}")
        if not specs:
            raise HaseError("no load to predict under")
        kernel_source = self.resolve_kernel_source(kernel_source)
        if kernel_source == "ort":
            _require_local_ep(self.ep, self.name)
        resolved = [self.load_for(spec, prometheus_url) for spec in specs]
        regressor, composition = self.predictor.regressor, self.predictor.composition
        summary = self.summary()
        out: list[ModelPrediction] = []
        trained_on = str(self.document["precision"])
        other_device = self.other_device_warning()
        for path in model_files(models):
            precision = detect_precision(self._model(path).model)
            unseen = (
                [f"{path.name} is {precision}; bundle {self.name} was trained on {trained_on} models"]
                if precision not in trained_on.split(",")
                else []
            )
            for batch in batches:
                coverage: dict[str, Any]
                if kernel_source == "ort":
                    kernels, coverage = self._ort_kernels(path, batch, analysis_cache), {}
                else:
                    kernels, coverage = self.kernels(path, batch)
                for prediction in predict_model_under(path.name, kernels, regressor, composition, resolved, batch):
                    prediction.predictor = summary
                    prediction.kernel_source = kernel_source
                    prediction.detection_coverage = coverage or None
                    prediction.precision = precision
                    prediction.warnings.extend(unseen)
                    if other_device:
                        prediction.warnings.append(other_device)
                    if coverage.get("uncovered_ops"):
                        prediction.warnings.append(
                            f"static detection: no fusion rule covers {coverage['uncovered_ops']} op(s) "
                            f"({coverage.get('uncovered_patterns', {})}); each is kept as an unfused kernel"
                        )
                    out.append(prediction)
        return out


def read_bundle(folder: str | os.PathLike[str], check_ort: bool = True) -> Bundle:
    """Read and validate a bundle folder.

    Args:
        folder: the bundle's folder.
        check_ort: refuse a bundle made for another ORT major.minor than the installed one.

    Returns:
        The bundle, its predictor loaded (nothing in it executes).

    Raises:
        HaseError: no bundle there, a foreign or newer format, a file missing or changed since
            export (checksum), another ORT version, or a predictor or rules file that does not load.
    """
    folder = Path(folder)
    document_path = folder / BUNDLE_FILE
    if not document_path.is_file():
        raise HaseError(f"{folder} is not a predictor bundle (no {BUNDLE_FILE})")
    document = load_versioned_json(
        document_path,
        BUNDLE_FORMAT,
        BUNDLE_FORMAT_VERSION,
        unreadable="{path} is corrupt: not readable JSON ({exc})",
        foreign="{path} does not describe a Hase predictor bundle",
        other_version="bundle {folder} has format version {found}; this Hase reads {version}: "
        "export it again with this Hase",
    )
    if document.get("checksum") != _document_checksum(document):
        raise HaseError(f"bundle {folder} is corrupt: {BUNDLE_FILE} does not match its checksum")
    files = document.get("files")
    if not isinstance(files, dict) or not files:
        raise HaseError(f"bundle {folder} is corrupt: {BUNDLE_FILE} lists no files")
    for relative, digest in files.items():
        path = folder / relative
        if not path.is_file():
            raise HaseError(f"bundle {folder} is corrupt: {relative} is missing")
        if _sha256(path) != digest:
            raise HaseError(f"bundle {folder} is corrupt: {relative} does not match its checksum")
    if check_ort:
        installed = installed_ort_version()
        made_for = str(document.get("ort_version"))
        if major_minor(made_for) != major_minor(installed):
            raise HaseError(
                f"bundle {document.get('name')} was made for ONNX Runtime {made_for}, and onnxruntime {installed} "
                f"is installed: its fusion rules and kernels hold for {major_minor(made_for)}.x only; install that "
                "version or use a bundle made for this one"
            )
    predictor = Predictor.load(folder / PREDICTOR_DIR)
    rules = None
    if RULES_FILE in files:
        from hase_dagster.analysis.fusion_rules import FusionRules

        rules = FusionRules.load(folder / RULES_FILE)
    return Bundle(folder, document, predictor, rules)


def find_bundle(name_or_path: str | os.PathLike[str], data_root: Path | None = None) -> Path:
    """The folder of a bundle given by name (imported into ``data_root`` first, then shipped in
    the repository's ``results/bundles``) or by path."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if (path / BUNDLE_FILE).is_file():
        return path
    if NAME_PATTERN.fullmatch(text):
        candidates = ([DataPaths(data_root).bundles / text] if data_root else []) + [SHIPPED_BUNDLES / text]
        for candidate in candidates:
            if (candidate / BUNDLE_FILE).is_file():
                return candidate
    if path.is_dir():
        return path  # a folder that is no bundle: read_bundle says so
    known = sorted({b["name"] for b in list_bundles(data_root) if "name" in b})
    raise HaseError(f"no predictor bundle {text!r}: not a folder, nor a bundle name; known: {known or 'none'}")


def load_bundle(name_or_path: str | os.PathLike[str], data_root: Path | None = None) -> Bundle:
    """The bundle named (imported or shipped) or at a path, validated: see :func:`read_bundle`.

    Args:
        name_or_path: a bundle name (``h100``, ``cpu``) or a bundle folder.
        data_root: the data directory whose imported bundles count (default: ``HASE_DATA_DIR``).

    Returns:
        The bundle; call :meth:`Bundle.predict` on it.
    """
    if data_root is None:
        data_root = _default_data_root()
    return read_bundle(find_bundle(name_or_path, data_root))


def _default_data_root() -> Path:
    from hase_dagster.core.paths import data_dir  # not core.config: reading a bundle reads no config

    return data_dir()


def list_bundles(data_root: Path | None) -> list[dict[str, Any]]:
    """Every imported (in ``data_root``) and shipped bundle: its summary and ``source``; one that
    does not validate is listed with its ``error`` instead of hiding the others."""
    places = ([("imported", DataPaths(data_root).bundles)] if data_root else []) + [("shipped", SHIPPED_BUNDLES)]
    out = []
    for source, root in places:
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if (p / BUNDLE_FILE).is_file()):
            try:
                entry = read_bundle(folder, check_ort=False).summary()
                installed = installed_ort_version()
                entry["usable"] = major_minor(entry["ort_version"]) == major_minor(installed)
            except HaseError as exc:
                entry = {"name": folder.name, "path": str(folder), "usable": False, "error": str(exc)}
            out.append({"source": source, **entry})
    return out


def import_bundle(folder: str | os.PathLike[str], data_root: Path, replace: bool = False) -> Path:
    """Validate the bundle at ``folder`` and copy it into ``data_root``'s bundles under its name.

    Raises:
        HaseError: the bundle does not validate (see :func:`read_bundle`), or a bundle of that name
            is already imported and ``replace`` is false.
    """
    bundle = read_bundle(folder)
    target = DataPaths(data_root).bundles / bundle.name
    if target.exists() and not replace:
        raise HaseError(f"a bundle named {bundle.name} is already imported at {target}; pass --replace to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(bundle.folder, partial, ignore=shutil.ignore_patterns("*.partial", "*.previous"))
    read_bundle(partial)  # the copy is what was validated
    _replace_folder(partial, target)
    return target


def _replace_folder(partial: Path, target: Path) -> None:
    """Put ``partial`` at ``target`` (a half-written folder never shows under the target name)."""
    previous = target.with_name(target.name + ".previous")
    shutil.rmtree(previous, ignore_errors=True)
    if target.exists():
        target.replace(previous)
    partial.replace(target)
    shutil.rmtree(previous, ignore_errors=True)


# --- export -------------------------------------------------------------------------------------


def write_bundle(
    out: str | os.PathLike[str],
    name: str,
    predictor: Predictor,
    loads: dict[float, dict[str, float]],
    device: str,
    ort_version: str,
    rules_path: Path | None = None,
    precision: str = "fp32",
    provenance: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
    nchwc_block: int | None = None,
) -> Path:
    """Write a bundle folder at ``out`` (replaced whole; a half-written one never shows).

    Args:
        out: the bundle's folder.
        name: its name (lower case letters, digits, ``_.-``), how ``--predictor`` finds it.
        predictor: the trained predictor.
        loads: background load (the regressor's load fields at least) per benchmarked stress level.
        device: the device the predictor was trained on.
        ort_version: the ONNX Runtime version its kernels and rules come from.
        rules_path: the EP's fusion rules file (checked against ``ep`` and ``ort_version``).
        precision: the models' precision the predictor was trained on.
        nchwc_block: for a CPU predictor, the NCHWc block its device's ORT converts convolutions with (default:
            this machine's, ``nchwc_block_size``: a CPU bundle is exported where its tables were timed).
        provenance: where it comes from (driver, CUDA and cuDNN, training set, ...).
        evaluation: its evaluation figures.

    Returns:
        The bundle folder.
    """
    if not NAME_PATTERN.fullmatch(name):
        raise HaseError(f"bundle name {name!r}: use lower-case letters, digits and _.- (at most 64)")
    regressor = predictor.regressor
    for level, load in loads.items():
        missing = [f for f in regressor.load_fields if f not in load]
        if missing:
            raise HaseError(f"the load at stress level {level:g} lacks {missing}, which the regressor needs")
    if 0.0 not in loads:
        raise HaseError(f"no load at stress level 0 (idle) among {sorted(loads)}")
    rules_entry = None
    if rules_path is not None:
        from hase_dagster.analysis.fusion_rules import FusionRules

        rules = FusionRules.load(rules_path)
        if rules.ep != regressor.ep:
            raise HaseError(f"{rules_path} holds fusion rules for {rules.ep}, not for the predictor's {regressor.ep}")
        if major_minor(rules.ort_version) != major_minor(ort_version):
            raise HaseError(f"{rules_path} holds fusion rules of ORT {rules.ort_version}, not of {ort_version}")
        rules_entry = {"ep": rules.ep, "ort_version": rules.ort_version, "device": rules.device}
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    predictor.save(partial / PREDICTOR_DIR)
    _add_tree_arrays(partial / PREDICTOR_DIR)
    if rules_path is not None:
        shutil.copyfile(rules_path, partial / RULES_FILE)
    document: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "name": name,
        "device": device,
        "ep": regressor.ep,
        "ort_version": ort_version,
        "precision": precision,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "regressor": {"kind": regressor.kind, "load_fields": regressor.load_fields},
        "batch_sizes": regressor.batch_sizes,
        "loads": {repr(float(level)): {k: float(v) for k, v in load.items()} for level, load in sorted(loads.items())},
        "fusion_rules": rules_entry,
        "provenance": provenance or {},
        **({"nchwc_block": _nchwc_block(nchwc_block)} if regressor.ep == "cpu" else {}),
        "evaluation": evaluation or {},
        "files": _listed_files(partial),
    }
    document["checksum"] = _document_checksum(document)
    (partial / BUNDLE_FILE).write_text(dumps(document))
    read_bundle(partial, check_ort=False)  # what was written loads
    out.parent.mkdir(parents=True, exist_ok=True)
    _replace_folder(partial, out)
    return out


def tables_kernel_benchmarks(folder: str | os.PathLike[str], ep: str) -> pd.DataFrame:
    """The kernel benchmark rows of ``ep`` in a folder of exported tables (``hase report --export``).

    Raises:
        HaseError: the folder lacks the tables, or holds no kernel benchmarks of ``ep``.
    """
    import pandas as pd

    path = Path(folder) / "kernel_benchmarks.parquet"
    if not path.is_file():
        raise HaseError(f"exported tables {folder} lack kernel_benchmarks.parquet (hase report --export writes them)")
    frame = pd.read_parquet(path)
    frame = frame[frame["ep"] == ep]
    if frame.empty:
        raise HaseError(f"{folder} holds no kernel benchmarks of the {ep} EP")
    return frame


def calibrate_bundle(
    source: Bundle,
    local: pd.DataFrame,
    reference: pd.DataFrame,
    out: str | os.PathLike[str],
    name: str,
    device: str | None = None,
    provenance: dict[str, Any] | None = None,
    peaks: ComputePeaks | None = None,
) -> tuple[Path, DeviceCalibration]:
    """Write bundle ``name`` at ``out``: ``source``'s predictor for another device of its EP, each kernel's time
    scaled by the ratio learned from the kernels both devices timed (:mod:`hase_dagster.learn.device_calibration`).

    Args:
        source: the bundle to carry (not itself calibrated).
        local: the new device's kernel benchmark rows of ``source``'s EP, of kernels that ``reference`` holds
            (profile ``gpu_device_calibration``).
        reference: the kernel benchmark rows ``source`` was trained on.
        out: the new bundle's folder.
        name: its name.
        device: the new device's name (default: the one its kernel benchmarks name).
        provenance: where ``local`` and ``reference`` come from, recorded beside the calibration.
        peaks: the new device's measured peaks, for the compute floor (:mod:`hase_dagster.learn.compute_floor`);
            None: no floor (the source's peaks are its own device's, not carried).

    Returns:
        The bundle folder and the calibration in it. The bundle's fusion rules, loads by level and composition are
        ``source``'s; its evaluation is empty (the source's figures are of the source's device).

    Raises:
        HaseError: ``source`` is calibrated already, or the devices share too few kernel timings
            (:class:`hase_dagster.learn.reference_rows.CalibrationError`).
    """
    from dataclasses import replace

    from hase_dagster.learn.reference_rows import device_calibration

    regressor = source.predictor.regressor
    if regressor.device_calibration is not None:
        raise HaseError(
            f"bundle {source.name} is calibrated already (from {regressor.device_calibration.source_device}): "
            "calibrate the bundle it came from"
        )
    if device is None:
        device = str(local["device"].mode().iloc[0]) if len(local) else "unknown"
    load_field = regressor.load_fields[0]
    level_loads = [(level, float(load[load_field])) for level, load in sorted(source.levels.items())]
    # (shared_timings pairs rows of the same EP only)
    calibration = device_calibration(local, reference, device, str(source.document["device"]), level_loads)
    calibrated = replace(regressor, device_calibration=calibration, compute_peaks=peaks)
    predictor = Predictor(calibrated, source.predictor.composition)
    # the source's compute floor is its own device's: only the new device's peaks, when given, floor the new bundle
    details = {
        **{k: v for k, v in source.document.get("provenance", {}).items() if k != "compute_floor"},
        "calibrated_from": {
            "bundle": source.name,
            "device": source.document["device"],
            "created": source.document["created"],
            **(provenance or {}),
            "pairs": calibration.pairs,
            "median_ratio": calibration.median_ratio,
            "cross_validated_error_pct": calibration.cross_validated_error_pct,
        },
        **({"compute_floor": peaks.to_json()} if peaks is not None else {}),
    }
    folder = _write_derived_bundle(source, predictor, out, name, details, evaluation={}, device=device)
    return folder, calibration


def floor_bundle(source: Bundle, peaks: ComputePeaks, out: str | os.PathLike[str], name: str) -> Path:
    """Write bundle ``name`` at ``out``: ``source`` whose kernels are never predicted under their FLOPs at ``peaks``
    (:mod:`hase_dagster.learn.compute_floor`), everything else as it is.

    Args:
        source: the bundle (``out`` may be its own folder: it is read whole first and replaced whole).
        peaks: the predicted device's measured peaks (for a calibrated bundle, the device it is calibrated to).
        out: the new bundle's folder.
        name: its name.

    Returns:
        The bundle folder. Its evaluation figures stay the source's, measured without the floor; the provenance
        says so and where the peaks come from.
    """
    from dataclasses import replace

    regressor = replace(source.predictor.regressor, compute_peaks=peaks)
    provenance = {
        **source.document.get("provenance", {}),
        "compute_floor": {
            **peaks.to_json(),
            "added": datetime.now(UTC).isoformat(timespec="seconds"),
            "source_created": source.document["created"],
            "evaluation": "the source's figures, measured without the floor",
        },
    }
    predictor = Predictor(regressor, source.predictor.composition)
    return _write_derived_bundle(source, predictor, out, name, provenance, source.document.get("evaluation", {}))


def host_reference_bundle(
    source: Bundle, readings: list[Path], python: str, out: str | os.PathLike[str], name: str
) -> tuple[Path, float, tuple[float, float]]:
    """Write bundle ``name`` at ``out``: ``source`` whose composition records the host loop reading typical of the
    host its timings came from (the median of the readings' windows), for ``hase predict --host-reading``, and the
    10th-90th percentile range of the same windows (the host's fast and slow states), for each prediction's
    ``host_range_ms``.

    Args:
        source: a bundle (``out`` may be its own folder: it is read whole first and replaced whole).
        readings: JSON files of timing windows with the loop read beside them, each a list of objects with
            ``loop_mean_ms`` (``results/gpu-general/host-speed/time_with_readings.py``), taken on that host.
        python: the Python major.minor the readings were taken with (the loop's speed depends on it).
        out: the new bundle's folder.
        name: its name.

    Returns:
        The bundle folder (everything but the composition's reference and range is ``source``'s), the reference
        and the range (fast, slow), in ms.

    Raises:
        HaseError: readings that are missing, unreadable or hold no positive ``loop_mean_ms``.
    """
    from dataclasses import replace

    if not re.fullmatch(r"\d+\.\d+", python):
        raise HaseError(f"--python takes a major.minor version such as 3.12, got {python!r}")
    windows: list[float] = []
    for path in readings:
        try:
            rows = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise HaseError(f"cannot read host readings from {path}: {exc}") from exc
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "loop_mean_ms" in r for r in rows):
            raise HaseError(f"{path} is not a list of timing windows with loop_mean_ms (time_with_readings.py's)")
        try:
            windows += [float(row["loop_mean_ms"]) for row in rows]
        except (TypeError, ValueError) as exc:
            raise HaseError(f"{path}: a loop_mean_ms is not a number: {exc}") from exc
    if not windows or not all(0 < ms < math.inf for ms in windows):  # NaN fails too
        raise HaseError(
            f"{', '.join(map(str, readings))}: every loop_mean_ms must be a positive number of ms to take a reference"
        )
    middle, (fast, slow) = loop_reference(windows)
    reference, loop_range = round(middle, 4), (round(fast, 4), round(slow, 4))
    composition = replace(
        source.predictor.composition, host_loop_ms=reference, host_loop_python=python, host_loop_range_ms=loop_range
    )
    provenance = {
        **source.document.get("provenance", {}),
        "host_reference": {
            "loop_ms": reference,
            "loop_range_ms": list(loop_range),
            "python": python,
            "windows": len(windows),
            "readings": [str(path) for path in readings],
            "added": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    }
    predictor = Predictor(source.predictor.regressor, composition)
    evaluation = source.document.get("evaluation", {})
    return _write_derived_bundle(source, predictor, out, name, provenance, evaluation), reference, loop_range


def _write_derived_bundle(
    source: Bundle,
    predictor: Predictor,
    out: str | os.PathLike[str],
    name: str,
    provenance: dict[str, Any],
    evaluation: dict[str, Any],
    device: str | None = None,
) -> Path:
    """:func:`write_bundle` of ``predictor`` with everything else ``source``'s: its loads by level, ORT version,
    fusion rules, precision and NCHWc block, and its device unless ``device`` names another."""
    return write_bundle(
        out,
        name,
        predictor,
        source.levels,
        device or str(source.document["device"]),
        str(source.document["ort_version"]),
        source.folder / RULES_FILE if source.rules is not None else None,
        str(source.document.get("precision", "fp32")),
        provenance,
        evaluation,
        source.document.get("nchwc_block"),
    )


def _nchwc_block(given: int | None) -> int:
    """``given``, or this machine's ORT NCHWc block (ORT is imported only for a CPU bundle's export)."""
    if given is not None:
        return given
    from hase_dagster.core.ort_runtime import nchwc_block_size

    return nchwc_block_size()


def _add_tree_arrays(folder: Path) -> None:
    """Give every XGBoost model of the predictor folder its trees as arrays (``with_tree_arrays``), check that
    they predict what XGBoost predicts, then remove XGBoost's model files: the bundle predicts with the arrays."""
    document_path = folder / PREDICTOR_FILE
    document = json.loads(document_path.read_text())
    before = Predictor.load(folder)
    targets = document["regressor"]["targets"]
    targets_with_arrays = {target: with_tree_arrays(entry, folder) for target, entry in targets.items()}
    document["regressor"]["targets"] = targets_with_arrays
    document_path.write_text(dumps(document))
    after = Predictor.load(folder)
    import numpy as np

    layout = before.regressor.layout
    probe = np.random.default_rng(0).normal(size=(64, layout.n_numeric + len(layout.families) + len(layout.ops)))
    probe[:, layout.n_numeric :] = probe[:, layout.n_numeric :] > 0.5
    for target, estimator in before.regressor.models.items():
        expected, got = estimator.predict(probe), after.regressor.models[target].predict(probe)
        if not np.array_equal(expected, got):
            raise HaseError(f"the {target} trees as arrays predict differently from XGBoost: not exported")
    # The arrays predict what the model files do, bit for bit: a bundle ships the arrays alone (XGBoost's
    # files of depth-7 trees are 3x their size; the data directory's predictor keeps them).
    document["regressor"]["targets"] = {t: _without_model_files(e, folder) for t, e in targets_with_arrays.items()}
    document_path.write_text(dumps(document))


def _without_model_files(entry: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A saved estimator ``entry`` whose XGBoost models that have tree arrays no longer name (nor leave in
    ``folder``) their model files."""
    if isinstance(entry.get("trees"), str) and "file" in entry:
        (folder / entry["file"]).unlink(missing_ok=True)
        return {k: v for k, v in entry.items() if k != "file"}
    return {k: _without_model_files(v, folder) if isinstance(v, dict) and "kind" in v else v for k, v in entry.items()}


def loads_by_level(store: Warehouse, ep: str) -> dict[float, dict[str, float]]:
    """The mean background load of the kernel benchmarks at each stress level of ``ep``."""
    from hase_dagster.learn.training import load_at_level

    levels = store.query("SELECT DISTINCT stress_level FROM kernel_benchmarks WHERE ep = ? ORDER BY 1", [ep])
    return {float(level): load_at_level(store, ep, float(level)) for level in levels["stress_level"]}


def training_provenance(store: Warehouse, ep: str) -> dict[str, Any]:
    """What the warehouse's ``ep`` measurements are: the device, models (trained on and never seen,
    with families), batch sizes, stress levels, row counts and the dates measured."""
    from hase_dagster.learn.training import measured_models

    kernels = store.query(
        """SELECT device, count(*) AS rows, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
                  list(DISTINCT batch_size ORDER BY batch_size) AS batch_sizes,
                  list(DISTINCT stress_level ORDER BY stress_level) AS stress_levels,
                  count(DISTINCT run_id) AS runs
           FROM kernel_benchmarks WHERE ep = ? AND status = 'ok' GROUP BY device ORDER BY rows DESC""",
        [ep],
    )
    models = measured_models(store, ep)

    def day(ns: Any) -> str | None:
        return datetime.fromtimestamp(int(ns) / 1e9, UTC).date().isoformat() if ns and ns > 0 else None

    def names(frame: pd.DataFrame) -> dict[str, str]:
        return dict(sorted(frame.groupby("architecture")["family"].first().items()))

    first = kernels.iloc[0] if len(kernels) else None
    return {
        "devices": kernels["device"].tolist(),
        "kernel_rows": int(kernels["rows"].sum()),
        "model_rows": len(models),
        "runs": int(kernels["runs"].sum()),
        "measured": {"from": day(kernels["first_ns"].min()), "to": day(kernels["last_ns"].max())}
        if len(kernels)
        else {},
        "batch_sizes": [int(b) for b in first["batch_sizes"]] if first is not None else [],
        "stress_levels": [float(s) for s in first["stress_levels"]] if first is not None else [],
        "trained_on": names(models[~models["held_out"].astype(bool)]),
        "never_seen": names(models[models["held_out"].astype(bool)]),
    }


def evaluation_figures(store: Warehouse, ep: str, predictor: Predictor) -> dict[str, Any]:
    """The bundle's own figures, computed from the warehouse with its kernels (fingerprinted):
    whole-model MAPE of the mean on the models it never saw and on those it trained on (in
    sample), by batch size, and the kernel regressor's held-out figures. Design-space probes are no
    case, as in ``learn.evaluation``."""
    import numpy as np

    from hase_dagster.learn.training import background_load, kernels_by_variant, measured_models, networks

    models = networks(measured_models(store, ep))
    kernels = kernels_by_variant(store, ep)
    cases: dict[str, list[tuple[int, float]]] = {"never_seen": [], "trained_on_all": []}
    for row in models.to_dict("records"):
        if row["variant_id"] not in kernels:
            continue
        load = background_load(row)
        [prediction] = predict_model_under(
            row["variant_id"], kernels[row["variant_id"]], predictor.regressor, predictor.composition, [(load, "")]
        )
        setting = "never_seen" if row["held_out"] else "trained_on_all"
        cases[setting].append((int(row["batch_size"]), prediction.predicted_ms / float(row["mean_ms"]) - 1))

    def figures(errors: list[tuple[int, float]]) -> dict[str, Any]:
        if not errors:
            return {"cases": 0}
        absolute = np.abs([e for _, e in errors]) * 100
        by_batch = {
            str(b): round(float(np.mean(np.abs([e for bb, e in errors if bb == b]) * 100)), 2)
            for b in sorted({b for b, _ in errors})
        }
        return {
            "cases": len(errors),
            "mape_pct": round(float(absolute.mean()), 2),
            "within_10_pct": round(float((absolute <= 10).mean() * 100), 1),
            "mape_pct_by_batch_size": by_batch,
        }

    metrics = predictor.regressor.metrics
    kernel_figures: dict[str, Any] = {"kind": metrics.get("best"), "training_rows": metrics.get("training_rows")}
    best = metrics.get("comparison", {}).get(metrics.get("best"), {})
    if best:
        kernel_figures["held_out_rows_mape_pct"] = best["held_out_rows"]["mape"]
        kernel_figures["held_out_architectures_mape_pct"] = (
            best["held_out_architectures"].get("overall", {}).get("mape")
        )
    whole = {setting: figures(errors) for setting, errors in cases.items()}
    headline = {
        "never_seen_mape_pct": whole["never_seen"].get("mape_pct"),
        "trained_on_all_mape_pct": whole["trained_on_all"].get("mape_pct"),
    }
    return {
        "how": "whole-model mean latency, predicted from the fingerprinted kernels in the training warehouse "
        "under each measurement's background load, against the measured mean",
        "headline": headline,
        "whole_model": whole,
        "kernel_regressor": kernel_figures,
    }


# Where fusion rules are looked for when a bundle is written without naming them (the
# fusion_rules asset's output in the data directory, then the rules committed with the repository).
SHIPPED_RULES = SHIPPED_BUNDLES.parent / "static-detection"


def bundle_rules_path(data_root: Path, ep: str) -> Path | None:
    """The fusion rules a bundle of ``ep`` made here should carry: the first rules file, in the data
    directory's ``fusion_rules`` folder and then in ``results/static-detection``, that is for ``ep``
    and the installed ORT major.minor; None when there is none (or no rules module)."""
    try:
        from hase_dagster.analysis.fusion_rules import FusionRules
    except ImportError:
        return None
    installed = major_minor(installed_ort_version())
    candidates = sorted((data_root / "fusion_rules").rglob("*.json")) + sorted(SHIPPED_RULES.rglob("*.json"))
    for path in candidates:
        try:
            rules = FusionRules.load(path)
        except HaseError:
            continue
        if rules.ep == ep and major_minor(rules.ort_version) == installed:
            return path
    return None


def local_provenance(ep: str) -> dict[str, Any]:
    """This machine's device, driver and library versions (for a bundle trained here)."""
    from hase_dagster.core.ort_runtime import device_name

    info: dict[str, Any] = {"device": device_name(ep), "onnxruntime": installed_ort_version()}  # type: ignore[arg-type]
    if ep == "cuda":
        try:
            from onnxruntime.capi import build_and_package_info

            info["cuda"] = getattr(build_and_package_info, "cuda_version", None)
        except ImportError:
            pass
        for package in ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"):
            try:
                info["cudnn"] = metadata.version(package)
                break
            except metadata.PackageNotFoundError:
                continue
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            info["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        except Exception:  # no NVML here: the driver stays unknown
            info["driver"] = None
    return info


def trained_precisions(store: Warehouse, ep: str) -> str:
    """The precisions of the models whose kernels ``store`` holds for ``ep`` (held-out ones left out),
    comma-separated in the order fp32, fp16, int8 (``fp32`` for tables from before precisions)."""
    found = store.query(
        """SELECT DISTINCT coalesce(f.precision, 'fp32') AS precision FROM kernels k JOIN model_files f
           USING (variant_id) WHERE k.ep = ? AND NOT f.held_out""",
        [ep],
    )["precision"]
    return ",".join(p for p in ("fp32", "fp16", "int8") if p in set(found)) or "fp32"


def export_bundle(
    store: Warehouse,
    ep: str,
    predictor: Predictor,
    out: str | os.PathLike[str],
    name: str,
    rules_path: Path | None,
    provenance: dict[str, Any] | None = None,
    ort_version: str | None = None,
    device: str | None = None,
) -> Path:
    """Write the bundle of ``predictor`` (trained on ``store``'s ``ep`` measurements) at ``out``,
    with the load table, provenance and evaluation figures taken from the warehouse.

    Args:
        store: the warehouse the predictor was trained on (a data directory's, or imported tables).
        ep: the execution provider.
        predictor: the trained predictor.
        out: the bundle folder to write.
        name: the bundle's name.
        rules_path: the EP's fusion rules file, or None for a bundle without static detection.
        provenance: facts the warehouse does not hold (driver, CUDA, cuDNN, where the tables come
            from), merged over what is derived.
        ort_version: the ORT version measured with (default: the rules', else the installed one).
        device: the device name (default: the one most kernel benchmarks ran on).

    Returns:
        The bundle folder.
    """
    training = training_provenance(store, ep)
    if not training["devices"]:
        raise HaseError(f"the warehouse holds no {ep} kernel benchmarks to describe a bundle with")
    extra = dict(provenance or {})
    if ort_version is None:
        ort_version = str(extra.pop("onnxruntime", "") or "")
    if not ort_version and rules_path is not None:
        from hase_dagster.analysis.fusion_rules import FusionRules

        ort_version = FusionRules.load(rules_path).ort_version
    ort_version = ort_version or installed_ort_version()
    details = {"training": training, **extra, "onnxruntime": ort_version}
    if LOAD_FIELD.get(ep) not in predictor.regressor.load_fields:
        raise HaseError(f"the predictor's load fields {predictor.regressor.load_fields} lack {LOAD_FIELD.get(ep)}")
    return write_bundle(
        out,
        name,
        predictor,
        loads_by_level(store, ep),
        device or str(extra.get("device") or training["devices"][0]),
        ort_version,
        rules_path,
        precision=str(extra.get("precision") or trained_precisions(store, ep)),
        provenance=details,
        evaluation=evaluation_figures(store, ep, predictor),
    )
