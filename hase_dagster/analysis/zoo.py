"""Model zoo: torchvision classifiers, a transformer encoder and random NAS-style networks, exported to ONNX.

Weights are random (latency does not depend on their values) and nothing is downloaded.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from hase_dagster.analysis.precision import agreement_with_reference, precision_variant
from hase_dagster.core.config import Precision, Profile, ZooModel
from hase_dagster.core.errors import HaseError, UnknownModelError
from hase_dagster.core.ort_runtime import EpName, make_session, quick_search, random_inputs


@dataclass(frozen=True)
class ModelVariant:
    """One exported model: a zoo model at one input size (or sequence length), batch size and precision."""

    model: ZooModel
    input_size: int
    batch_size: int
    precision: Precision = "fp32"

    @property
    def variant_id(self) -> str:
        """``<model>_i<size>_b<batch>``, with ``_<precision>`` after it for fp16 and int8 (fp32 ids
        stay those of tables written before precisions existed)."""
        suffix = "" if self.precision == "fp32" else f"_{self.precision}"
        return f"{self.base_id}{suffix}"

    @property
    def base_id(self) -> str:
        prefix = "s" if self.model.kind == "transformer_encoder" else "i"
        return f"{self.model.name}_{prefix}{self.input_size}_b{self.batch_size}"

    @property
    def fp32(self) -> ModelVariant:
        """The fp32 variant this one is made from (itself when fp32)."""
        return ModelVariant(self.model, self.input_size, self.batch_size)


@dataclass(frozen=True)
class ExportedModel:
    """An ONNX file of a variant, validated by one run in ONNX Runtime."""

    variant_id: str
    model_name: str
    input_size: int
    batch_size: int
    path: Path
    size_bytes: int
    opset: int
    inputs: dict[str, list[int]] = field(default_factory=dict)
    outputs: dict[str, list[int]] = field(default_factory=dict)
    precision: Precision = "fp32"
    # Top-1 agreement with the fp32 variant on random inputs (``analysis.precision.top1_agreement``);
    # empty for fp32.
    agreement: dict[str, Any] = field(default_factory=dict)


def variants(profile: Profile, batch_size: int) -> list[ModelVariant]:
    """Every zoo model x input size (sequence length for transformers) x precision of ``profile`` at
    one batch size; fp32 variants first (the others are made from them)."""
    if batch_size <= 0:
        raise HaseError(f"batch size must be a positive integer, got {batch_size}")
    out: list[ModelVariant] = []
    for model in profile.models:
        out.extend(ModelVariant(model, size, batch_size) for size in _sizes(model, profile, batch_size))
    for model in profile.models:
        sizes = _sizes(model, profile, batch_size)
        for precision in model.precisions_at(batch_size):
            if precision != "fp32":
                out.extend(ModelVariant(model, size, batch_size, precision) for size in sizes)
    return out


def _sizes(model: ZooModel, profile: Profile, batch_size: int) -> list[int]:
    """The input sizes (sequence lengths for transformers) ``model`` is exported at: the profile's, except for an
    onnx_file whose path does not name ``{input_size}``, which has one file and is exported at its own size (its
    first input's last dimension, or the profile's first size when that is symbolic)."""
    if model.kind == "transformer_encoder":
        return profile.sequence_lengths
    if model.kind != "onnx_file" or "{input_size}" in (model.path or ""):
        return profile.input_sizes
    from hase_dagster.core.onnx_structure import load_structure

    path = model.file_for(batch_size, profile.input_sizes[0])
    if not path.exists():
        raise HaseError(f"no such ONNX file: {path} (model {model.name!r})")
    inputs = load_structure(path).graph.input
    dims = inputs[0].type.tensor_type.shape.dim if inputs else []
    return [dims[-1].dim_value] if dims and dims[-1].dim_value > 0 else profile.input_sizes[:1]


def build_torch_model(model: ZooModel):  # -> torch.nn.Module (torch imported lazily: it is slow)
    """Instantiate a zoo model with random weights, in eval mode."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if model.kind == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(
            d_model=model.d_model,
            nhead=model.nhead,
            dim_feedforward=model.dim_feedforward,
            activation="gelu",
            batch_first=True,
        )
        # enable_nested_tensor=False and no MHA fast path at export keep the exportable ops.
        return torch.nn.TransformerEncoder(layer, model.num_layers, enable_nested_tensor=False).eval()
    if model.kind == "random_nas":
        from hase_dagster.analysis.random_nets import build_random_network

        return build_random_network(model.seed)
    if model.kind == "design_probe":
        from hase_dagster.analysis.design_space import build_probe_network

        return build_probe_network(model.seed, space=model.probe_space)
    classifiers = set(torchvision.models.list_models(module=torchvision.models))
    segmenters = set(torchvision.models.list_models(module=torchvision.models.segmentation))
    if model.name in segmenters:
        # weights_backbone=None: the default would download ImageNet weights for the backbone.
        segmenter = torchvision.models.get_model(model.name, weights=None, weights_backbone=None)
        return _segmentation_logits(segmenter)
    if model.name not in classifiers:
        raise UnknownModelError(
            f"torchvision has no classification or segmentation model named {model.name!r} "
            f"(examples: {', '.join(sorted(classifiers)[:6] + sorted(segmenters)[:2])}, ...)"
        )
    return torchvision.models.get_model(model.name, weights=None).eval()


