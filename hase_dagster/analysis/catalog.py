"""The fused-kernel catalog: every kernel ORT runs for a model, named by the original ops it absorbed.

A *family* is a fusion pattern (``Conv_Add_Relu``); an *instance* is one family at one set of
shapes and attributes. Identical instances in different models share one ``instance_id``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hase_dagster.analysis.costs import bytes_moved, estimate_flops, tensor_bytes
from hase_dagster.analysis.fusion import FusionMap
from hase_dagster.analysis.graph import OptimizedGraph, OptimizedNode, TensorInfo
from hase_dagster.core.dtypes import precision_of


@dataclass
class Kernel:
    """One kernel of one model variant, in ORT's execution order."""

    variant_id: str
    ep: str
    order: int
    node_name: str
    family: str
    op_type: str
    domain: str
    absorbed_ops: list[str]
    absorbed_op_types: list[str]
    attributes: dict[str, Any]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    weight_names: list[str] = field(default_factory=list)
    flops: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    weight_bytes: int = 0
    in_graph_us: float | None = None

    @property
    def activations(self) -> list[TensorInfo]:
        """Inputs that are not weights (what flows in from other kernels)."""
        return [t for t in self.inputs if t.name not in self.weight_names]

    @property
    def precision(self) -> str:
        """What the kernel computes in, from its inputs' element types (``core.dtypes.precision_of``).
        The instance id hashes those types, so an fp16 Conv and an fp32 one are different instances."""
        return precision_of(t.dtype for t in self.inputs)

    @property
    def instance_id(self) -> str:
        """Hash of everything that decides the kernel's cost: family, op, attributes, shapes and
        element types."""
        signature = {
            "family": self.family,
            "op": f"{self.domain}.{self.op_type}",
            "attributes": self.attributes,
            "inputs": [(t.dtype, list(t.shape), t.name in self.weight_names) for t in self.inputs],
            "outputs": [(t.dtype, list(t.shape)) for t in self.outputs],
        }
        blob = json.dumps(signature, sort_keys=True, default=str).encode()
        return hashlib.sha1(blob).hexdigest()[:10]

    @property
    def shape_signature(self) -> str:
        """Shapes of the activation inputs, e.g. ``1x64x56x56``, joined by ``+``."""
        parts = ["x".join(str(d) for d in t.shape) or "scalar" for t in self.activations]
        return "+".join(parts) or "const"

    @property
    def file_stem(self) -> str:
        """A safe, readable file name: family, shape signature, short hash."""
        safe = lambda text, limit: re.sub(r"[^A-Za-z0-9_.+-]", "-", text)[:limit]  # noqa: E731
        return f"{safe(self.family, 60)}__{safe(self.shape_signature, 60)}__{self.instance_id}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "node_name": self.node_name,
            "family": self.family,
            "op_type": self.op_type,
            "domain": self.domain,
            "instance_id": self.instance_id,
            "precision": self.precision,
            "absorbed_ops": self.absorbed_ops,
            "absorbed_op_types": self.absorbed_op_types,
            "attributes": self.attributes,
            "inputs": [t.to_dict() | {"weight": t.name in self.weight_names} for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "flops": self.flops,
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "weight_bytes": self.weight_bytes,
            "in_graph_us": self.in_graph_us,
        }


def kernel_from_dict(variant_id: str, ep: str, data: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from its catalog JSON entry (the inverse of :meth:`Kernel.to_dict`)."""
    tensor = lambda t: TensorInfo(t["name"], t["dtype"], tuple(t["shape"]))  # noqa: E731
    return Kernel(
        variant_id=variant_id,
        ep=ep,
        order=data["order"],
        node_name=data["node_name"],
        family=data["family"],
        op_type=data["op_type"],
        domain=data["domain"],
        absorbed_ops=data["absorbed_ops"],
        absorbed_op_types=data["absorbed_op_types"],
        attributes=data["attributes"],
        inputs=[tensor(t) for t in data["inputs"]],
        outputs=[tensor(t) for t in data["outputs"]],
        weight_names=[t["name"] for t in data["inputs"] if t["weight"]],
        flops=data["flops"],
        input_bytes=data["input_bytes"],
        output_bytes=data["output_bytes"],
        weight_bytes=data["weight_bytes"],
        in_graph_us=data["in_graph_us"],
    )


def load_catalog(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Kernel]]:
    """Read a catalog JSON file: the document and its kernels."""
    document = json.loads(Path(path).read_text())
    kernels = [kernel_from_dict(document["variant_id"], document["ep"], k) for k in document["kernels"]]
    return document, kernels


def kernel_from_node(variant_id: str, ep: str, node: OptimizedNode, fusion: FusionMap) -> Kernel:
    """Describe one optimized node as a kernel of the catalog."""
    absorbed = fusion.absorbed.get(node.name, [])
    read, written = bytes_moved(node.inputs, node.outputs)
    weights = [t for t in node.inputs if t.name in node.initializer_inputs]
    return Kernel(
        variant_id=variant_id,
        ep=ep,
        order=node.index,
        node_name=node.name,
        family=fusion.family(node),
        op_type=node.op_type,
        domain=node.domain,
        absorbed_ops=[op.name for op in absorbed],
        absorbed_op_types=[op.op_type for op in absorbed],
        attributes=node.attributes,
        inputs=node.inputs,
        outputs=node.outputs,
        weight_names=list(node.initializer_inputs),
        flops=estimate_flops(node.op_type, node.attributes, node.inputs, node.outputs),
        input_bytes=read,
        output_bytes=written,
        weight_bytes=sum(tensor_bytes(t) for t in weights),
        in_graph_us=node.in_graph_us,
    )


def build_catalog(variant_id: str, optimized: OptimizedGraph, fusion: FusionMap) -> list[Kernel]:
    """Every kernel of the optimized graph, in ORT's execution order."""
    return [kernel_from_node(variant_id, optimized.ep, node, fusion) for node in optimized.nodes]


def catalog_document(variant_id: str, ep: str, kernels: list[Kernel], fusion: FusionMap) -> dict[str, Any]:
    """The per-model catalog JSON: kernels, family counts, and what the mapping could not place."""
    counts: dict[str, int] = {}
    for kernel in kernels:
        counts[kernel.family] = counts.get(kernel.family, 0) + 1
    return {
        "variant_id": variant_id,
        "ep": ep,
        "families": dict(sorted(counts.items())),
        "total_flops": sum(k.flops for k in kernels),
        "unmapped_original_ops": [op.name for op in fusion.unmapped],
        "mapping": {
            "matched_tensors": fusion.matched_tensors,
            "fingerprinted_tensors": fusion.fingerprinted_tensors,
            "perturbed_twin": fusion.perturbed_twin,
        },
        "folded_original_ops": len(fusion.folded),
        "kernels": [k.to_dict() for k in kernels],
    }
