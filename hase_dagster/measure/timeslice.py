"""How the GPU shares its time between processes, measured: a probe kernel spins on one SM reading
``%globaltimer`` back to back; whenever another context holds the GPU, the probe is not running
and its timeline shows a gap. The gaps are the co-tenant's time slices, the runs between them the
probe's own, and the probe's duty share is the fraction of wall time it ran.

Co-tenants: none (the probe's baseline), a second process spinning the same kernel (always
busy, so every switch is the scheduler's time slice), and Hase's GPU stressor at intensity 1
(matrix products with a synchronize every 4, a realistic busy neighbour).

Run directly as the co-tenant spinner: ``python -m hase_dagster.measure.timeslice --spin SECONDS``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from hase_dagster.core.errors import HaseError
from hase_dagster.core.processes import die_with_parent, stop_process_group

GAP_THRESHOLD_US = 5.0


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _distribution(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "count": len(values),
        "mean_us": statistics.fmean(values),
        "p10_us": _quantile(values, 0.10),
        "median_us": _quantile(values, 0.5),
        "p90_us": _quantile(values, 0.90),
        "max_us": max(values),
    }


def analyse_gaps(first_ns: int, last_ns: int, gaps: Sequence[tuple[int, int]], dropped: int = 0) -> dict[str, Any]:
    """Statistics of a probe's timeline: the gaps (the co-tenant's slices), the probe's runs between
    two gaps (its own slices; the partial first and last runs are left out) and its duty share.

    Args:
        first_ns: the probe's first timer reading.
        last_ns: its last reading.
        gaps: (start_ns, end_ns) of every gap, in order.
        dropped: gaps the probe could not record (its buffer was full); the share then counts only
            the recorded ones.
    """
    window = max(last_ns - first_ns, 1)
    lengths = [(end - start) / 1e3 for start, end in gaps]
    runs = [(gaps[i + 1][0] - gaps[i][1]) / 1e3 for i in range(len(gaps) - 1)]
    return {
        "window_ms": window / 1e6,
        "gaps": _distribution(lengths),
        "probe_runs": _distribution(runs),
        "probe_duty_share": 1.0 - sum(end - start for start, end in gaps) / window,
        "gaps_dropped": dropped,
        "switches_per_s": len(gaps) / (window / 1e9),
    }


class Spinner:
    """A second process that spins the probe kernel on the GPU for ``seconds`` (an always-busy
    co-tenant); its process group ends on exit."""

    def __init__(self, seconds: float, startup_timeout_s: float = 120.0) -> None:
        self.seconds = seconds
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Spinner:
        import selectors

        self.process = subprocess.Popen(
            [sys.executable, "-m", "hase_dagster.measure.timeslice", "--spin", str(self.seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            line = self.process.stdout.readline() if selector.select(self.startup_timeout_s) else None
        if line is None or line.strip() != "spinning":
            self.__exit__()
            raise HaseError(f"the co-tenant spinner did not start (said {line!r})")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is None:
            return
        try:
            stop_process_group(self.process, grace_s=10)
        finally:
            self.process = None


def measure_time_slices(duration_s: float = 1.5, threshold_us: float = GAP_THRESHOLD_US) -> dict[str, Any]:
    """The probe's timeline alone, beside a spinning second process and beside Hase's stressor at
    intensity 1, each for ``duration_s``.

    Returns:
        ``{"threshold_us", "duration_s", "scenarios": {name: analyse_gaps(...) or {"error": ...}}}``.
    """
    from hase_dagster.measure.stressor import Stressor
    from hase_dagster.measure.triton_kernels import gap_probe

    gap_probe(0.01, threshold_us)  # compile and load before anything is timed
    scenarios: dict[str, Any] = {}

    def run(name: str) -> None:
        probe = gap_probe(duration_s, threshold_us)
        scenarios[name] = analyse_gaps(probe["first_ns"], probe["last_ns"], probe["gaps"], probe["gaps_dropped"])

    run("alone")
    try:
        with Spinner(duration_s + 5.0):
            time.sleep(0.3)  # its kernel is running by now
            run("second process spinning")
    except HaseError as exc:
        scenarios["second process spinning"] = {"error": str(exc)}
    try:
        with Stressor("cuda", 1.0):
            time.sleep(0.3)
            run("hase stressor at 1.0")
    except HaseError as exc:
        scenarios["hase stressor at 1.0"] = {"error": str(exc)}
    return {"threshold_us": threshold_us, "duration_s": duration_s, "scenarios": scenarios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spin the gap probe on the GPU (a busy co-tenant).")
    parser.add_argument("--spin", type=float, required=True, help="seconds")
    args = parser.parse_args(argv)
    die_with_parent()  # SIGTERM at its default action: the spinner ends at once when stopped
    try:
        import torch

        from hase_dagster.measure.triton_kernels import gap_probe

        gap_probe(0.01)  # compiled before it says it spins
        print("spinning", flush=True)
        gap_probe(args.spin)
        torch.cuda.synchronize()
    except Exception as exc:  # one line for the parent, no traceback
        print(f"spinner: error: {' '.join(str(exc).split())}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
