"""Typed, validated Hase configuration: one YAML file with named profiles.

An unknown key or a bad value is a :class:`ConfigError` that names it, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hase_dagster.core.errors import ConfigError
from hase_dagster.core.metrics import ALL_FIELDS, GPU_FIELDS

# Defined with the data layout (a bundle's prediction reads no config); kept importable from here.
from hase_dagster.core.paths import DEFAULT_DATA_DIR, data_dir  # noqa: F401

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[2] / "hase.yaml"

PositiveInt = Annotated[int, Field(gt=0)]
# The execution providers Hase analyses and measures on, by short name.
EpName = Literal["cpu", "cuda"]
# Numeric precisions of a zoo model's variants (``analysis.precision``): the exported fp32 model, its
# float16 conversion and its INT8 static quantization (QDQ).
Precision = Literal["fp32", "fp16", "int8"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Families for leave-one-family-out evaluation, by torchvision name prefix (longest prefix wins).
FAMILY_BY_PREFIX: dict[str, str] = {
    "resnet": "residual_cnn",
    "resnext": "residual_cnn",
    "wide_resnet": "residual_cnn",
    "regnet": "residual_cnn",
    "convnext": "residual_cnn",
    "mobilenet": "mobile",
    "mnasnet": "mobile",
    "efficientnet": "mobile",
    "shufflenet": "mobile",
    "densenet": "dense_concat",
    "googlenet": "dense_concat",
    "inception": "dense_concat",
    "squeezenet": "dense_concat",
    "vgg": "plain_cnn",
    "alexnet": "plain_cnn",
    "vit": "vision_transformer",
    "swin": "vision_transformer",
    "maxvit": "vision_transformer",
    # Tables written before models carried a family know the encoder only by its model name.
    "transformer_encoder": "text_transformer",
}
FAMILY_BY_KIND = {
    "transformer_encoder": "text_transformer",
    "random_nas": "random_nas",
    # Sampled training probes (analysis.design_space): always trained on, never a test case.
    "design_probe": "design_space",
}


def infer_family(name: str, kind: str = "torchvision") -> str:
    """The family of a zoo model from its kind, else its torchvision name's prefix (``other``)."""
    if kind in FAMILY_BY_KIND:
        return FAMILY_BY_KIND[kind]
    prefixes = [p for p in FAMILY_BY_PREFIX if name.startswith(p)]
    return FAMILY_BY_PREFIX[max(prefixes, key=len)] if prefixes else "other"


# The spaces design-space probes are drawn in (analysis.design_space.draw_probe).
ProbeSpace = Literal[
    "cells",
    "grouped_conv",
    "wide_grouped",
    "wide_grouped_strided",
    "depthwise",
    "movement",
    "highres",
    "windows",
    "operators",
    "recurrent",
    "image_io",
    "tokens",
    "norms",
    "resize",
    "heads",
    "branches",
    "reductions",
    "narrow_convnext",
    "prenorm",
    "reduce_grid",
    "reduce_grid_wide",
    "grouped_expand",
]


