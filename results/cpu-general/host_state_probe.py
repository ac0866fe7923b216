"""Which host state is a host-bound run in, second by second, and does the core it runs on decide it? (issue 11)

The idle spread study (results/gpu-general/README.md, "Stride-2 wide groups, and what moves an idle batch-1
timing") found batch-1 timings in two states about 1.47x apart, switching within seconds, with the GPU at its top
clock. This probe runs one file back to back for ``--seconds`` in one session and writes, per run: when it ended,
its time, and the core the timing thread was on when it ended; per second: the host's steal and busy share
(psutil's CPU times). With ``--pin CORE`` the thread stays on one core. If the slow runs are those on some cores,
or come with steal, the state is the host's placement or its neighbours; if they switch on one pinned core with no
steal, it is the core's clock (turbo), which the guest cannot read.

Two host readings are taken on the same thread every ``--reading-every`` seconds, to see whether either follows the
network's state (a reading that does could calibrate a prediction to the host it is made for): the time of a fixed
pure-Python loop (the core's speed, no GPU) and one run of a chain of ``--chain`` tiny elementwise kernels on the
same EP (the launch rate).

    python3 results/cpu-general/host_state_probe.py FILE.onnx OUT.json [--seconds 60] [--pin 3] [--ep cuda]

Writes OUT.json at the end (``runs``: [end_s, ms, cpu], ``seconds``: [t_s, steal_share, busy_share],
``readings``: [t_s, loop_ms, chain_ms]).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import onnx
import psutil
from onnx import TensorProto, helper

from hase_dagster.core.config import OrtOptions
from hase_dagster.measure.host_speed import loop_ms  # the pure-Python loop (the core's speed)
from hase_dagster.measure.runner import ModelRunner


def cpu_shares(before: Any, after: Any) -> tuple[float, float]:
    """The host's (steal, busy) shares of all CPU time between two ``psutil.cpu_times()`` readings."""
    spent = {field: getattr(after, field) - getattr(before, field) for field in after._fields}
    total = max(sum(spent.values()) - spent.get("guest", 0.0) - spent.get("guest_nice", 0.0), 1e-9)
    idle = spent["idle"] + spent.get("iowait", 0.0)
    steal = spent.get("steal", 0.0)
    return steal / total, (total - idle - steal) / total


def write_chain_model(path: Path, kernels: int) -> Path:
    """A [1, 64] float tensor through ``kernels`` alternating Add and Relu nodes: launch-bound on any GPU."""
    nodes, name = [], "x"
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    for i in range(kernels):
        out = f"t{i}"
        nodes.append(
            helper.make_node("Add", [name, "one"], [out]) if i % 2 == 0 else helper.make_node("Relu", [name], [out])
        )
        name = out
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 64])], initializer=[one],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pin", type=int, default=None, help="keep the timing thread on this core")
    parser.add_argument("--ep", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument("--reading-every", type=float, default=0.25, help="seconds between host readings")
    parser.add_argument("--chain", type=int, default=100, help="kernels in the launch-rate chain")
    args = parser.parse_args()
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    runner = ModelRunner(args.model, args.ep, OrtOptions(), level="all")
    chain_path = write_chain_model(args.out.with_suffix(".chain.onnx"), args.chain)
    # no graph optimisation: ORT would fuse the chain away, and the point is its launches
    chain = ModelRunner(chain_path, args.ep, OrtOptions(), level="disable")
    for _ in range(20):
        chain.sample()
    warm_until = time.perf_counter() + args.warmup_seconds
    while time.perf_counter() < warm_until:
        runner.sample()
    runs: list[tuple[float, float, int]] = []
    seconds: list[tuple[float, float, float]] = []
    readings: list[tuple[float, float, float]] = []
    start = time.perf_counter()
    this_process = psutil.Process()
    last_second, last_times = start, psutil.cpu_times()
    last_reading = start - args.reading_every
    while time.perf_counter() - start < args.seconds:
        ms = runner.sample()
        now = time.perf_counter()
        runs.append((round(now - start, 6), round(ms, 6), this_process.cpu_num()))
        if now - last_reading >= args.reading_every:
            readings.append((round(now - start, 6), round(loop_ms(), 6), round(chain.sample(), 6)))
            last_reading = time.perf_counter()
        if now - last_second >= 1.0:
            times = psutil.cpu_times()
            seconds.append((round(now - start, 3), *cpu_shares(last_times, times)))
            last_second, last_times = now, times
    args.out.write_text(
        json.dumps(
            {
                "model": args.model.name,
                "ep": args.ep,
                "pin": args.pin,
                "runs": runs,
                "seconds": seconds,
                "readings": readings,
            }
        )
        + "\n"
    )
    print(f"{len(runs)} runs in {args.seconds:.0f} s on cores {sorted({r[2] for r in runs})}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
