"""What a view op (Reshape, Squeeze, Unsqueeze, Flatten) costs a run on the host: twin chains of small kernels, one
plain and one with a view between every two kernels, timed as a user runs them (ORT_ENABLE_ALL, IO binding on the
device, settled). A view runs no GPU kernel (ORT aliases its output), but the executor still runs its node on the
host; in a host-bound run that time delays every later launch.

Each chain is N Add nodes on a [1, width] tensor (a few microseconds of GPU time each), and the twin puts a Reshape
(alternately [1, width] -> [8, width / 8] and back, the Add's constant shaped to match) or an Unsqueeze/Squeeze pair
between them. ``width`` large makes the kernels long enough for the GPU to fall behind the host, where the view's
host time should hide. The twins are timed in turns, ``--rounds`` times, so that the host's speed (which switches
within seconds on these machines) hits both alike.

    python3 results/gpu-general/view_cost_study.py OUT [--nodes 256] [--rounds 3] [--ep cuda]

Writes OUT/view_cost.json: per chain its median time per round, and per twin pair the cost per view op (us).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hase_dagster.core.config import TimingOptions
from hase_dagster.measure.runner import ModelRunner

SETTLED = TimingOptions(warmup=5, warmup_seconds=1.0, min_loops=50, max_loops=20000, min_seconds=1.5, max_seconds=3.0)


def chain(nodes: int, width: int, views: str) -> onnx.ModelProto:
    """``nodes`` Adds on [1, width]; ``views``: "none", "reshape" (one Reshape after each Add, the shape alternating)
    or "squeeze" (an Unsqueeze and a Squeeze after each Add: two views)."""
    graph_nodes, inits = [], []
    shapes = {"flat": [1, width], "folded": [8, width // 8]}
    for name, shape in shapes.items():
        inits.append(numpy_helper.from_array(np.array(shape, dtype=np.int64), f"shape_{name}"))
        inits.append(numpy_helper.from_array(np.full(shape, 0.5, dtype=np.float32), f"c_{name}"))
    inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
    current, layout, views_made = "x", "flat", 0
    for i in range(nodes):
        graph_nodes.append(helper.make_node("Add", [current, f"c_{layout}"], [f"a{i}"]))
        current = f"a{i}"
        if views == "reshape" and i < nodes - 1:
            layout = "folded" if layout == "flat" else "flat"
            graph_nodes.append(helper.make_node("Reshape", [current, f"shape_{layout}"], [f"r{i}"]))
            current, views_made = f"r{i}", views_made + 1
        elif views == "squeeze" and i < nodes - 1:
            graph_nodes.append(helper.make_node("Unsqueeze", [current, "axis1"], [f"u{i}"]))
            graph_nodes.append(helper.make_node("Squeeze", [f"u{i}", "axis1"], [f"s{i}"]))
            current, views_made = f"s{i}", views_made + 2
    if layout != "flat":
        graph_nodes.append(helper.make_node("Reshape", [current, "shape_flat"], ["y"]))
        views_made += 1
    else:
        graph_nodes.append(helper.make_node("Identity", [current], ["y"]))
    graph = helper.make_graph(
        graph_nodes,
        f"chain_{views}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.doc_string = json.dumps({"views": views_made, "adds": nodes})
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ep", default="cuda")
    parser.add_argument("--widths", default="64,262144,4194304", help="tensor widths: launch-bound to GPU-bound")
    args = parser.parse_args(argv)
    files = args.out / "files"
    files.mkdir(parents=True, exist_ok=True)
    cases: dict[str, dict] = {}
    for width in (int(w) for w in args.widths.split(",")):
        for views in ("none", "reshape", "squeeze"):
            model = chain(args.nodes, width, views)
            path = files / f"chain_w{width}_{views}.onnx"
            onnx.save(model, str(path))
            cases[path.stem] = {"width": width, "kind": views, **json.loads(model.doc_string), "rounds_ms": []}
    runners = {stem: ModelRunner(files / f"{stem}.onnx", args.ep, level="all") for stem in cases}
    for _ in range(args.rounds):
        for stem, runner in runners.items():
            cases[stem]["rounds_ms"].append(runner.time(SETTLED).median_ms)
    pairs = []
    for case in cases.values():
        if case["kind"] == "none":
            continue
        base = cases[f"chain_w{case['width']}_none"]
        extra = [v - b for v, b in zip(case["rounds_ms"], base["rounds_ms"], strict=True)]
        pairs.append(
            {
                "width": case["width"],
                "kind": case["kind"],
                "views": case["views"] - base["views"],
                "plain_ms": float(np.median(base["rounds_ms"])),
                "with_views_ms": float(np.median(case["rounds_ms"])),
                "us_per_view_by_round": [round(e * 1e3 / (case["views"] - base["views"]), 3) for e in extra],
                "us_per_add_plain": round(float(np.median(base["rounds_ms"])) * 1e3 / args.nodes, 3),
            }
        )
    (args.out / "view_cost.json").write_text(json.dumps({"cases": cases, "pairs": pairs}, indent=1))
    for p in pairs:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
