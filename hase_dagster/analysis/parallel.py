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

from hase_dagster.core.processes import die_with_parent

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
    # Workers die with this process: a killed `hase materialize` leaves no analysis running.
    with ProcessPoolExecutor(min(workers, len(items)), mp_context=context, initializer=die_with_parent) as pool:
        return list(pool.map(function, items))
