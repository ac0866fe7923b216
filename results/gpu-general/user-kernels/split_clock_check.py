"""On a GPU host: which clock the kernel benchmark gives Split files once an uneven Split has killed the device clock.

Writes six standalone Split files (SwinV2's cyclic shift, 4 + 60 rows, first; even three-way q/k/v splits of NesT's
and SwinV2's shapes; another uneven one; an even two-way one) and times them as the kernel benchmarks do (a child
process on the device clock, ``run_benchmarks(isolated=True)``), then prints and writes each file's clock and time.
With the key of bdac473 the even splits stay on the device clock; before it every file after the first death went to
the host clock.

    PYTHONPATH=/tmp/site:. python3 results/gpu-general/user-kernels/split_clock_check.py $OUT/split-clock
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.core.config import TelemetryOptions, TimingOptions
from hase_dagster.measure.benchmark import BenchmarkTarget, run_benchmarks
from hase_dagster.measure.telemetry import HOST_FIELDS, TelemetrySampler, metric_source

FILES: list[tuple[str, tuple[int, ...], int, list[int]]] = [
    ("uneven_shift_4_60", (64, 64, 64, 96), 1, [4, 60]),
    ("even_qkv_nest", (16, 16, 196, 3, 3, 32), 3, [1, 1, 1]),
    ("even_qkv_swin", (1024, 64, 3, 3, 32), 2, [1, 1, 1]),
    ("uneven_cls_1_196", (64, 197, 384), 1, [1, 196]),
    ("even_halves", (64, 232, 14, 14), 1, [116, 116]),
    ("uneven_shift_60_4", (64, 64, 64, 96), 2, [60, 4]),
]


def split_file(folder: Path, name: str, shape: tuple[int, ...], axis: int, sizes: list[int]) -> Path:
    """One Split of a float tensor of ``shape`` along ``axis`` into ``sizes``, the way a kernel file holds it."""
    outputs = []
    for i, size in enumerate(sizes):
        piece = list(shape)
        piece[axis] = size
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, piece))
    graph = helper.make_graph(
        [helper.make_node("Split", ["x", "split"], [o.name for o in outputs], axis=axis)],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        outputs,
        [numpy_helper.from_array(np.array(sizes, dtype=np.int64), "split")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    targets = [BenchmarkTarget(split_file(args.out, *spec), {"file": spec[0]}) for spec in FILES]
    timing = TimingOptions(warmup=10, min_loops=50, max_loops=500, min_seconds=0.2, max_seconds=1.0, clock="device")
    telemetry = TelemetryOptions(fields=list(HOST_FIELDS), background_window_s=0.05)
    with TelemetrySampler(metric_source("cpu", HOST_FIELDS), interval_s=0.05) as sampler:
        rows = run_benchmarks(targets, "cuda", sampler, timing, telemetry, isolated=True)
    summary = [
        {k: row.get(k) for k in ("file", "status", "clock", "mean_ms", "median_ms", "n", "error")} for row in rows
    ]
    for row in summary:
        print(row)
    (args.out / "split_clock.json").write_text(json.dumps(summary, indent=1))
    for path in args.out.glob("*.onnx"):
        path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
