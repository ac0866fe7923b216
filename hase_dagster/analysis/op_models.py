"""The models and configurations operator profiling runs: BERT built from its configuration with
random weights (``transformers``, offline: nothing is downloaded) and the zoo's CNNs, at batch sizes
x sequence lengths (or image sizes).

A configuration's key, ``bert_base-b4-s256`` or ``resnet50-b8-i224``, is its partition key.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hase_dagster.core.errors import HaseError

# BERT variants: (layers, hidden, heads, FFN); vocabulary 30522. bert_l2 is BERT-base's layer with
# two layers (the CPU grid); bert_tiny is Google's BERT-Tiny shape (a smoke configuration for tests).
BERT_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "bert_base": (12, 768, 12, 3072),
    "bert_l2": (2, 768, 12, 3072),
    "bert_tiny": (2, 128, 2, 512),
}
BERT_LAYERS: dict[str, int] = {name: shape[0] for name, shape in BERT_SHAPES.items()}
SMOKE_KEYS: tuple[str, ...] = ("bert_tiny-b1-s32",)
CNNS: tuple[str, ...] = ("resnet18", "resnet50", "mobilenet_v2")
GPU_BATCHES: tuple[int, ...] = (1, 4, 8, 16)
GPU_SEQUENCES: tuple[int, ...] = (128, 256, 512)
GPU_CNNS: tuple[str, ...] = ("resnet50", "mobilenet_v2")
IMAGE_SIZE = 224

_KEY = re.compile(r"^(?P<model>[a-z0-9_]+)-b(?P<batch>[0-9]+)-(?P<kind>[si])(?P<size>[0-9]+)$")


@dataclass(frozen=True)
class ProfileConfig:
    """One profiled configuration: a model at a batch size and a sequence length (BERT) or image size."""

    model: str
    batch_size: int
    size: int

    @property
    def kind(self) -> Literal["bert", "cnn"]:
        return "bert" if self.model in BERT_LAYERS else "cnn"

    @property
    def key(self) -> str:
        return f"{self.model}-b{self.batch_size}-{'s' if self.kind == 'bert' else 'i'}{self.size}"

    @property
    def seq_len(self) -> int | None:
        return self.size if self.kind == "bert" else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "model": self.model,
            "kind": self.kind,
            "batch_size": self.batch_size,
            "size": self.size,
        }


def parse_key(key: str) -> ProfileConfig:
    """The configuration of a partition key; :class:`HaseError` naming the key when it is not one."""
    match = _KEY.match(key)
    if not match:
        raise HaseError(f"not a profiling configuration: {key!r} (expected e.g. bert_base-b4-s256 or resnet18-b1-i224)")
    model, kind = match["model"], match["kind"]
    config = ProfileConfig(model, int(match["batch"]), int(match["size"]))
    if model not in BERT_LAYERS and model not in CNNS:
        raise HaseError(f"unknown profiling model {model!r} in {key!r}; known: {sorted([*BERT_LAYERS, *CNNS])}")
    if (kind == "s") != (config.kind == "bert") or config.batch_size <= 0 or config.size <= 0:
        raise HaseError(f"bad profiling configuration {key!r}: BERT takes -sSEQ, CNNs -iSIZE, all positive")
    return config


def grid(device: str) -> list[ProfileConfig]:
    """The configurations a profile on ``device`` runs: the full grid on a GPU (BERT-base at batch
    1/4/8/16 x sequence 128/256/512, the GPU CNNs at each batch size), and on a CPU a small one that
    keeps ``make run`` within its budget (a 2-layer BERT at batch 1 x 128 tokens, ResNet-18 at batch 1)."""
    if device == "cuda":
        bert = [ProfileConfig("bert_base", b, s) for b in GPU_BATCHES for s in GPU_SEQUENCES]
        cnns = [ProfileConfig(m, b, IMAGE_SIZE) for m in GPU_CNNS for b in GPU_BATCHES]
        return bert + cnns
    return [ProfileConfig("bert_l2", 1, 128), ProfileConfig("resnet18", 1, IMAGE_SIZE)]


def all_keys() -> list[str]:
    """Every partition key: the GPU grid, the CPU grid and the smoke configuration."""
    keys = [c.key for c in grid("cuda")]
    return keys + [c.key for c in grid("cpu") if c.key not in keys] + list(SMOKE_KEYS)


def build_model(config: ProfileConfig):  # -> torch.nn.Module (torch imported lazily)
    """The model of ``config`` with random weights, in eval mode. BERT uses PyTorch's scaled dot
    product attention (``attn_implementation="sdpa"``), as ``transformers`` does by default."""
    import torch

    torch.manual_seed(0)
    if config.kind == "bert":
        from transformers import BertConfig, BertModel

        layers, hidden, heads, ffn = BERT_SHAPES[config.model]
        bert = BertConfig(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=ffn,
            max_position_embeddings=max(512, config.size),
        )
        bert._attn_implementation = "sdpa"
        return BertModel(bert, add_pooling_layer=True).eval()
    from hase_dagster.analysis.zoo import build_torch_model
    from hase_dagster.core.config import ZooModel

    return build_torch_model(ZooModel(name=config.model))


def example_inputs(config: ProfileConfig, device: str = "cpu") -> dict[str, Any]:
    """Keyword inputs of the model: token ids (all zero: a valid id) for BERT, a random image batch for CNNs."""
    import torch

    if config.kind == "bert":
        return {"input_ids": torch.zeros(config.batch_size, config.size, dtype=torch.long, device=device)}
    generator = torch.Generator().manual_seed(0)
    image = torch.randn(config.batch_size, 3, config.size, config.size, generator=generator)
    return {"x": image.to(device)}


def _bert_outputs_class():  # defined lazily: torch is slow to import
    import torch

    class BertOutputs(torch.nn.Module):
        """BERT called with token ids alone, returning a tuple (what the TorchScript exporter traces)."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.bert(input_ids=input_ids)
            return out.last_hidden_state, out.pooler_output

    return BertOutputs


