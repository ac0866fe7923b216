"""Fusion rules learned from the fingerprinted catalog: which patterns of exported ops ORT turns
into which kernel on one execution provider, ORT version and device.

The teacher is the analysis (``fusion.map_fusions`` + ``catalog.build_catalog``): every kernel it
fingerprinted names the original ops it absorbed. Each distinct (pattern of those ops, kernel op)
becomes a rule. A rule carries:

- the pattern (``pattern_graph``), the kernel's op type and domain, how its attributes, inputs and
  outputs follow from the matched ops (copied attribute, tensor dimension, or a literal the teacher
  always showed);
- conditions on attributes, ranks, element types, reader counts and shapes, learned so that every
  place the pattern occurs in the teacher's models but ORT did *not* build that kernel is excluded
  (ORT's own fusion conditions, as the teacher shows them, not as hand-written here);
- kernels ORT adds with no original op (layout reorders, reshapes around fused attention), learned
  as insertions before one input of a rule's kernel, by the kind of kernel that produces that input.

Original ops that no kernel absorbed (Identity, Dropout, views ORT removes) become rules without a
kernel. The file is plain, versioned JSON: nothing in it is executed when it is loaded.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx

from hase_dagster.analysis.catalog import Kernel
from hase_dagster.analysis.fusion import family_name
from hase_dagster.analysis.graph import TensorInfo
from hase_dagster.analysis.pattern_graph import GraphView, Matcher, input_order, pattern_key, prepare, signature
from hase_dagster.core.documents import load_versioned_json
from hase_dagster.core.errors import HaseError

FORMAT = "hase.fusion_rules"
FORMAT_VERSION = 1
# A rule is applied only where, on the teacher's models, it was right at least this often.
MIN_PRECISION = 0.5
# Condition features in order of preference: attributes and ranks explain ORT's checks better
# than exact shapes, which only serve where nothing else separates the cases.
FEATURE_PREFERENCE = ("a", "rank", "dtype", "readers", "shape")
# Block sizes ORT's layouts round channel counts up to (NCHWc: 8 with AVX2, 16 with AVX-512).
ROUND_UP_MULTIPLES = (8, 16)


@dataclass
class FusionRules:
    """Learned fusion rules of one EP, ORT version and device (JSON-serializable)."""

    ep: str
    ort_version: str
    device: str
    rules: list[dict[str, Any]] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "ep": self.ep,
            "ort_version": self.ort_version,
            "device": self.device,
            "provenance": self.provenance,
            "rules": self.rules,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the rules as one JSON file (written whole, then renamed into place).

        Returns:
            The path written.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True, default=str))
        partial.replace(path)
        return path

    @staticmethod
    def load(path: str | os.PathLike[str]) -> FusionRules:
        """Read a rules file written by :meth:`save`.

        Raises:
            HaseError: the file is missing, not JSON, not a rules file, or of another format version.
        """
        path = Path(path)
        document = load_versioned_json(
            path,
            FORMAT,
            FORMAT_VERSION,
            missing="fusion rules file {path} does not exist",
            unreadable="fusion rules file {path} is corrupt: {exc}",
            foreign="{path} is not a Hase fusion rules file",
            other_version="fusion rules file {path} has format version {found!r}; "
            "this Hase reads version {version}: learn the rules again",
        )
        try:
            rules = FusionRules(
                ep=str(document["ep"]),
                ort_version=str(document["ort_version"]),
                device=str(document["device"]),
                rules=list(document["rules"]),
                provenance=dict(document.get("provenance", {})),
            )
            for rule in rules.rules:
                Matcher(rule["pattern"])
                _ = rule["family"], rule["kernel"], rule["conditions"], rule["precision"]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise HaseError(f"fusion rules file {path} is corrupt: missing or malformed {exc}") from exc
        return rules


# ---- features and conditions -----------------------------------------------------------------


def features(view: GraphView, group: list[int]) -> dict[str, str]:
    """What the conditions of a rule may test about one match, as strings."""
    out: dict[str, str] = {}
    for k, node_index in enumerate(group):
        node = view.nodes[node_index]
        for name, text in view.attribute_texts(node_index):
            out[f"{k}.a.{name}"] = text
        order = input_order(view, group, k)
        if order != sorted(order):
            # Which of a commutative op's inputs the pattern feeds (ORT fuses only one side).
            out[f"{k}.a._swapped"] = "true"
        for slot, actual in enumerate(input_order(view, group, k)):
            name = node.input[actual]
            if not name:
                continue
            tensor = view.tensor(name)
            out[f"{k}.rank.i{slot}"] = str(len(tensor.shape))
            out[f"{k}.dtype.i{slot}"] = tensor.dtype
            out[f"{k}.shape.i{slot}"] = json.dumps(list(tensor.shape))
        for slot, name in enumerate(node.output):
            out[f"{k}.readers.o{slot}"] = str(len(view.consumers.get(name, [])))
    return out


def _learn_conditions(positives: list[dict[str, str]], negatives: list[dict[str, str]]) -> tuple[dict[str, str], int]:
    """Feature values shared by every positive that exclude the most negatives, added greedily
    until no negative is left or none helps. Returns the conditions and the negatives left."""
    if not positives:
        return {}, len(negatives)
    shared = {
        key: value for key, value in positives[0].items() if all(p.get(key, "<absent>") == value for p in positives)
    }
    conditions: dict[str, str] = {}
    left = list(negatives)
    while left:
        best_key, best_excluded = None, 0
        for key, value in sorted(shared.items(), key=lambda kv: (FEATURE_PREFERENCE.index(kv[0].split(".")[1]), kv[0])):
            excluded = sum(1 for n in left if n.get(key, "<absent>") != value)
            if excluded > best_excluded:
                best_key, best_excluded = key, excluded
        if best_key is None:
            break
        conditions[best_key] = shared.pop(best_key)
        left = [n for n in left if n.get(best_key, "<absent>") == conditions[best_key]]
    return conditions, len(left)


def conditions_hold(conditions: dict[str, str], found: dict[str, str]) -> bool:
    return all(found.get(key, "<absent>") == value for key, value in conditions.items())


# ---- kernel templates ---------------------------------------------------------------------------


def group_refs(view: GraphView, group: list[int]) -> dict[str, TensorInfo]:
    """Every tensor a matched group touches, by its place in the pattern (``i.k.slot``, ``o.k.slot``)."""
    refs: dict[str, TensorInfo] = {}
    for k, node_index in enumerate(group):
        node = view.nodes[node_index]
        for slot, actual in enumerate(input_order(view, group, k)):
            name = node.input[actual]
            if name:
                refs[f"i.{k}.{slot}"] = view.tensor(name)
        for slot, name in enumerate(node.output):
            if name:
                refs[f"o.{k}.{slot}"] = view.tensor(name)
    return refs


def _tensor_template(samples: list[tuple[dict[str, TensorInfo], TensorInfo, bool]], slot: int = 0) -> dict[str, Any]:
    """How one kernel input or output follows from the matched group's tensors, consistent over
    every sample (refs, the kernel's tensor, whether it is a weight).

    Each dimension is a dimension of a matched tensor (``["ref", tensor, dim]``), the product of a
    matched tensor's leading dimensions (``["prod", tensor, count]``: ORT flattens a MatMul's
    batch dimensions for Gemm), or a literal. Ties go to the tensor of the same name, then to
    the one in the same slot (a Concat's inputs that happened to be equal in every sample)."""
    refs0, tensor0, _ = samples[0]

    def preference(ref: str) -> tuple[bool, bool, str]:
        return (refs0[ref].name != tensor0.name, ref.rsplit(".", 1)[1] != str(slot), ref)

    ordered = sorted(refs0, key=preference)
    whole = [
        r
        for r in ordered
        if refs0[r].dtype == tensor0.dtype and all(r in refs and refs[r].shape == t.shape for refs, t, _ in samples)
    ]
    dims: list[list[Any]] = []
    for d, value in enumerate(tensor0.shape):
        chosen: list[Any] | None = None
        for ref in whole[:1] + ordered:
            rank = len(refs0[ref].shape)
            # The first dimension, then from the last one back: feature dims keep their place
            # from the end when another model has more or fewer leading dims.
            for dd in [d] if whole and ref == whole[0] else [0, *range(-1, -rank, -1)][:rank]:
                if all(
                    ref in refs
                    and -len(refs[ref].shape) <= dd < len(refs[ref].shape)
                    and d < len(t.shape)
                    and refs[ref].shape[dd] == t.shape[d]
                    for refs, t, _ in samples
                ):
                    chosen = ["ref", ref, dd]
                    break
            if chosen:
                break
        if chosen is None:
            for ref in ordered:
                # All but the last dimension first (a MatMul's batch dims whatever its rank), then fixed counts.
                for count in [-1, *range(2, len(refs0[ref].shape))]:
                    if all(
                        ref in refs and d < len(t.shape) and _leading_product(refs[ref], count) == t.shape[d]
                        for refs, t, _ in samples
                    ):
                        chosen = ["prod", ref, count]
                        break
                if chosen:
                    break
        if chosen is None:
            # A dimension rounded up to a multiple (NCHWc pads channels to its block size).
            for ref in ordered:
                rank = len(refs0[ref].shape)
                for dd in [0, *range(-1, -rank, -1)][:rank]:
                    for multiple in ROUND_UP_MULTIPLES:
                        if all(
                            ref in refs
                            and -len(refs[ref].shape) <= dd < len(refs[ref].shape)
                            and d < len(t.shape)
                            and round_up(refs[ref].shape[dd], multiple) == t.shape[d]
                            for refs, t, _ in samples
                        ):
                            chosen = ["ceil", ref, dd, multiple]
                            break
                    if chosen:
                        break
                if chosen:
                    break
        if chosen is None:
            common = Counter(t.shape[d] for _, t, _ in samples if d < len(t.shape)).most_common(1)
            chosen = ["lit", common[0][0] if common else value]
        dims.append(chosen)
    dtypes = Counter(t.dtype for _, t, _ in samples)
    return {
        "name": ["ref", whole[0]] if whole else ["lit", tensor0.name],
        # The same shape as a matched tensor in every sample: taken whole, so it holds at any rank.
        "shape_of": whole[0] if whole else None,
        "dtype": dtypes.most_common(1)[0][0],
        "dims": dims,
        "weight": sum(1 for *_, w in samples if w) * 2 > len(samples),
    }


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (NCHWc pads channels to its block so)."""
    return -(-value // multiple) * multiple


def _leading_product(tensor: TensorInfo, count: int) -> int:
    """Product of the first ``count`` dimensions (all but the last when ``count`` is -1)."""
    if count < 0 and len(tensor.shape) < 2:
        return -1
    product = 1
    for dim in tensor.shape[:count]:
        product *= dim
    return product


def _attribute_template(samples: list[tuple[GraphView, list[int], dict[str, Any]]]) -> dict[str, list[Any]]:
    """Each kernel attribute as a copy of a matched op's attribute or a literal."""
    template: dict[str, list[Any]] = {}
    keys = sorted({key for *_, attrs in samples for key in attrs})
    for key in keys:
        values = [attrs.get(key) for *_, attrs in samples]
        chosen: list[Any] | None = None
        view0, group0, _ = samples[0]
        for k in range(len(group0)):
            for name in view0.attributes(group0[k]):
                if all(
                    view.attributes(group[k]).get(name) == value for (view, group, _), value in zip(samples, values)
                ):
                    chosen = ["copy", k, name]
                    break
            if chosen:
                break
        if chosen is None:
            encoded = Counter(json.dumps(v, sort_keys=True) for v in values if v is not None).most_common(1)
            chosen = ["lit", json.loads(encoded[0][0]) if encoded else None]
        template[key] = chosen
    return template


def render_tensor(template: dict[str, Any], refs: dict[str, TensorInfo]) -> TensorInfo:
    if template.get("shape_of") in refs:
        whole = refs[template["shape_of"]]
        return TensorInfo(whole.name, template["dtype"], whole.shape)
    dims = []
    for entry in template["dims"]:
        if (
            entry[0] == "ref"
            and entry[1] in refs
            and -len(refs[entry[1]].shape) <= entry[2] < len(refs[entry[1]].shape)
        ):
            dims.append(refs[entry[1]].shape[entry[2]])
        elif entry[0] == "prod" and entry[1] in refs:
            dims.append(_leading_product(refs[entry[1]], entry[2]))
        elif (
            entry[0] == "ceil"
            and entry[1] in refs
            and -len(refs[entry[1]].shape) <= entry[2] < len(refs[entry[1]].shape)
        ):
            dims.append(round_up(refs[entry[1]].shape[entry[2]], entry[3]))
        else:
            dims.append(entry[1] if entry[0] == "lit" else -1)
    name_source = template["name"]
    name = refs[name_source[1]].name if name_source[0] == "ref" and name_source[1] in refs else str(name_source[1])
    return TensorInfo(name, template["dtype"], tuple(int(d) for d in dims))


def render_attributes(template: dict[str, list[Any]], view: GraphView, group: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, entry in template.items():
        if entry[0] == "copy" and entry[1] < len(group):
            value = view.attributes(group[entry[1]]).get(entry[2])
            if value is not None:
                out[key] = value
        elif entry[0] == "lit" and entry[1] is not None:
            out[key] = entry[1]
    return out


# ---- learning -----------------------------------------------------------------------------------


def qualified(kernel: Kernel | None) -> str:
    """A kernel's op as the insertion statistics key it: ``domain.op_type`` (``input`` for none)."""
    if kernel is None:
        return "input"
    return f"{kernel.domain}.{kernel.op_type}" if kernel.domain else kernel.op_type


def _outcome(kernel: Kernel | None) -> str:
    if kernel is None:
        return "none"
    return json.dumps(
        [kernel.op_type, kernel.domain, [len(t.shape) for t in kernel.inputs], [len(t.shape) for t in kernel.outputs]]
    )


@dataclass
class _Example:
    view: GraphView
    groups: list[tuple[list[int], Kernel | None]]  # teacher groups (pattern order) and their kernel
    kernels: list[Kernel]
    inserts: list[tuple[Kernel, int, int, list[Kernel], Kernel | None]]  # consumer, slot, group idx, chain, producer


def _teacher_groups(view: GraphView, kernels: list[Kernel], stats: Counter) -> list[tuple[list[int], Kernel | None]]:
    index = {node.name: i for i, node in enumerate(view.nodes)}
    groups: list[tuple[list[int], Kernel | None]] = []
    claimed: set[int] = set()
    for kernel in kernels:
        if not kernel.absorbed_ops:
            continue
        nodes = [index.get(name) for name in kernel.absorbed_ops]
        if any(n is None for n in nodes):
            stats["kernels_with_unknown_ops"] += 1
            continue
        group = sorted({n for n in nodes if n is not None and n not in view.folded} - claimed)
        if not group:
            stats["kernels_of_folded_ops"] += 1
            continue
        claimed.update(group)
        groups.append((group, kernel))
    for node_index in view.live:
        if node_index not in claimed:
            groups.append(([node_index], None))
    return groups


def _teacher_inserts(
    kernels: list[Kernel], groups: list[tuple[list[int], Kernel | None]], stats: Counter
) -> list[tuple[Kernel, int, int, list[Kernel], Kernel | None]]:
    """Kernels without original ops, each attributed to the first ordinary kernel that reads
    (through a chain of such kernels) what it writes: (consumer, input slot, group index,
    chain in data order, producer of the chain's input)."""
    producer: dict[str, Kernel] = {}
    readers: dict[str, list[tuple[Kernel, int]]] = defaultdict(list)
    for kernel in kernels:
        for tensor in kernel.outputs:
            producer[tensor.name] = kernel
        for slot, tensor in enumerate(kernel.inputs):
            readers[tensor.name].append((kernel, slot))
    group_of = {id(kernel): g for g, (_, kernel) in enumerate(groups) if kernel is not None}
    out = []
    for kernel in kernels:
        if kernel.absorbed_ops:
            continue
        # Start chains at their first inserted kernel only.
        source = kernel.inputs[0].name if kernel.inputs else ""
        if source in producer and not producer[source].absorbed_ops:
            continue
        chain = [kernel]
        while True:
            next_readers = readers.get(chain[-1].outputs[0].name, []) if chain[-1].outputs else []
            followers = [r for r, _ in next_readers if not r.absorbed_ops]
            if len(followers) == 1 and len(next_readers) == 1:
                chain.append(followers[0])
                continue
            break
        targets = [
            (r, s)
            for r, s in (readers.get(chain[-1].outputs[0].name, []) if chain[-1].outputs else [])
            if r.absorbed_ops
        ]
        if not targets:
            stats["inserted_kernels_without_reader"] += len(chain)
            continue
        for consumer, slot in targets:
            if id(consumer) in group_of:
                out.append((consumer, slot, group_of[id(consumer)], chain, producer.get(source)))
            else:
                stats["inserted_kernels_without_rule"] += len(chain)
    return out


def _source_producer(kernel: Kernel, slot: int, producer: dict[str, Kernel]) -> Kernel | None:
    """The ordinary kernel that writes a kernel's input (looking through inserted kernels)."""
    name = kernel.inputs[slot].name
    seen = 0
    while name in producer and not producer[name].absorbed_ops and producer[name].inputs and seen < 8:
        name = producer[name].inputs[0].name
        seen += 1
    return producer.get(name)


def _inside_larger_group(group: list[int], owner: dict[int, int], sizes: list[int]) -> bool:
    """Whether every node of ``group`` belongs to one teacher group with more nodes."""
    owners = {owner.get(node, -1) for node in group}
    if len(owners) != 1:
        return False
    (only,) = owners
    return only >= 0 and sizes[only] > len(group)


def learn_rules(
    examples: Iterable[tuple[onnx.ModelProto, list[Kernel]]], ep: str, ort_version: str, device: str
) -> FusionRules:
    """Learn the fusion rules of one EP from fingerprinted catalogs.

    Args:
        examples: (the model as exported, its fingerprinted kernels in execution order) pairs; the
            model's input shapes must be the ones the kernels were profiled at.
        ep: the execution provider the kernels ran on (``cuda``, ``cpu``).
        ort_version: ONNX Runtime version of the teacher.
        device: the device of the teacher (e.g. ``NVIDIA H100 80GB HBM3``).

    Returns:
        The rules, with provenance: variants, counts, and what could not be learned.
    """
    stats: Counter = Counter()
    prepared: list[_Example] = []
    variants: list[str] = []
    for model, kernels in examples:
        view = prepare(model)
        groups = _teacher_groups(view, kernels, stats)
        inserts = _teacher_inserts(kernels, groups, stats)
        prepared.append(_Example(view, groups, kernels, inserts))
        if kernels:
            variants.append(kernels[0].variant_id)
    # Rules: one per (pattern, outcome); positives are the teacher's groups.
    by_rule: dict[tuple[str, str], list[tuple[int, list[int], Kernel | None]]] = defaultdict(list)
    patterns: dict[str, list[dict[str, Any]]] = {}
    for e, example in enumerate(prepared):
        for group, kernel in example.groups:
            pattern = signature(example.view, group)
            key = pattern_key(pattern)
            patterns[key] = pattern
            by_rule[(key, _outcome(kernel))].append((e, group, kernel))
    positive_sets: dict[tuple[int, frozenset[int]], str] = {}
    for (_key, outcome), items in by_rule.items():
        for e, group, _ in items:
            positive_sets[(e, frozenset(group))] = outcome
    # Which teacher group holds each node: a match strictly inside a larger group is not a
    # counter-example (detection tries larger patterns first), one that cuts across groups is.
    group_of_node: list[dict[int, int]] = []
    group_sizes: list[list[int]] = []
    for example in prepared:
        owner: dict[int, int] = {}
        for g, (group, _) in enumerate(example.groups):
            for node in group:
                owner[node] = g
        group_of_node.append(owner)
        group_sizes.append([len(group) for group, _ in example.groups])
    matches_by_pattern: dict[str, list[tuple[int, list[int]]]] = {}
    for key, pattern in patterns.items():
        matcher = Matcher(pattern)
        if matcher.steps is None:
            stats["disconnected_patterns"] += 1
        found: list[tuple[int, list[int]]] = []
        for e, example in enumerate(prepared):
            seen: set[frozenset[int]] = set()
            for group in matcher.matches(example.view):
                if frozenset(group) not in seen:
                    seen.add(frozenset(group))
                    found.append((e, group))
        matches_by_pattern[key] = found
    rules: list[dict[str, Any]] = []
    for (key, outcome), items in sorted(by_rule.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        pattern = patterns[key]
        positives = [features(prepared[e].view, group) for e, group, _ in items]
        negatives = [
            features(prepared[e].view, group)
            for e, group in matches_by_pattern[key]
            if positive_sets.get((e, frozenset(group))) != outcome
            and not _inside_larger_group(group, group_of_node[e], group_sizes[e])
        ]
        conditions, left = _learn_conditions(positives, negatives)
        kernel_template = None
        op_types = [op["op"] for op in pattern]
        family = family_name(op_types, op_types[0])
        first_kernel = items[0][2]
        if first_kernel is not None:
            family = first_kernel.family
            samples = [(prepared[e].view, group, k) for e, group, k in items if k is not None]
            kernel_template = {
                "op_type": first_kernel.op_type,
                "domain": first_kernel.domain,
                "attributes": _attribute_template([(v, g, k.attributes) for v, g, k in samples]),
                "inputs": [
                    _tensor_template(
                        [(group_refs(v, g), k.inputs[j], k.inputs[j].name in k.weight_names) for v, g, k in samples], j
                    )
                    for j in range(len(first_kernel.inputs))
                ],
                "outputs": [
                    _tensor_template([(group_refs(v, g), k.outputs[j], False) for v, g, k in samples], j)
                    for j in range(len(first_kernel.outputs))
                ],
            }
        rules.append(
            {
                "id": len(rules),
                "pattern": pattern,
                "family": family,
                "kernel": kernel_template,
                "conditions": conditions,
                "positives": len(items),
                "negatives_left": left,
                "precision": len(items) / (len(items) + left),
                "variants": len({prepared[e].kernels[0].variant_id for e, _, _ in items if prepared[e].kernels}),
                "inserts": {},
            }
        )
    _learn_inserts(prepared, rules, by_rule)
    provenance = {
        "learned_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "variants": sorted(variants),
        "teacher": "hase_dagster.analysis.fusion.map_fusions (value fingerprints)",
        "rules": len(rules),
        "not_learned": dict(stats),
    }
    return FusionRules(ep=ep, ort_version=ort_version, device=device, rules=rules, provenance=provenance)


def _learn_inserts(
    prepared: list[_Example],
    rules: list[dict[str, Any]],
    by_rule: dict[tuple[str, str], list[tuple[int, list[int], Kernel | None]]],
) -> None:
    """Per rule and kernel input slot: which chains of added kernels ORT put before it, by the
    kind of kernel producing that input, and how often it did not."""
    rule_of: dict[int, int] = {}
    positions: dict[int, tuple[int, list[int]]] = {}
    for rule, ((_, _), items) in zip(rules, sorted(by_rule.items(), key=lambda kv: (-len(kv[1]), kv[0]))):
        for e, group, kernel in items:
            if kernel is not None:
                rule_of[id(kernel)] = rule["id"]
                positions[id(kernel)] = (e, group)
    totals: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for example in prepared:
        producer = {t.name: k for k in example.kernels for t in k.outputs}
        for kernel in example.kernels:
            if id(kernel) not in rule_of:
                continue
            for slot in range(len(kernel.inputs)):
                totals[(rule_of[id(kernel)], slot)][qualified(_source_producer(kernel, slot, producer))] += 1
    chains: dict[tuple[int, int, str], list[tuple[GraphView, list[int], list[Kernel], str]]] = defaultdict(list)
    for example in prepared:
        for consumer, slot, _, chain, source in example.inserts:
            if id(consumer) not in rule_of:
                continue
            e, group = positions[id(consumer)]
            chain_key = "/".join(qualified(k) for k in chain)
            chains[(rule_of[id(consumer)], slot, chain_key)].append((prepared[e].view, group, chain, qualified(source)))
    for (rule_id, slot, chain_key), samples in chains.items():
        by_producer = Counter(source for *_, source in samples)
        templates = []
        for position in range(len(samples[0][2])):
            kernels = [(v, g, chain[position]) for v, g, chain, _ in samples]
            head = kernels[0][2]
            templates.append(
                {
                    "op_type": head.op_type,
                    "domain": head.domain,
                    "family": head.family,
                    "attributes": _attribute_template([(v, g, k.attributes) for v, g, k in kernels]),
                    "inputs": [
                        _tensor_template(
                            [(group_refs(v, g), k.inputs[j], k.inputs[j].name in k.weight_names) for v, g, k in kernels]
                        )
                        for j in range(len(head.inputs))
                    ],
                    "outputs": [
                        _tensor_template([(group_refs(v, g), k.outputs[j], False) for v, g, k in kernels])
                        for j in range(len(head.outputs))
                    ],
                }
            )
        entry = rules[rule_id]["inserts"].setdefault(str(slot), {"totals": dict(totals[(rule_id, slot)]), "chains": {}})
        entry["chains"][chain_key] = {"by_producer": dict(by_producer), "kernels": templates}


def extended(base: FusionRules, extra: FusionRules, source: str) -> FusionRules:
    """``base`` with the fusions ``extra`` learned and ``base`` has no rule for.

    A teacher shows only the fusions its models contain: the zoo's exports never wrote an RMSNorm or GELU's tanh
    form by hand, so rules learned on them keep those ops unfused where ORT fuses them. Rules learned from another
    teacher on the same EP and ORT version add those patterns; a pattern ``base`` already has keeps ``base``'s
    rule (its conditions were learned on its own counter-examples), and single-op rules are not taken (an op no
    rule covers stays one kernel anyway).

    Args:
        base: the rules to extend.
        extra: rules learned from another teacher (the same EP and ORT version).
        source: where ``extra``'s teacher comes from, recorded in the provenance.

    Returns:
        The extended rules; ``extra``'s get ids after ``base``'s.

    Raises:
        HaseError: the two are of different EPs or ORT versions.
    """
    if (base.ep, base.ort_version) != (extra.ep, extra.ort_version):
        raise HaseError(
            f"cannot extend {base.ep} rules of ORT {base.ort_version} with {extra.ep} rules of ORT {extra.ort_version}"
        )
    have = {pattern_key(rule["pattern"]) for rule in base.rules}
    added = [rule for rule in extra.rules if len(rule["pattern"]) > 1 and pattern_key(rule["pattern"]) not in have]
    rules = [*base.rules, *({**rule, "id": len(base.rules) + i} for i, rule in enumerate(added))]
    extension = {
        "source": source,
        "learned_at": extra.provenance.get("learned_at"),
        "families": [rule["family"] for rule in added],
        "variants": extra.provenance.get("variants", []),
    }
    provenance = {**base.provenance, "extensions": [*base.provenance.get("extensions", []), extension]}
    return FusionRules(ep=base.ep, ort_version=base.ort_version, device=base.device, rules=rules, provenance=provenance)