class ZooModel(_Strict):
    """One model of the zoo: a torchvision classifier by name, a transformer encoder, a random
    NAS-style network drawn from a seed (``analysis.random_nets``), a design-space probe drawn
    from a seed (``analysis.design_space``), or a user's own ONNX file (``onnx_file``, at ``path``)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_]+$")
    kind: Literal["torchvision", "transformer_encoder", "random_nas", "design_probe", "onnx_file"] = "torchvision"
    # Transformer encoder shape (BERT-base by default); ignored for other kinds.
    d_model: PositiveInt = 768
    nhead: PositiveInt = 12
    dim_feedforward: PositiveInt = 3072
    num_layers: PositiveInt = 12
    # The random network's or probe's seed (random_nas and design_probe only).
    seed: Annotated[int, Field(ge=0)] = 0
    # The design_probe's space (analysis.design_space.draw_probe): every cell type, grouped convolutions by
    # channels per group, or depthwise convolutions.
    probe_space: ProbeSpace = "cells"
    # The onnx_file's path (relative to the working directory); ``{batch_size}`` and ``{input_size}`` in it name
    # one file per batch size and input size, else the file's batch dimension must be symbolic (it is set to each
    # batch size of the profile) or fixed to the one batch size asked.
    path: str | None = None
    # Never trained on: only measured as a whole model (its kernels at idle, for the load-blind
    # baseline), so the evaluation reports how Hase does on an architecture it never saw.
    held_out: bool = False
    # The family left out together in the evaluation; inferred from kind and name when not given.
    family: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")
    # Precisions exported, analysed, measured and predicted; fp32 is always one of them: the others
    # are made from it and their speed-up and top-1 agreement are against it.
    precisions: list[Precision] = Field(default=["fp32"], min_length=1)
    # Batch sizes at which the non-fp32 precisions are exported (None: every batch size of the profile).
    precision_batch_sizes: list[PositiveInt] | None = None

    @property
    def family_name(self) -> str:
        return self.family or infer_family(self.name, self.kind)

    def file_for(self, batch_size: int, input_size: int) -> Path:
        """An onnx_file's file at ``batch_size`` and ``input_size`` (its ``path`` with them filled in)."""
        if self.path is None:
            raise ValueError(f"{self.name!r} is a {self.kind}, not an onnx_file")
        return Path(self.path.format(batch_size=batch_size, input_size=input_size))

    def precisions_at(self, batch_size: int) -> list[Precision]:
        """The precisions of this model exported at ``batch_size``: fp32 always, the others where
        ``precision_batch_sizes`` allows."""
        if self.precision_batch_sizes is not None and batch_size not in self.precision_batch_sizes:
            return ["fp32"]
        return list(self.precisions)

    @model_validator(mode="after")
    def _fp32_is_a_precision(self) -> ZooModel:
        if "fp32" not in self.precisions:
            raise ValueError(f"precisions {self.precisions} lack fp32, which the other precisions are made from")
        if len(set(self.precisions)) != len(self.precisions):
            raise ValueError(f"precisions {self.precisions} repeat a precision")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> ZooModel:
        if self.kind == "transformer_encoder" and self.d_model % self.nhead:
            raise ValueError(f"d_model {self.d_model} is not divisible by nhead {self.nhead}")
        if self.kind == "design_probe" and self.held_out:
            raise ValueError("a design_probe is a training sample, never a test case: it cannot be held_out")
        if self.probe_space != "cells" and self.kind != "design_probe":
            raise ValueError(f"probe_space is a design_probe's option; {self.name!r} is a {self.kind}")
        if (self.path is None) != (self.kind != "onnx_file"):
            raise ValueError(f"path is an onnx_file's option, and one it needs; {self.name!r} is a {self.kind}")
        if self.path is not None:
            try:
                self.file_for(1, 1)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"path {self.path!r} may name only {{batch_size}} and {{input_size}}: {exc!r}"
                ) from None
        return self


class OrtOptions(_Strict):
    """ONNX Runtime session options used for analysis and timing."""

    intra_op_num_threads: PositiveInt = 1
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = "EXHAUSTIVE"


class TimingOptions(_Strict):
    """Warmup and loop bounds of one timing (``hase_dagster.measure.runner.ModelRunner.time``)."""

    warmup: Annotated[int, Field(ge=0)] = 10
    # Warm-up runs go on at least this long: a host-bound model (batch 1 and 4 on a GPU) timed in
    # the first tens of ms of its session moved by +-20% between timings on the H100 host
    # (results/gpu-general/host_study.py); a second of warm-up and of timing cut that to 8%.
    warmup_seconds: Annotated[float, Field(ge=0)] = 0.0
    min_loops: PositiveInt = 10
    max_loops: PositiveInt = 200
    min_seconds: Annotated[float, Field(ge=0)] = 0.05
    max_seconds: Annotated[float, Field(gt=0)] = 0.5
    target_rel_ci: Annotated[float, Field(gt=0, lt=1)] = 0.02
    # host: wall time of each run as a caller sees it; device (CUDA only): the GPU time of its
    # kernels, without the launch and sync a standalone kernel pays and a model run pays once.
    clock: Literal["host", "device"] = "host"

    @model_validator(mode="after")
    def _bounds(self) -> TimingOptions:
        if self.max_loops < self.min_loops:
            raise ValueError(f"max_loops {self.max_loops} is below min_loops {self.min_loops}")
        return self


class TelemetryOptions(_Strict):
    """Which metrics to sample (DCGM field names, HOST_* on any machine) and how often."""

    # Every GPU field and the host's two load fields.
    fields: list[str] = Field(default=[*GPU_FIELDS, "HOST_CPU_UTIL", "HOST_LOAD_1M"])
    interval_s: Annotated[float, Field(gt=0, le=10)] = 0.1
    background_window_s: Annotated[float, Field(gt=0)] = 0.5
    background_refresh_s: Annotated[float, Field(gt=0)] = 30.0

    @model_validator(mode="after")
    def _known_fields(self) -> TelemetryOptions:
        unknown = [f for f in self.fields if f not in ALL_FIELDS]
        if unknown:
            raise ValueError(f"unknown telemetry fields {unknown}")
        return self


