"""What a serving plan is asked (a YAML of models with SLOs, priorities and arrival rates, and a load)
and the batching configuration a model is served with.

Example::

    device: cpu
    load: level=0.5
    batch_sizes: [1, 2, 4, 8]
    models:
      - {name: cnn, path: models/resnet18.onnx, slo_ms: 80, percentile: 99, priority: 1, rate_per_s: 20}
      - {name: encoder, path: models/encoder.onnx, slo_ms: 150, percentile: 90, priority: 2, rate_per_s: 10}

Relative ``path`` values are relative to the YAML file. A bad key or value is one ``HaseError``
line that names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hase_dagster.core.errors import HaseError

PositiveFloat = Annotated[float, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServedModel(_Strict):
    """One model to serve: its ONNX file, latency objective, priority and Poisson arrival rate."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    path: Path
    slo_ms: PositiveFloat
    # The objective: this percentile of end-to-end latency (queueing + execution) at most slo_ms.
    percentile: Literal[90, 99] = 99
    # Triton's convention: 1 is the highest priority.
    priority: Annotated[int, Field(ge=1, le=16)] = 1
    rate_per_s: PositiveFloat
    # Batch sizes this model may be planned at (the plan's batch_sizes when absent).
    batch_sizes: list[Annotated[int, Field(gt=0)]] | None = None
    # A serving model (``hase serving-models`` name) exported to ``path`` when that file is missing.
    export: str | None = None


class Cotenant(_Strict):
    """The co-tenant's time slices: busy the first share of every ``period_ms``, it makes a run that
    finds it busy wait ``burst_ms``, and again after every ``slice_ms`` of the run's own work.

    The defaults are the H100's, measured against the project's stressor
    (``hase_dagster.learn.timeslice``, ``results/gpu-general/wait_study.json``). ``share`` maps a
    stress level to the co-tenant's busy share; a level not listed uses the level itself (the
    stressor's duty cycle).
    """

    burst_ms: PositiveFloat = 0.95
    slice_ms: PositiveFloat = 1.75
    period_ms: PositiveFloat = 20.0
    share: dict[float, Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=dict)

    def share_at(self, level: float) -> float:
        """The co-tenant's share of device time at stress ``level``."""
        return self.share.get(level, level)


class ServingRuntime(_Strict):
    """How the executor makes each model's ORT sessions, stated in the plan (``plan.json``,
    ``plan.md``, ``config.pbtxt``) so that the configuration served is the one planned.

    On ORT >= 1.20 built with cuDNN 9 (onnxruntime-gpu 1.31 here) the CUDA EP's ``Conv`` keeps one
    cuDNN-frontend plan per node and rebuilds it whenever the input shape differs from that node's
    previous run, not only for shapes never seen; a dynamic batcher that changes the batch size pays
    that at every change (38-383 ms per change for resnet18 on the H100, results/serving/README.md).
    ``per-batch`` gives every batch size its own session, which only ever sees its one shape, so no
    plan is rebuilt after warm-up (at the cost of one copy of the weights per batch size).
    ``cudnn_conv_algo_search`` is the CUDA EP option (EXHAUSTIVE: cuDNN heuristic mode B, ORT's default;
    HEURISTIC: mode A; DEFAULT: fallback mode), which sets what each rebuild costs.

    ``sessions`` left out means the device's default (:func:`default_sessions`): ``per-batch`` on
    ``cuda``, where the H100 measured the fix (results/serving/h100/stall/, h100-per-batch/), and
    ``shared`` on ``cpu``, whose EP has no such stall. It is resolved where it is used
    (:meth:`PlanSpec.served_runtime`), so that a spec copied onto another device gets that device's.
    """

    sessions: Literal["shared", "per-batch"] | None = None
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = "EXHAUSTIVE"

    def for_device(self, device: str) -> ServingRuntime:
        """This runtime with ``sessions`` set: the given one, else ``device``'s default."""
        if self.sessions is not None:
            return self
        return self.model_copy(update={"sessions": default_sessions(device)})


def default_sessions(device: str) -> Literal["shared", "per-batch"]:
    """The ORT sessions a model is served with on ``device`` unless the plan says otherwise.

    Args:
        device: ``cuda`` or ``cpu`` (an ORT EP name as the plan spells it).

    Returns:
        ``per-batch`` on ``cuda``: a shared session re-plans its cuDNN convolutions at every change of
        batch size (38-383 ms per change for resnet18 on the H100), one session per size never does.
        ``shared`` elsewhere: the CPU EP showed no cost to a change of size.
    """
    return "per-batch" if device == "cuda" else "shared"


