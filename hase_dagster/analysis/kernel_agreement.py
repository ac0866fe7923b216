"""Agreement of two kernel lists of one model (rule-derived against fingerprinted): a kernel
agrees when another with the same family and the same input and output shapes is in the other
list (each kernel matched once)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hase_dagster.analysis.catalog import Kernel


def kernel_key(kernel: Kernel) -> str:
    """Family and shapes: what the comparison requires to be identical."""
    shapes = lambda tensors: "+".join("x".join(str(d) for d in t.shape) or "scalar" for t in tensors)  # noqa: E731
    return f"{kernel.family}|{shapes(kernel.inputs)}->{shapes(kernel.outputs)}"


@dataclass
class Agreement:
    """Matched kernels and the disagreements of one model."""

    variant_id: str
    fingerprinted: int
    derived: int
    identical: int
    only_fingerprinted: list[str] = field(default_factory=list)
    only_derived: list[str] = field(default_factory=list)
    families_fingerprinted: int = 0
    families_identical: int = 0

    @property
    def share(self) -> float:
        """Identical kernels over the larger of the two lists (extra derived kernels count against)."""
        return self.identical / max(self.fingerprinted, self.derived, 1)


def compare_kernels(variant_id: str, fingerprinted: list[Kernel], derived: list[Kernel]) -> Agreement:
    """Compare two kernel lists of one model by family and shapes (order is not compared)."""
    truth = Counter(kernel_key(k) for k in fingerprinted)
    found = Counter(kernel_key(k) for k in derived)
    both = truth & found
    families = Counter(k.family for k in fingerprinted) & Counter(k.family for k in derived)
    return Agreement(
        variant_id=variant_id,
        fingerprinted=len(fingerprinted),
        derived=len(derived),
        identical=sum(both.values()),
        only_fingerprinted=sorted((truth - found).elements()),
        only_derived=sorted((found - truth).elements()),
        families_fingerprinted=len(fingerprinted),
        families_identical=sum(families.values()),
    )


def agreement_check(agreements: list[Agreement], goal: float = 0.99) -> tuple[bool, dict[str, object]]:
    """Whether rule-derived kernel lists agree with the fingerprinted ones (share of identical
    kernels over all variants at least ``goal``), and the disagreements per variant."""
    total = sum(max(a.fingerprinted, a.derived) for a in agreements)
    identical = sum(a.identical for a in agreements)
    share = identical / total if total else 1.0
    disagreements = {
        a.variant_id: {"only_fingerprinted": a.only_fingerprinted, "only_derived": a.only_derived}
        for a in agreements
        if a.only_fingerprinted or a.only_derived
    }
    return share >= goal, {"share": share, "identical": identical, "kernels": total, "disagreements": disagreements}