def _BertOutputs(bert):  # noqa: N802 - reads as the class it builds
    return _bert_outputs_class()(bert)


def export_onnx(config: ProfileConfig, path: str | Path, opset: int = 17, device: str = "cpu") -> Path:
    """Export ``config``'s model at its fixed shapes to ``path`` (TorchScript exporter, so the
    opset asked for is written, and node names keep the module scopes, e.g.
    ``/encoder/layer.0/attention/self/query/MatMul``). BERT's outputs: the last hidden state and
    the pooled output. Written under a temporary name, renamed once complete."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.onnx")
    module = build_model(config).to(device)
    inputs = example_inputs(config, device)
    if config.kind == "bert":
        module = _BertOutputs(module)
        names, outputs = ["input_ids"], ["last_hidden_state", "pooler_output"]
    else:
        names, outputs = ["input"], ["output"]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated but exact on opset
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(partial),
            opset_version=opset,
            dynamo=False,
            input_names=names,
            output_names=outputs,
            do_constant_folding=True,
        )
    partial.replace(path)
    return path


def scope_of(onnx_node_name: str) -> str:
    """The module path of an exported node, as ``named_modules()`` spells it.

    The TorchScript exporter writes one segment per called module, a container's child qualified by
    the container (``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``; BERT's
    ``/bert/encoder/layer.0/attention/self/query/MatMul`` -> ``encoder.layer.0.attention.self.query``,
    the export wrapper ``bert`` dropped), and a module called twice gets ``_1`` on its second call
    (``relu_1`` -> ``relu``). The root module is ``""``.
    """
    segments = [p for p in onnx_node_name.split("/") if p][:-1]
    if segments and segments[0] == "bert":
        segments = segments[1:]
    path: list[str] = []
    for segment in segments:
        if path and segment.startswith(path[-1] + "."):
            path[-1] = segment
        else:
            path.append(segment)
    if path:
        path[-1] = re.sub(r"_[0-9]+$", "", path[-1])
    return ".".join(path)
