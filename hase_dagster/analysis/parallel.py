"""Analysis work spread over processes: one model variant per task.

Analysis (export, optimization, fusion mapping, kernel extraction) is host-bound and each variant
is independent, so a 16-core GPU host runs several at once. Timing never runs here: benchmarks
measure one thing at a time. Workers are spawned, not forked, so each gets its own CUDA context.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_variants(function: Callable[[Item], Result], items: Sequence[Item], workers: int) -> list[Result]:
    """``[function(item) for item in items]``, in ``workers`` processes when more than one.

    ``function`` must be picklable (a module-level function or a ``functools.partial`` of one).
    The first exception raised by any task is raised here.
    """
    if workers <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(workers, len(items)), mp_context=context) as pool:
        return list(pool.map(function, items))