class PlanSpec(_Strict):
    """A whole plan request: the models, the device, the load and how hard to search."""

    models: list[ServedModel] = Field(min_length=1)
    device: Literal["cpu", "cuda"] = "cpu"
    load: str = "level=0.0"
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [1, 2, 4, 8])
    # Queue delays tried, as fractions of the slack (SLO minus the batch's execution time).
    delay_fractions: list[Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=lambda: [0.0, 0.1, 0.25, 0.5])
    cotenant: Cotenant = Field(default_factory=Cotenant)
    # The executor's ORT sessions (see ServingRuntime).
    runtime: ServingRuntime = Field(default_factory=ServingRuntime)
    # Simulated seconds of arrivals per candidate, and for the final prediction.
    search_seconds: PositiveFloat = 20.0
    final_seconds: PositiveFloat = 60.0
    seed: int = 0
    # A predictor bundle (name or folder, ``hase_dagster.learn.bundles``) instead of the data
    # directory's trained predictor: it predicts for its own device without running the model there.
    predictor: str | None = None
    # Execution times (ms) without the co-tenant per model and batch size, {model: {batch: [mean, p90]}}:
    # used instead of Hase's predictions when given (a test, or a measured table).
    exec_ms: dict[str, dict[int, tuple[PositiveFloat, PositiveFloat]]] | None = None

    @field_validator("batch_sizes")
    @classmethod
    def _sorted_unique(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("batch_sizes must not be empty")
        return sorted(set(value))

    @model_validator(mode="after")
    def _names_unique(self) -> PlanSpec:
        names = [m.name for m in self.models]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"model names must be unique, repeated: {', '.join(duplicated)}")
        if self.exec_ms is not None:
            missing = [m.name for m in self.models if m.name not in self.exec_ms]
            if missing:
                raise ValueError(f"exec_ms has no times for {', '.join(missing)}")
        return self

    def served_runtime(self) -> ServingRuntime:
        """The runtime the models are served with: the YAML's, ``sessions`` defaulting by ``device``."""
        return self.runtime.for_device(self.device)

    def candidate_batches(self, model: ServedModel) -> list[int]:
        """The batch sizes ``model`` may be planned at."""
        return sorted(set(model.batch_sizes)) if model.batch_sizes else list(self.batch_sizes)


def load_plan_spec(path: str | Path) -> PlanSpec:
    """Read and validate a plan YAML; relative model paths are taken relative to its folder.

    Raises:
        HaseError: the file is missing, is not YAML, or a key or value is wrong (one line naming it).
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise HaseError(f"no such plan file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HaseError(f"cannot read plan file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise HaseError(f"{path} is not valid YAML{line}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise HaseError(f"{path}: expected a mapping with a 'models' list, got {type(raw).__name__}")
    try:
        spec = PlanSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise HaseError(f"{path}: {where}: {first['msg']}{more}") from None
    models = [m.model_copy(update={"path": (path.parent / m.path).resolve()}) for m in spec.models]
    return spec.model_copy(update={"models": models})


@dataclass(frozen=True)
class BatchingConfig:
    """How one model is served: the largest batch, how long its oldest request may wait for a
    fuller batch, and its priority (1 is highest)."""

    max_batch: int
    max_queue_delay_ms: float
    priority: int

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise HaseError(f"max batch must be at least 1, got {self.max_batch}")
        if self.max_queue_delay_ms < 0:
            raise HaseError(f"max queue delay must not be negative, got {self.max_queue_delay_ms}")


def pick_ready(heads: dict[str, tuple[int, float]], configs: dict[str, BatchingConfig], now_ms: float) -> str | None:
    """The model whose batch runs next on a free device, or None when no batch is ready.

    A model's batch is ready when ``max_batch`` requests wait or its oldest request has waited its
    ``max_queue_delay_ms``. Among ready models the highest priority (lowest number) goes first, then
    the one whose oldest request arrived first. The simulator and the executor both decide with this.

    Args:
        heads: for each model with waiting requests, (how many wait, the oldest one's arrival in ms).
        configs: each model's batching configuration.
        now_ms: the current time, on the clock of the arrivals.
    """
    best: tuple[int, float] | None = None
    chosen = None
    for name, (waiting, oldest) in heads.items():
        config = configs[name]
        if waiting >= config.max_batch or now_ms - oldest >= config.max_queue_delay_ms - 1e-9:
            key = (config.priority, oldest)
            if best is None or key < best:
                best, chosen = key, name
    return chosen


def next_deadline(heads: dict[str, tuple[int, float]], configs: dict[str, BatchingConfig]) -> float | None:
    """When the earliest waiting batch becomes ready by its delay (ms), or None when nothing waits."""
    times = [oldest + configs[name].max_queue_delay_ms for name, (_, oldest) in heads.items()]
    return min(times) if times else None