def _segmentation_logits(segmenter):  # -> torch.nn.Module
    """Wrap a torchvision segmentation model so it returns its ``out`` logits alone (it returns a dict)."""
    import torch

    class SegmentationLogits(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return self.inner(images)["out"]

    return SegmentationLogits(segmenter).eval()


def export_variant(
    variant: ModelVariant, out_dir: str | os.PathLike[str], opset: int, ep: EpName = "cpu"
) -> ExportedModel:
    """Export ``variant`` to ``out_dir/<variant_id>.onnx`` (traced from torch at ``opset``; an onnx_file copied at the
    variant's batch size, at its own opset) and validate it by one ORT run on ``ep``.

    The file is written under a temporary name and renamed only once it validated, so a failed
    export never leaves a half-written model behind.
    """
    if variant.precision != "fp32":
        raise HaseError(f"{variant.variant_id} is made from its fp32 variant: call export_precision_variant")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{variant.variant_id}.onnx"
    partial = path.with_suffix(".onnx.partial")
    if variant.model.kind == "onnx_file":
        copy_onnx_file(variant, partial)
        opset = opset_of(partial)  # the file's own
    else:
        _trace_variant(variant, partial, opset, ep)
    try:
        inputs, outputs = validate_onnx(partial, ep)
    except Exception:
        partial.unlink(missing_ok=True)
        raise
    return _exported(variant, partial, path, opset, inputs, outputs)


def _trace_variant(variant: ModelVariant, partial: Path, opset: int, ep: EpName) -> None:
    """Build ``variant``'s torch model and trace it to ``partial`` (torch imported here: an onnx_file needs none)."""
    import torch

    # Tracing runs the model once: on the GPU profile the GPU traces (a batch-128 encoder at 384
    # tokens is ~10 TFLOP, tens of seconds on the host's CPU). The graph does not depend on it.
    device = "cuda" if ep == "cuda" and torch.cuda.is_available() else "cpu"
    module = build_torch_model(variant.model).to(device)
    if variant.model.kind == "transformer_encoder":
        example = torch.randn(variant.batch_size, variant.input_size, variant.model.d_model, device=device)
    else:
        example = torch.randn(variant.batch_size, 3, variant.input_size, variant.input_size, device=device)
    trace_to_onnx(module, example, partial, opset)
    del module, example
    if device == "cuda":
        torch.cuda.empty_cache()  # ORT sessions in this process need the memory next


def copy_onnx_file(variant: ModelVariant, partial: Path) -> None:
    """Write an onnx_file model's file (``ZooModel.file_for``) to ``partial`` at the variant's batch size.

    Args:
        variant: an ``onnx_file`` model's variant.
        partial: where the copy goes.

    Raises:
        HaseError: the file is missing or not ONNX, or its batch is fixed to another size.
    """
    from hase_dagster.core.onnx_structure import set_batch_size
    from hase_dagster.core.ort_runtime import load_onnx

    source = variant.model.file_for(variant.batch_size, variant.input_size)
    model = load_onnx(source)
    set_batch_size(model, variant.batch_size, f"{variant.model.name} ({source})")
    onnx.save(model, str(partial))


def opset_of(path: Path) -> int:
    """The default-domain opset an ONNX file imports (0 when it names none)."""
    model = onnx.load(str(path), load_external_data=False)
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


@dataclass(frozen=True)
class ProbeFailure:
    """A design-space probe that did not export or run once in ORT, and why."""

    variant_id: str
    error: str


def export_or_skip_probe(
    variant: ModelVariant, out_dir: str | os.PathLike[str], opset: int, ep: EpName = "cpu"
) -> ExportedModel | ProbeFailure:
    """:func:`export_variant`, except that a design-space probe whose export or first ORT run fails comes back as
    a :class:`ProbeFailure` instead of raising: a probe is training data, and one the EP cannot run (on the H100,
    cuDNN refused a 2-D BatchNormalization of 200,704 rows) must not cost the other probes their batch. A zoo
    model's failure still raises."""
    try:
        return export_variant(variant, out_dir, opset, ep)
    except Exception as error:  # noqa: BLE001 (any failure of one probe: ORT's, torch's, the checker's)
        if variant.model.kind != "design_probe":
            raise
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return ProbeFailure(variant.variant_id, f"{type(error).__name__}: {first_line[:300]}")


def _exported(
    variant: ModelVariant,
    partial: Path,
    path: Path,
    opset: int,
    inputs: dict[str, list[int]],
    outputs: dict[str, list[int]],
    agreement: dict[str, Any] | None = None,
) -> ExportedModel:
    """Rename the validated ``partial`` file to ``path`` and describe it."""
    partial.replace(path)
    return ExportedModel(
        variant_id=variant.variant_id,
        model_name=variant.model.name,
        input_size=variant.input_size,
        batch_size=variant.batch_size,
        path=path,
        size_bytes=path.stat().st_size,
        opset=opset,
        inputs=inputs,
        outputs=outputs,
        precision=variant.precision,
        agreement=agreement or {},
    )


def export_precision_variant(
    variant_and_source: tuple[ModelVariant, Path], out_dir: str | os.PathLike[str], ep: EpName = "cpu"
) -> ExportedModel:
    """Write ``variant`` (fp16 or int8) made from its fp32 file ``source`` (``analysis.precision``),
    validate it by one ORT run on ``ep`` and measure its top-1 agreement with the fp32 file there.

    The file is written under a temporary name and renamed only once it validated.
    """
    variant, source = variant_and_source
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{variant.variant_id}.onnx"
    partial = path.with_suffix(".partial.onnx")
    try:
        precision_variant(variant.precision, source, partial)
        inputs, outputs = validate_onnx(partial, ep)
        agreement = agreement_with_reference(source, partial, ep)
    except Exception:
        partial.unlink(missing_ok=True)
        raise
    return _exported(variant, partial, path, opset_of(partial), inputs, outputs, agreement)


def trace_to_onnx(module, example, path: Path, opset: int, dynamic_batch: bool = False) -> None:
    """Export ``module`` traced on ``example`` to ``path`` with the TorchScript exporter.

    No autograd record (a batch-128 trace under grad keeps tens of GB of activations), and no fused
    attention fast path, whose op the exporter cannot write: the graph is the one a trace under grad
    gives. The TorchScript exporter is deprecated but exact on the opset; its warnings are silenced.

    Args:
        module: the torch module, in eval mode.
        example: its input tensor.
        path: where the ONNX file goes.
        opset: the ONNX opset to write.
        dynamic_batch: a symbolic first dimension on ``input`` and ``output``.
    """
    import torch

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example,),
                str(path),
                opset_version=opset,
                dynamo=False,
                input_names=["input"],
                output_names=["output"],
                dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None,
                do_constant_folding=True,
            )
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def validate_onnx(
    path: str | os.PathLike[str], ep: EpName = "cpu"
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Run ``path`` once on ``ep``; return its input and output shapes. (On the GPU profile the
    GPU validates: a batch-128 ResNet-50 at 512 px takes seconds on the host's CPU.)"""
    onnx.checker.check_model(str(path))
    session = make_session(path, ep, quick_search(None), level="basic")
    results = session.run(None, random_inputs(session))
    inputs = {arg.name: list(arg.shape) for arg in session.get_inputs()}
    outputs = {arg.name: list(result.shape) for arg, result in zip(session.get_outputs(), results)}
    return inputs, outputs
