"""Background load on the accelerator at an intensity in [0, 1], in a separate process group.

Intensity is the fraction of each period the device is kept busy: on a GPU by matrix products
(4096 x 4096, fp16), on a CPU by one busy worker process per core. The stressor process and its
workers ask the kernel to end them when their parent dies (PR_SET_PDEATHSIG), and :class:`Stressor`
ends the whole process group on exit, so no stressor outlives the run that started it.

Run directly: ``python -m hase_dagster.measure.stressor --device cpu --intensity 0.5 --duration 10``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable

from hase_dagster.core.errors import HaseError
from hase_dagster.core.processes import die_with_parent, stop_process_group

PERIOD_S = 0.02


def _duty_cycle(intensity: float, busy: Callable[[float], None], until: float) -> None:
    """Alternate ``busy(seconds)`` and sleep so that ``intensity`` of each period is busy."""
    while time.monotonic() < until:
        busy(intensity * PERIOD_S)
        idle = (1.0 - intensity) * PERIOD_S
        if idle > 0:
            time.sleep(idle)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def _cpu_worker(core: int, intensity: float, until: float, parent: int) -> None:
    die_with_parent()
    # The parent may have died between the fork and the line above, before the kernel knew to tell
    # this worker: then nobody would ever stop it.
    if os.getppid() != parent:
        os._exit(0)
    os.sched_setaffinity(0, {core})
    _duty_cycle(intensity, _spin, until)


def stress_cpu(intensity: float, duration: float, ready: Callable[[], None]) -> None:
    """One busy worker process pinned to each core, each busy ``intensity`` of the time.

    Pinning makes the load land on every core, including the one the measured work runs on,
    instead of the scheduler parking all workers beside it.
    """
    until = time.monotonic() + duration
    context = multiprocessing.get_context("fork")
    cores = sorted(os.sched_getaffinity(0))
    workers = [
        context.Process(target=_cpu_worker, args=(core, intensity, until, os.getpid()), daemon=True) for core in cores
    ]
    for worker in workers:
        worker.start()
    ready()
    for worker in workers:
        worker.join()


def stress_gpu(intensity: float, duration: float, ready: Callable[[], None], size: int = 4096) -> None:
    """Matrix products on GPU 0, busy ``intensity`` of each period."""
    try:
        import torch
    except ImportError:
        raise HaseError("CUDA is not available here: the GPU stressor needs torch, which is not installed") from None

    if not torch.cuda.is_available():
        raise HaseError("CUDA is not available here: the GPU stressor needs a CUDA GPU, and torch sees none")
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(4):
                torch.mm(a, b)
            torch.cuda.synchronize()

    busy(0.05)
    ready()
    _duty_cycle(intensity, busy, time.monotonic() + duration)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Load the accelerator at an intensity in [0, 1].")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--intensity", type=float, required=True)
    parser.add_argument("--duration", type=float, default=3600.0)
    args = parser.parse_args(argv)
    if not 0.0 <= args.intensity <= 1.0:
        parser.error(f"--intensity must be in [0, 1], got {args.intensity}")
    if not 0.0 < args.duration < float("inf"):
        parser.error(f"--duration must be a positive number of seconds, got {args.duration}")
    # SIGTERM ends this process and its workers at once, by the kernel's default action (which
    # die_with_parent sets, over an inherited SIG_IGN; the workers inherit it through fork): nothing
    # here needs cleaning up. A Python handler would only run between bytecodes, and a worker forked a
    # moment earlier loses a SIGTERM that lands before its interpreter has finished starting, so
    # Stressor.stop waited 5 s for its SIGKILL.
    die_with_parent()

    def ready() -> None:
        print("ready", flush=True)

    try:
        if args.intensity == 0.0:
            ready()
            time.sleep(args.duration)
        elif args.device == "cuda":
            stress_gpu(args.intensity, args.duration, ready)
        else:
            stress_cpu(args.intensity, args.duration, ready)
    except (HaseError, ImportError) as exc:
        # One line, the last one the parent reports (Stressor.start): no traceback.
        print(f"stressor: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


class Stressor:
    """Start the stressor at ``intensity`` on entry, end its whole process group on exit.

    ``wait_until_steady`` (given a function that reads the device load in %) blocks until two
    consecutive readings ``interval_s`` apart differ by less than ``tolerance`` points.
    """

    def __init__(self, device: str, intensity: float, startup_timeout_s: float = 60.0) -> None:
        if not 0.0 <= intensity <= 1.0:
            raise HaseError(f"stress intensity must be in [0, 1], got {intensity}")
        self.device = device
        self.intensity = intensity
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self.steady_load: float | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        if self.process is not None:
            raise HaseError("stressor already started")
        command = [
            sys.executable,
            "-m",
            "hase_dagster.measure.stressor",
            "--device",
            self.device,
            "--intensity",
            str(self.intensity),
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        line = self._readline(self.startup_timeout_s)
        if line is None or line.strip() != "ready":
            reason = self._failure(line)
            self.stop()
            raise HaseError(f"stressor on {self.device} did not start: {reason}")

    def _readline(self, timeout_s: float) -> str | None:
        """The next line of the stressor's stdout; "" at its end (it exited), None after ``timeout_s``."""
        import selectors

        assert self.process is not None and self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return None
        return self.process.stdout.readline()

    def _failure(self, line: str | None) -> str:
        """Why the stressor did not say ready, in one line: the last line of its stderr when it exited."""
        assert self.process is not None
        if line is None:
            return f"it did not say ready within {self.startup_timeout_s:g} s"
        try:
            self.process.wait(timeout=5)  # its stdout ended: it is exiting, let it finish writing stderr
        except subprocess.TimeoutExpired:
            return f"unexpected output {line.strip()!r}" if line.strip() else "its output ended but it did not exit"
        stderr = self.process.stderr.read() if self.process.stderr else ""
        last = next((text.strip() for text in reversed(stderr.splitlines()) if text.strip()), "")
        last = last.removeprefix("stressor: error: ")
        return last or line.strip() or f"it exited with status {self.process.returncode}"

    def wait_until_steady(
        self, read_load: Callable[[], float], interval_s: float = 0.5, tolerance: float = 10.0, timeout_s: float = 15.0
    ) -> float:
        """Block until the load reading settles; return the last reading."""
        deadline = time.monotonic() + timeout_s
        previous = read_load()
        while True:
            time.sleep(interval_s)
            current = read_load()
            if abs(current - previous) < tolerance or time.monotonic() > deadline:
                return current
            previous = current

    def stop(self) -> None:
        """End the stressor's whole process group: SIGTERM, then SIGKILL after 5 s."""
        if self.process is None:
            return
        try:
            stop_process_group(self.process, grace_s=5)
        finally:
            self.process = None

    def __enter__(self) -> Stressor:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