class Profile(_Strict):
    """A named set of models, sizes and batch sizes to analyse on one device."""

    name: str = ""
    device: Literal["cpu", "cuda"]
    models: list[ZooModel] = Field(min_length=1)
    input_sizes: list[PositiveInt] = Field(default=[224], min_length=1)
    sequence_lengths: list[PositiveInt] = Field(default=[128], min_length=1)
    batch_sizes: list[PositiveInt] = Field(min_length=1)
    opset: Annotated[int, Field(ge=13, le=20)] = 17
    ort: OrtOptions = OrtOptions()
    kernel_timing: TimingOptions = TimingOptions()
    model_timing: TimingOptions = TimingOptions(warmup=5, min_loops=10, max_seconds=3.0)
    telemetry: TelemetryOptions = TelemetryOptions()
    # Processes that analyse model variants at once (never used for timing).
    analysis_workers: PositiveInt = 1
    # Whole-model timings of design-space probes: the composition does not use them, and on the H100
    # they took over half of each benchmark partition (results/gpu-general/README.md). Off by default.
    time_design_probes: bool = False
    # Exported warehouse tables of another machine (relative paths from the config file's folder) whose
    # design-space probe rows train the regressor beside this profile's own, scaled to this machine's
    # speed by the kernels both timed (hase_dagster.learn.reference_rows). None: this profile's rows only.
    reference_tables: str | None = None
    # A bundle (shipped or imported, of this profile's EP) trained on reference_tables, to carry to this
    # profile's device: the calibrated_bundle asset learns the speed ratio from the kernels both timed
    # (hase_dagster.learn.device_calibration). None: no calibrated bundle.
    calibrate_bundle: str | None = None
    # Fit the composition on out-of-sample kernel sums (learn.training.fit_cross_fitted_composition): each training
    # architecture's from a regressor trained without it. One regressor fit per training architecture more, for the
    # shipped predictor and for each of the evaluation's held-out ones.
    cross_fit_composition: bool = False

    @model_validator(mode="after")
    def _calibration_needs_reference_tables(self) -> Profile:
        if self.calibrate_bundle and not self.reference_tables:
            raise ValueError("calibrate_bundle needs reference_tables: the tables that bundle was trained on")
        return self

    @model_validator(mode="after")
    def _unique_model_names(self) -> Profile:
        names = [m.name for m in self.models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"model names must be unique, repeated: {duplicates}")
        return self

    @model_validator(mode="after")
    def _device_clock_needs_cuda(self) -> Profile:
        if self.device != "cuda" and "device" in (self.kernel_timing.clock, self.model_timing.clock):
            raise ValueError("clock 'device' times CUDA runs only; this profile's device is cpu")
        return self

    @property
    def execution_provider(self) -> EpName:
        """The short EP name this profile asks for: ``cpu`` or ``cuda``."""
        return self.device


class HaseConfig(_Strict):
    """The whole config file."""

    default_profile: str = "auto"
    # Static partitions of the benchmark assets: the fraction of time the stressor keeps the device busy.
    stress_levels: list[Annotated[float, Field(ge=0, le=1)]] = Field(default=[0.0, 0.5, 1.0], min_length=1)
    # Where the current load is read at prediction time (the exporter's metrics, scraped by Prometheus).
    prometheus_url: str = Field(default="http://127.0.0.1:9090", pattern=r"^https?://")
    # latency_regressor's blocking asset check: the held-out-rows MAPE (median latency) must not exceed it. It stops a
    # broken regressor (the FLOPs baseline reads 32-35% on the default profile), not run-to-run spread: the same CPU
    # code read 5.6-16.4% across fresh-clone runs on a 2-core VM, rows with settled labels as much as the rest.
    max_held_out_rows_mape_pct: Annotated[float, Field(gt=0)] = 20.0
    profiles: dict[str, Profile] = Field(min_length=1)

    @model_validator(mode="after")
    def _default_exists(self) -> HaseConfig:
        if self.default_profile != "auto" and self.default_profile not in self.profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not one of {sorted(self.profiles)}")
        return self


def stress_level_key(level: float) -> str:
    """Partition key of a stress level, e.g. ``0.50``."""
    return f"{level:.2f}"


def _format_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "<top level>"
        if item["type"] == "extra_forbidden":
            parts.append(f"unknown key '{where}'")
        else:
            parts.append(f"'{where}': {item['msg']} (got {item.get('input')!r})")
    return "; ".join(parts)


def load_config(path: str | os.PathLike[str] | None = None) -> HaseConfig:
    """Read and validate a Hase config file; raise :class:`ConfigError` naming any bad key."""
    config_path = Path(path) if path else Path(os.environ.get("HASE_CONFIG", DEFAULT_CONFIG_PATH))
    try:
        raw = yaml.safe_load(config_path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {config_path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {config_path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {config_path} must hold a mapping at the top level")
    try:
        config = HaseConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid config {config_path}: {_format_validation_error(exc)}") from exc
    named = {
        key: profile.model_copy(
            update={
                "name": key,
                "reference_tables": profile.reference_tables
                and str((config_path.parent / profile.reference_tables).resolve()),
            }
        )
        for key, profile in config.profiles.items()
    }
    return config.model_copy(update={"profiles": named})
